"""Which folders a server may read images from, and a folder's listing, bounded and remembered.

A folder named in the app (typed in a folder box, or sent in a link) is someone's request to read the server's
disk: :func:`check_folder` takes it only under the folders this server reads (``VITLAB_FOLDERS``, an
``os.pathsep``-separated list; by default the home folder, the working folder at start and the folder
``VITLAB_DATA`` names), never the root of the file system, never with a ``..``, after symbolic links are resolved
(a link inside an allowed folder that points outside it is outside). The command line reads any folder its user
types (``vitlab cka --data /path``): the person at their own shell is not a stranger's link.

:func:`walk` lists a folder with :func:`os.scandir`, one entry at a time, and stops with a :class:`FolderTooBig`
error past ``VITLAB_FOLDER_FILES`` entries (files and folders of any name; default 100,000) or
``VITLAB_FOLDER_SECONDS`` seconds (default 10), in the app and the command line alike: ``data=/`` must not walk a
whole disk. :func:`cached` remembers a listing per folder (a few folders, least recently used first out) and
lists again only when one of the folders it walked has a new modification time (a file added, removed or
renamed anywhere in it) or :func:`forget` is called (the app's "Reload folder"): a rerun of a page does not walk
the folder again. A file rewritten in place under the same name changes no folder's time; its new content is
still read (a batch's cache key stats each file), but a page's result keyed by the listing is only renewed on
"Reload folder".
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import VitlabError

FOLDERS_ENV = "VITLAB_FOLDERS"
FILES_ENV = "VITLAB_FOLDER_FILES"
SECONDS_ENV = "VITLAB_FOLDER_SECONDS"
DEFAULT_FILES = 100_000  # ImageNet's validation set (50,000) fits; a home folder or a disk does not
DEFAULT_SECONDS = 10.0
CACHE_SIZE = 4  # folders remembered per process; a listing of 100,000 paths holds ~20 MB

try:
    _START = Path.cwd()  # "the working folder at server start": a later chdir does not widen what is read
except OSError:  # started in a folder since removed: relative paths and the default roots go without it
    _START = Path.home()


def _is_fs_root(path: Path) -> bool:
    return path == Path(path.anchor)


def _resolve(text: str | Path) -> Path:
    path = Path(text).expanduser()
    return (path if path.is_absolute() else _START / path).resolve()


def allowed_roots() -> tuple[Path, ...]:
    """The folders (resolved) under which the app reads images: ``VITLAB_FOLDERS`` when set, else the home folder,
    the working folder at start and the folder ``VITLAB_DATA`` names. A default that is the root of the file system
    (a service whose home is ``/``) is left out; ``VITLAB_FOLDERS=/`` opens the whole disk on purpose."""
    setting = os.environ.get(FOLDERS_ENV)
    if setting is not None and setting.strip():
        return tuple(dict.fromkeys(_resolve(p.strip()) for p in setting.split(os.pathsep) if p.strip()))
    candidates = [Path.home(), _START]
    data = os.environ.get("VITLAB_DATA", "").strip()
    if data and Path(data).expanduser().is_absolute() and ".." not in _parts(data):
        candidates.append(Path(data))
    roots = [_resolve(p) for p in candidates]
    return tuple(dict.fromkeys(r for r in roots if not _is_fs_root(r)))


def _parts(text: str) -> list[str]:
    return text.replace(os.sep, "/").replace("\\", "/").split("/")


def _shown(path: str | Path) -> str:
    """A path as printable text, as ``data.display_name`` (which imports this module): bytes that are not UTF-8
    become ``\\xNN`` escapes."""
    return str(path).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def check_folder(text: str | Path, *, roots: Iterable[str | Path] | None = None) -> Path:
    """The folder ``text`` names, resolved (``~`` expanded, symbolic links followed, relative to the working folder
    at start), when the app may read it: a VitlabError in words when it is empty, holds a ``..`` or a control
    character, is the root of the file system, is outside ``roots`` (default :func:`allowed_roots`) or is not a
    folder. Outside is said before missing: a link cannot learn what exists where the server does not read."""
    raw = str(text).strip()
    if not raw:
        raise VitlabError("no folder given: type the path of a folder of images")
    if any(ord(c) < 32 for c in raw):
        raise VitlabError(f"folder {_shown(raw)!r} holds a control character: type the folder's path as it is")
    if ".." in _parts(raw):
        raise VitlabError(f"folder '{_shown(raw)}' holds a '..': type the folder's own path, without '..'")
    try:
        path = _resolve(raw)
    except (OSError, RuntimeError, ValueError) as e:  # a symlink loop, a name the system refuses
        raise VitlabError(f"folder '{_shown(raw)}' cannot be resolved ({e}): type the path of a folder of images"
                          ) from None
    if _is_fs_root(path):
        raise VitlabError(f"folder '{_shown(path)}' is the root of the file system: choose a folder of images in it")
    allowed = tuple(_resolve(r) for r in roots) if roots is not None else allowed_roots()
    if not any(path.is_relative_to(r) for r in allowed):
        listed = ", ".join(_shown(r) for r in allowed) or "none"
        raise VitlabError(f"folder '{_shown(path)}' is outside the folders this server reads ({FOLDERS_ENV}: {listed})"
                          f": add it to {FOLDERS_ENV} to allow it")
    if not path.is_dir():
        what = "is not a folder" if path.exists() else "does not exist"
        raise VitlabError(f"folder '{_shown(path)}' {what}: type the path of a folder of images")
    return path


def _setting(name: str, default: float, kind: type) -> float:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = kind(text)
    except ValueError:
        value = 0
    if not value > 0 or value != value or value == float("inf"):
        whole = "a whole number" if kind is int else "a number of seconds"
        raise VitlabError(f"{name} must be {whole} above 0, not {text[:40]!r}: fix or unset it")
    return value


def limits() -> tuple[int, float]:
    """(entries, seconds): how much of a folder a listing may visit (``VITLAB_FOLDER_FILES``,
    ``VITLAB_FOLDER_SECONDS``)."""
    return int(_setting(FILES_ENV, DEFAULT_FILES, int)), float(_setting(SECONDS_ENV, DEFAULT_SECONDS, float))


Dirs = tuple[tuple[str, int], ...]  # every folder walked, with its modification time (ns) when it was read


class FolderTooBig(VitlabError):
    """A listing stopped at its bound; ``dirs``: the folder itself, with its time when it was read."""

    def __init__(self, message: str, dirs: Dirs):
        super().__init__(message)
        self.dirs = dirs


@dataclass(frozen=True)
class Walk:
    files: list[Path]  # entries named with one of the suffixes (not folders), in no particular order
    dirs: Dirs


def walk(root: str | Path, suffixes: Iterable[str], *, max_entries: int | None = None,
         max_seconds: float | None = None) -> Walk:
    """Every non-folder entry under ``root`` whose suffix (lower case) is in ``suffixes``: regular files, and also
    pipes, dead links and link loops (which then fail to load with their reason); symlinked folders are not
    followed (a loop cannot recurse), an unreadable sub-folder is passed over, as :func:`os.walk` does. Stops with a
    :class:`FolderTooBig` past ``max_entries`` entries or ``max_seconds`` (default :func:`limits`): one
    :func:`os.scandir` entry at a time, so a single folder of millions of files is not read whole first."""
    entries, seconds = limits()
    max_entries = entries if max_entries is None else max_entries
    max_seconds = seconds if max_seconds is None else max_seconds
    suffixes = frozenset(suffixes)
    t0, seen = time.monotonic(), 0
    files: list[Path] = []
    dirs: list[tuple[str, int]] = []
    stack = [Path(root)]

    def too_big(what: str) -> FolderTooBig:
        # remembered against the folder's own time only: checking every folder walked until the bound on each rerun
        # would cost about what the walk did
        return FolderTooBig(f"folder '{_shown(root)}' {what}: choose a smaller folder", tuple(dirs[:1]))

    while stack:
        folder = stack.pop()
        try:
            mtime = os.stat(folder).st_mtime_ns  # before reading it: a change while it is read is a later time
            it = os.scandir(folder)
        except OSError:
            continue
        dirs.append((str(folder), mtime))
        with it:
            for entry in it:
                seen += 1
                if seen > max_entries:
                    raise too_big(f"holds more than {max_entries:,} entries (files and folders; {FILES_ENV} "
                                  f"allows more)")
                if time.monotonic() - t0 > max_seconds:
                    raise too_big(f"took longer than {max_seconds:g} s to list ({seen:,} entries by then; "
                                  f"{SECONDS_ENV} allows longer)")
                try:
                    is_dir = entry.is_dir()
                except OSError:  # a link loop: listed, and named as unreadable when it is loaded
                    is_dir = False
                if is_dir:
                    if not entry.is_symlink():
                        stack.append(Path(entry.path))
                elif Path(entry.name).suffix.lower() in suffixes:
                    files.append(Path(entry.path))
    return Walk(files, tuple(dirs))


def _unchanged(dirs: Dirs) -> bool:
    for folder, mtime in dirs:
        try:
            if os.stat(folder).st_mtime_ns != mtime:
                return False
        except OSError:
            return False
    return True


_cache: OrderedDict[tuple, tuple[Dirs, Any]] = OrderedDict()
_lock = threading.Lock()


def cached(root: Path, build: Callable[[Path], tuple[Any, Dirs]]) -> Any:
    """``build(root)``'s value, remembered per folder, bound and ``build``, and built again only when a folder it
    walked has changed (one stat per folder walked, no listing) or after :func:`forget`. ``build`` returns (value,
    the folders walked); a value that is a VitlabError (a folder without images) is raised, and a
    :class:`FolderTooBig` is remembered with the folders walked until the bound, so that neither is walked again
    on every rerun."""
    key = (str(root), limits(), build)
    with _lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
    if hit is None or not _unchanged(hit[0]):
        try:
            value, dirs = build(root)
        except FolderTooBig as e:
            value, dirs = VitlabError(str(e)), e.dirs
        hit = (dirs, value)
        with _lock:
            _cache[key] = hit
            while len(_cache) > CACHE_SIZE:
                _cache.popitem(last=False)
    value = hit[1]
    if isinstance(value, VitlabError):
        raise VitlabError(str(value))  # a new exception each time: a raised one would keep growing its traceback
    return value


def forget(root: str | Path | None = None) -> None:
    """Drop the remembered listing of ``root`` (resolved), or of every folder: the next use lists it again."""
    with _lock:
        if root is None:
            _cache.clear()
            return
        for key in [k for k in _cache if k[0] == str(_resolve(root))]:
            del _cache[key]
