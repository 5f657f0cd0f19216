"""Output folders (``--out``): a rerun leaves only its own files, and vitlab touches nothing else there.

A command's outputs depend on its inputs (one chart per model pair, per layer, ...), so a second run into the same
folder may write fewer or other files than the first; the first run's extra charts would then sit beside the new
CSVs and look current. Each run records in ``.vitlab-files.json`` exactly the files its writers returned (and
``run.json``), with the size and modification time each had when written; the next run into that folder removes
those of them it did not write again. The folder may be one the user also keeps other files in (``--out ~``), so:

- a file is removed only when it is listed in the record, lies inside ``--out`` (no ``..``, no absolute path, no
  symbolic link on the way), is a regular file and not a symbolic link, and still has the size and modification
  time vitlab recorded (a file the user has since replaced or edited is theirs);
- a record that is not what vitlab writes (hand-edited, an older format, ``{"files": 5}``) is ignored with a
  notice: nothing is removed on its word;
- every file is written to a temporary file in the folder and renamed over its name (:func:`write_file`): a symbolic
  link named like an output (``run.json`` -> ``~/.bashrc``) is replaced by the file, its target is never written;
- a file vitlab did not write is never written over: a regular file (or a folder) with the name of an output that
  the record does not list with its current size and modification time (the user's ``cka.csv``, or vitlab's own
  edited since) stops the run with a VitlabError naming it, before anything is written (``run.json`` before
  anything is computed, the other names as they are given out, :class:`OutputNames`).

The names of one run's files are unique by construction (:class:`OutputNames`): two outputs never share a file, and
the count a command prints is the count of files it wrote.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import stat
import tempfile
from pathlib import Path

MANIFEST = ".vitlab-files.json"
FORMAT = "vitlab-outputs/2"  # records without it (vitlab < 2, which listed files by mtime) are not trusted


def check_out(out: str | Path) -> Path:
    """``out`` as a Path, or a VitlabError when it cannot be an output folder (an existing file, or a file on its
    way): called before any model runs, so a typo never costs the computation."""
    from ..errors import VitlabError

    out = Path(out).expanduser()
    probe = out
    while True:
        if probe.exists() or probe.is_symlink():
            if not probe.is_dir():
                what = "is a file" if probe == out else f"lies under '{probe}', which is a file"
                raise VitlabError(f"--out '{out}' {what}, not a folder; give a folder for the results")
            return out
        if probe.parent == probe:
            return out
        probe = probe.parent


class OutputNames:
    """File names for one run's outputs in ``out``, unique by construction.

    A name is the slug of what the file shows (a chart's stem, a method, a model's label) with the extension added
    after it, never by ``Path.with_suffix`` on a user string (which cuts at the last dot: ``rollout:max:0.9`` and
    ``rollout:max:0.5`` would both become ``rollout_max_0``). A slug keeps only letters, digits, ``.``, ``_``, ``-``,
    so stems that differ only in punctuation share one (models ``zoo:vit-cls`` and ``zoo:vit-cls␣``, checkpoints
    ``run 1.pth`` and ``run_1.pth``); the second such stem gets a short hash of its own text (the same in every run,
    so a rerun replaces its files) and :attr:`notes` says so. Names are compared case-folded, as macOS and Windows
    folders compare them; ``run.json`` and the record of written files are never given out.
    """

    RESERVED = ("run.json", MANIFEST)

    def __init__(self, out: str | Path):
        self.out = Path(out)
        self.notes: list[str] = []
        self._owner: dict[str, str] = {n.casefold(): "vitlab's own record" for n in self.RESERVED}
        self.given: list[Path] = []  # every path given out, in order (recorded if the run stops half-written)
        self._record: dict[str, list[int]] | None = None

    def paths(self, stem: str, *exts: str) -> list[Path]:
        """One path per extension for ``stem``, all with one base name that no earlier call was given."""
        from ..charts.common import slug

        base = slug(stem)
        digest = hashlib.sha1(stem.encode("utf-8", "surrogatepass")).hexdigest()
        # the same stem given twice (or a hash shared by chance) gets a counter after the hash
        short = f"{base}_{digest[:8]}"
        candidates = itertools.chain([base, short], (f"{short}_{k}" for k in itertools.count(2)))
        for cand in candidates:
            if not any(f"{cand}.{e}".casefold() in self._owner for e in exts):
                break
        if cand != base:
            taken = next(self._owner[f"{base}.{e}".casefold()] for e in exts if f"{base}.{e}".casefold() in self._owner)
            self.notes.append(f"output {stem!r} would share the file name '{base}' with {taken!r}: written as "
                              f"'{cand}'")
        paths = [self.out / f"{cand}.{e}" for e in exts]
        if self._record is None:
            self._record = read_record(self.out)[0]
        check_free(self.out, paths, self._record)  # before the caller writes any of them
        for e in exts:
            self._owner[f"{cand}.{e}".casefold()] = stem
        self.given += paths
        return paths

    def path(self, stem: str, ext: str) -> Path:
        """The path for ``stem`` with extension ``ext`` (see :meth:`paths`)."""
        return self.paths(stem, ext)[0]


def write_file(path: str | Path, data: bytes | str) -> Path:
    """Write ``data`` to ``path`` atomically (a temporary file in the same folder, renamed over ``path``): a reader
    never sees half a file, and a symbolic link at ``path`` is replaced, never followed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".vitlab-", suffix=".tmp")  # O_EXCL: never a link
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _relative(out: Path, path: str | Path) -> str | None:
    """``path`` relative to ``out`` when it is inside it (lexically), else None."""
    try:
        rel = Path(os.path.normpath(path)).relative_to(os.path.normpath(out))
    except ValueError:
        return None
    return None if not rel.parts or ".." in rel.parts else rel.as_posix()


def read_record(out: Path) -> tuple[dict[str, list[int]], str | None]:
    """The files an earlier run recorded in ``out`` ({relative path: [size, mtime_ns]}) and a notice when a record
    is there but is not one vitlab writes (then nothing is trusted)."""
    path = out / MANIFEST
    try:
        st = os.lstat(path)
    except OSError:
        return {}, None
    if not stat.S_ISREG(st.st_mode):
        return {}, f"ignored {path}: not a regular file (vitlab writes a plain JSON file there)"
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        return {}, f"ignored {path}: not a record vitlab writes ({type(e).__name__}); no earlier output removed"
    files = record.get("files") if isinstance(record, dict) else None
    ok = (isinstance(record, dict) and record.get("format") == FORMAT and isinstance(files, dict)
          and all(isinstance(k, str) and isinstance(v, list) and len(v) == 2 and all(type(x) is int for x in v)
                  for k, v in files.items()))
    if not ok:
        return {}, f"ignored {path}: not a record vitlab writes (format {FORMAT!r}); no earlier output removed"
    return files, None


def not_ours(out: Path, path: Path, record: dict[str, list[int]]) -> str | None:
    """Why vitlab may not write over ``path`` in ``out`` (None: nothing is there, a symbolic link is there, which
    :func:`write_file` replaces without following, or a regular file the record lists as vitlab wrote it)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"cannot be looked at ({e.strerror or e})"
    if stat.S_ISLNK(st.st_mode):
        return None
    rel = _relative(out, path)
    if stat.S_ISREG(st.st_mode):
        if rel is not None and rel in record and _removable(out, rel, record[rel]) is not None:
            return None
        return "was changed since vitlab wrote it" if rel in record else "is a file vitlab did not write"
    return "is a folder" if stat.S_ISDIR(st.st_mode) else "is not a regular file"


def check_free(out: str | Path, paths: list[str | Path], record: dict[str, list[int]] | None = None) -> None:
    """A VitlabError naming the first of ``paths`` that vitlab may not write over (:func:`not_ours`); ``record``:
    the folder's record of vitlab's files (read when not given). Called before anything is written."""
    from ..errors import VitlabError

    out = Path(out)
    if record is None:
        record = read_record(out)[0]
    for p in map(Path, paths):
        why = not_ours(out, p, record)
        if why is not None:
            raise VitlabError(f"--out '{out}': '{p.name}' is already there and {why}; vitlab never writes over a "
                              f"file it did not write: move '{p.name}' away, or choose another --out")


def remember(out: str | Path, paths: list[str | Path]) -> None:
    """Add the regular files among ``paths`` to ``out``'s record, beside what it lists: a run stopped after writing
    some files leaves them recorded as vitlab's, so that the next run may replace them."""
    out = Path(out)
    files, notice = read_record(out)
    if notice:
        files = {}
    for p in paths:
        rel = _relative(out, p)
        try:
            st = os.lstat(out / rel) if rel is not None else None
        except OSError:
            continue
        if st is not None and stat.S_ISREG(st.st_mode):
            files[rel] = [st.st_size, st.st_mtime_ns]
    try:
        write_file(out / MANIFEST, json.dumps({"format": FORMAT, "files": dict(sorted(files.items()))}, indent=1))
    except OSError:
        pass  # the folder cannot be written: then nothing new is in it either


def _removable(out: Path, rel: str, size_mtime: list[int]) -> Path | None:
    """The file ``rel`` names, when it may be removed (inside ``out`` with no link on the way, a regular file,
    unchanged since vitlab wrote it); else None."""
    if _relative(out, out / rel) != rel:
        return None  # absolute, '..', or not in normal form: a record vitlab did not write
    p = out / rel
    try:
        real_out = os.path.realpath(out)
        if os.path.realpath(p.parent) != os.path.normpath(os.path.join(real_out, os.path.dirname(rel))):
            return None  # a folder on the way is a symbolic link
        st = os.lstat(p)
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(st.st_mode) or [st.st_size, st.st_mtime_ns] != list(size_mtime):
        return None
    return p


def finish(out: str | Path, written: list[str | Path]) -> tuple[list[str], list[str]]:
    """Remove the files an earlier run recorded in ``out`` that this run did not write again, and record this run's
    files (``written``, the paths its writers returned, and ``run.json``). Returns (relative paths removed,
    notices)."""
    out = Path(out)
    mine: dict[str, list[int]] = {}
    for p in [*written, out / "run.json"]:
        rel = _relative(out, p)
        if rel is None:
            continue
        try:
            st = os.lstat(out / rel)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            mine[rel] = [st.st_size, st.st_mtime_ns]
    before, notice = read_record(out)
    notices = [notice] if notice else []
    removed = []
    for rel, size_mtime in before.items():
        if rel in mine or rel == MANIFEST:
            continue
        p = _removable(out, rel, size_mtime)
        if p is None:
            continue
        try:
            p.unlink()
            removed.append(rel)
        except OSError as e:
            notices.append(f"could not remove {p} ({e.strerror})")
    try:
        write_file(out / MANIFEST, json.dumps({"format": FORMAT, "files": dict(sorted(mine.items()))}, indent=1))
    except OSError as e:
        notices.append(f"could not record the files written in {out / MANIFEST} ({e.strerror or e})")
    return removed, notices
