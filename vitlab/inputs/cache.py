"""The disk cache of per-batch statistics and small activation sets.

One diskcache store under ``VITLAB_CACHE_DIR`` (default ``~/.cache/vitlab``), LRU-evicted beyond a size budget
(``VITLAB_CACHE_GB``, default 20). Values are dicts of numpy arrays stored as ``.npz`` bytes and read back with
``allow_pickle=False``: nothing in the cache folder is ever unpickled. Plain JSON-able metadata is stored as JSON.

The cache is an optimisation, so it heals instead of failing a run (docs/hardening.md):

- every entry is untrusted input (anyone who can write the folder can plant one): a value file is opened without
  following links and without blocking, and read only when it is a regular file of the size the index gives, no
  larger than the store's budget; an array entry is read only when each member is a stored (never compressed) ``.npy``
  whose header's shape × itemsize is its size, of a plain numeric dtype, and of the names and shapes the caller
  expects (:class:`BadEntry` otherwise);
- an entry that cannot be read (truncated file, damaged zip, wrong layout, a link, a FIFO, a device, an entry that
  would inflate) is a miss: it is dropped, recomputed, and reported once per store;
- a write that fails (disk full, file too large, read-only folder) is a warning: the results are still returned;
- only a damaged database (sqlite's "malformed" or "not a database") is moved out of the way on open, into a
  ``damaged-N`` folder the cache records (the cache starts empty); a full disk, a read-only folder, a lock or a
  file that cannot be opened are not damage: the cache is then read when its database can be read
  (:class:`ReadOnlyCache`), else the run goes on uncached, with one warning either way;
- :func:`clear` removes only what the cache made (its database files, diskcache's value files in its own shard
  folders, the folders it moved aside), even when diskcache cannot open them, and refuses a folder that holds no
  cache. Entries are only ever bytes and text: a pickled entry in a planted database is refused, never loaded.

Keys (:func:`make_key`) hold the store format and the versions of the libraries that change numbers (torch, timm,
Pillow, vitlab), so an upgrade never reuses stale entries.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import re
import sqlite3
import sys
import time
from pathlib import Path

import numpy as np

from ..errors import VitlabError
from .entries import ARRAY_KINDS, MIN_FILE, BadEntry, ReadOnlyCache, _is_plain, _open_folder, fetch, unpack
from .entries import _VALUE_PATH

__all__ = ["ARRAY_KINDS", "BadEntry", "MIN_FILE", "Store", "ReadOnlyCache", "clear", "fetch", "make_key", "pack",
           "unpack", "as_stored"]

# bump when the stored layout, image decoding or the numbers a forward gives change (2: safe decoding, shrink at
# decode; 3: capturing attention no longer unfuses timm's attention, so a ViT statistic formed in a forward that also
# captured attention probabilities was the unfused forward's and differs in the last bits from today's)
FORMAT = 3
DEFAULT_GB = 20.0
_DB_FILES = ("cache.db", "cache.db-wal", "cache.db-shm")
RECORD = "vitlab-cache.json"  # what the cache made besides diskcache's own files (damaged databases moved aside)
_SHARD = re.compile(r"[0-9a-f]{2}")  # diskcache's value files: ab/cd/<28 hex digits>.val (diskcache.Disk.filename)
_VALUE = re.compile(r"[0-9a-f]{28}\.val")
MAX_GB = 1_000_000.0  # a budget beyond a million GiB is a typo (and 1e10 GiB overflows sqlite's 64-bit integers)


def default_dir() -> Path:
    return Path(os.environ.get("VITLAB_CACHE_DIR") or Path.home() / ".cache" / "vitlab")


@functools.lru_cache(maxsize=1)
def library_versions() -> dict[str, str]:
    """Versions of the libraries whose upgrade can change a cached number (read from package metadata:
    importing torch here would slow every command that never runs a model)."""
    from importlib import metadata

    out = {}
    for dist in ("torch", "timm", "pillow", "vitlab"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "none"
    return out


def make_key(*parts: object) -> str:
    """A short stable key from its parts (fingerprints, batch keys, statistic keys), the format and the versions."""
    blob = json.dumps([FORMAT, library_versions(), *parts], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def size_budget_gb(text: str | None = None) -> float:
    """``VITLAB_CACHE_GB`` as a positive number of GiB (default 20); a one-line VitlabError otherwise."""
    text = os.environ.get("VITLAB_CACHE_GB", "") if text is None else text
    if not str(text).strip():
        return DEFAULT_GB
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (value > 0 and np.isfinite(value)):
        raise VitlabError(f"VITLAB_CACHE_GB={text!r} must be a positive number of GiB, e.g. VITLAB_CACHE_GB=20")
    if value > MAX_GB:
        raise VitlabError(f"VITLAB_CACHE_GB={text!r} is more than {MAX_GB:,.0f} GiB; give the budget in GiB, "
                          "e.g. VITLAB_CACHE_GB=20")
    return value


def pack(arrays: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **{k: np.asarray(v) for k, v in arrays.items()})
    return buf.getvalue()


def as_stored(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``arrays`` in the memory order they have after :func:`pack` and :func:`unpack` (``np.save`` keeps a C- or
    Fortran-ordered array as it is and writes any other in C order), so a statistic fresh from its forward and the
    same statistic read from the cache feed later reductions the same strides: numpy's pairwise sums follow the
    memory order, and a strided (L, H, B) stack summed over B differs from its C-ordered copy in the last bit."""
    out = {}
    for k, v in arrays.items():
        v = np.asarray(v)
        out[k] = v if v.flags.c_contiguous or v.flags.f_contiguous else np.ascontiguousarray(v)
    return out


# sqlite's primary result codes for damaged files; everything else (full, read-only, cannot open, locked, busy,
# I/O) says nothing about the database itself and must never cost a good cache
_CORRUPT_CODES = (11, 26)  # SQLITE_CORRUPT ("database disk image is malformed"), SQLITE_NOTADB ("not a database")


def _corrupt_db(e: Exception) -> bool:
    """A database error that means damaged files, not a full disk, a read-only folder, a lock or a missing file."""
    if not isinstance(e, sqlite3.DatabaseError):
        return False
    code = getattr(e, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in _CORRUPT_CODES
    text = str(e).lower()
    return "malformed" in text or "not a database" in text


def _safe_disk():
    """diskcache's Disk that refuses pickled values and keys: a cache folder shared with others (or a planted
    ``cache.db``) must never run code. vitlab stores only bytes and str, which diskcache keeps raw."""
    import diskcache
    from diskcache.core import MODE_PICKLE

    class SafeDisk(diskcache.Disk):
        def fetch(self, mode, filename, value, read):
            if mode == MODE_PICKLE:
                raise ValueError("a pickled cache entry (vitlab never writes one): not read")
            return super().fetch(mode, filename, value, read)

        def get(self, key, raw):
            if not raw:
                raise ValueError("a pickled cache key (vitlab never writes one): not read")
            return super().get(key, raw)

    return SafeDisk


class Store:
    """Arrays and JSON by key; ``Store(None)`` is a no-op store (``--no-cache``).

    ``mode``: ``"rw"``, ``"ro"`` (a cache this process cannot write: a read-only or full folder; it is read and
    nothing new is stored) or ``"off"`` (none, or one that cannot even be read: the run goes on uncached)."""

    def __init__(self, directory: str | Path | None = "default", size_gb: float | None = None):
        self.enabled = directory is not None
        self._cache = None
        self.mode = "off"
        self.warnings: list[str] = []
        self._bad_reads = 0
        self._bad_kinds: set[str] = set()
        if not self.enabled:
            return
        self.directory = Path(default_dir() if directory == "default" else directory).expanduser()
        self.size_gb = size_budget_gb() if size_gb is None else size_budget_gb(str(size_gb))
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._cache, self.mode = self._open(), "rw"
            return
        except (OSError, sqlite3.Error) as e:
            if not _corrupt_db(e):
                self._fall_back(e)
                return
            damage = e
        try:
            moved = _move_aside(self.directory)
        except OSError as e:  # a read-only folder cannot take a damaged-N: go on without the cache
            self._warn(f"the cache database in '{self.directory}' is unreadable ({damage}) and cannot be moved aside "
                       f"({e.strerror or e}); this run goes on uncached")
            return
        self._warn(f"the cache database in '{self.directory}' was unreadable ({damage}); moved it to '{moved}' and "
                   "started an empty cache")
        try:
            self._cache, self.mode = self._open(), "rw"
        except (OSError, sqlite3.Error) as e:
            self._fall_back(e)

    def _open(self):
        import diskcache

        return diskcache.Cache(str(self.directory), size_limit=int(self.size_gb * 2**30), disk=_safe_disk(),
                               eviction_policy="least-recently-used", disk_min_file_size=MIN_FILE)

    def _fall_back(self, e: Exception) -> None:
        """The cache cannot be opened for writing (full disk, read-only folder, lock, permissions): read it when its
        database can be read, else go on without one; one warning either way."""
        why = f"{type(e).__name__}: {getattr(e, 'strerror', None) or e}"
        try:
            self._cache, self.mode = ReadOnlyCache(self.directory), "ro"
        except (OSError, sqlite3.Error, ValueError):
            self._cache, self.mode = None, "off"
            self._warn(f"cannot use the cache in '{self.directory}' ({why}); this run goes on uncached, its results "
                       "are written")
            return
        self._warn(f"cannot write to the cache in '{self.directory}' ({why}); it is read, and nothing new is stored")

    def _warn(self, text: str) -> None:
        if text not in self.warnings:
            self.warnings.append(text)
            print(f"vitlab: warning: {text}", file=sys.stderr)

    def _query(self, sql: str, args: tuple = ()):
        """One row from the index, on this thread's connection (diskcache's own ``_sql``, stable through diskcache
        5.x, or the read-only one): vitlab reads entries itself, so that nothing is read before it is checked."""
        if isinstance(self._cache, ReadOnlyCache):
            return self._cache._query(sql, args)
        return self._cache._sql(sql, args).fetchone()

    def _read(self, key: str, decode):
        if self._cache is None:
            return None
        try:
            found = fetch(self._query, self.directory, key, int(self.size_gb * 2**30))
            if found is None:
                return None
            value = decode(found[1])
        except sqlite3.OperationalError as e:  # a lock or a busy database says nothing about the entry: a plain miss
            if not _corrupt_db(e):
                return None
            self.bad_entry("cache entries", e, key)
            return None
        except Exception as e:  # noqa: BLE001 - any damage (zip, JSON, link, FIFO, shape, sqlite) is a miss
            self.bad_entry("cache entries", e, key)
            return None
        if self.mode == "rw":  # least-recently-used eviction: a read is a use (as diskcache's own get records it)
            try:
                self._cache._sql("UPDATE Cache SET access_time = ? WHERE rowid = ?", (time.time(), found[0]))
            except sqlite3.Error:
                pass
        return value

    @property
    def bad_reads(self) -> int:
        """How many entries this store has found unreadable (and dropped) so far."""
        return self._bad_reads

    def bad_entry(self, what: str, e: Exception, key: str | None = None) -> None:
        """An entry that is not what its reader expects: dropped (when the cache can be written) and said once per
        kind (``what``: "cache entries", "saved results"), with the first reason; the caller recomputes it. ``key``:
        the store's own key ("a:..." for arrays, "j:..." for JSON)."""
        self._bad_reads += 1
        if key is not None:
            self._drop(key)
        if what not in self._bad_kinds:
            self._bad_kinds.add(what)
            self._warn(f"unreadable {what} are recomputed (first: {type(e).__name__}: {str(e)[:160]})")

    def _drop(self, key: str) -> None:
        """Remove ``key``'s row and its value file, never following a link (a planted link, FIFO or device node is
        itself removed, never what it points to)."""
        if self._cache is None or self.mode != "rw":
            return
        try:
            row = self._query("SELECT rowid, filename FROM Cache WHERE key = ? AND raw = 1", (key,))
            if row is None:
                return
            self._cache._sql("DELETE FROM Cache WHERE rowid = ?", (row[0],))
        except sqlite3.Error:  # a damaged database may refuse the delete too; still a miss
            return
        filename = str(row[1] or "").replace(os.sep, "/")
        if not _VALUE_PATH.fullmatch(filename):
            return
        *folders, name = filename.split("/")
        try:
            fd = _open_folder(self.directory, folders)
        except (OSError, BadEntry):
            return  # a linked or missing folder: the row is gone, the file is never read again
        try:
            os.unlink(name, dir_fd=fd)
        except OSError:
            pass
        finally:
            os.close(fd)

    def _write(self, key: str, value) -> None:
        if self._cache is None or self.mode != "rw":  # read-only: said once when it was opened
            return
        try:
            self._cache.set(key, value)
        except Exception as e:  # noqa: BLE001 - disk full, file too large, read-only: the result itself is kept
            self._warn(f"cannot write to the cache in '{self.directory}' ({type(e).__name__}: {e}); results are "
                       "still written, but will be recomputed next time")

    def get(self, key: str, shapes: dict[str, tuple] | None = None,
            kinds: str = ARRAY_KINDS) -> dict[str, np.ndarray] | None:
        """The arrays under ``key``, or None (absent, or not what :func:`unpack` accepts: then dropped and said);
        ``shapes``: the names and shapes the caller expects (``None`` for a free axis)."""
        def decode(blob):
            if not isinstance(blob, bytes):
                raise BadEntry("text where arrays belong")
            return unpack(blob, shapes, kinds)

        return self._read("a:" + key, decode)

    def put(self, key: str, arrays: dict[str, np.ndarray]) -> None:
        self._write("a:" + key, pack(arrays))

    def get_json(self, key: str):
        def decode(text):
            if not isinstance(text, str):
                raise BadEntry("bytes where JSON belongs")
            return json.loads(text)

        return self._read("j:" + key, decode)

    def put_json(self, key: str, value) -> None:
        self._write("j:" + key, json.dumps(value))

    def info(self) -> dict:
        """What is in the cache ({"enabled": False, ...} when there is none); never raises."""
        if self._cache is None:
            return {"enabled": False, "mode": self.mode, "directory": str(getattr(self, "directory", "")) or None}
        try:
            return {"enabled": True, "mode": self.mode, "directory": str(self.directory), "entries": len(self._cache),
                    "bytes": int(self._cache.volume()), "size_limit": int(self._cache.size_limit)}
        except (OSError, sqlite3.Error) as e:
            return {"enabled": False, "mode": self.mode, "directory": str(self.directory),
                    "error": f"{type(e).__name__}: {e}"}

    def clear(self) -> int:
        """Empty this cache (see :func:`clear`); the number of entries or files removed."""
        if self._cache is None:
            return 0
        self._cache.close()
        try:
            return clear(self.directory)[0]
        finally:
            self._cache = self._open() if self.mode == "rw" else ReadOnlyCache(self.directory)

    def close(self) -> None:
        if self._cache is not None:
            self._cache.close()


def _record(directory: Path) -> dict:
    """The cache's own record of what it made besides diskcache's files (folders it moved aside)."""
    try:
        rec = json.loads((directory / RECORD).read_text())
    except (OSError, ValueError):
        return {"moved_aside": []}
    ok = isinstance(rec, dict) and isinstance(rec.get("moved_aside"), list)
    return rec if ok and all(isinstance(n, str) for n in rec["moved_aside"]) else {"moved_aside": []}


def _write_record(directory: Path, rec: dict) -> None:
    from .outdir import write_file

    if rec["moved_aside"]:
        write_file(directory / RECORD, json.dumps(rec, indent=1))
    elif (directory / RECORD).is_file():
        (directory / RECORD).unlink()


def _move_aside(directory: Path) -> Path:
    """Rename the damaged database files (kept for inspection, never read again) into a new ``damaged-N`` folder,
    recorded in the cache's record so that ``cache clear`` removes it; return the folder."""
    n = 0
    while (target := directory / f"damaged-{n}").exists() or target.is_symlink():
        n += 1
    target.mkdir()
    rec = _record(directory)
    rec["moved_aside"].append(target.name)
    _write_record(directory, rec)
    for name in _DB_FILES:
        if (directory / name).exists():
            (directory / name).rename(target / name)
    return target


def _remove_shards(directory: Path) -> int:
    """diskcache's value files, named as diskcache names them (``ab/cd/<28 hex digits>.val``), and the shard
    folders they leave empty; anything else in those folders (a user's ``00/`` of photos) stays."""
    removed = 0
    for d1 in directory.iterdir():
        if not (_SHARD.fullmatch(d1.name) and _is_plain(d1, True)):
            continue
        for d2 in d1.iterdir():
            if not (_SHARD.fullmatch(d2.name) and _is_plain(d2, True)):
                continue
            for f in d2.iterdir():
                if _VALUE.fullmatch(f.name) and _is_plain(f, False):
                    f.unlink()
                    removed += 1
            _rmdir_if_empty(d2)
        _rmdir_if_empty(d1)
    return removed


def _rmdir_if_empty(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass  # not empty: something the cache did not make is in it


def remove_files(directory: str | Path) -> int:
    """Remove what the cache made in ``directory`` without opening its database: the database files, diskcache's
    value files and shard folders (as diskcache names them), and the folders the cache moved aside (as its record
    lists them). Nothing else. Returns the files removed."""
    directory = Path(directory)
    removed = 0
    for name in _DB_FILES:
        if _is_plain(directory / name, False) or (directory / name).is_symlink():
            (directory / name).unlink()
            removed += 1
    return removed + _remove_shards(directory) + remove_files_aside(directory)


def remove_files_aside(directory: Path) -> int:
    """Remove the folders the cache moved a damaged database into (listed in its record, and only the database
    files in them); returns the files removed."""
    rec, n, kept = _record(directory), 0, []
    for name in rec["moved_aside"]:
        sub = directory / name
        if not (re.fullmatch(r"damaged-\d+", name) and _is_plain(sub, True)):
            continue
        for f in _DB_FILES:
            if _is_plain(sub / f, False):
                (sub / f).unlink()
                n += 1
        _rmdir_if_empty(sub)
        if sub.exists():
            kept.append(name)
    _write_record(directory, {**rec, "moved_aside": kept})
    return n


def holds_cache(directory: Path) -> bool:
    """Whether ``directory`` holds a vitlab cache: its database, or folders its record says it moved aside."""
    return (directory / "cache.db").exists() or (directory / "cache.db").is_symlink() or \
        bool(_record(directory)["moved_aside"])


def clear(directory: str | Path | None = None) -> tuple[int, str]:
    """Empty the cache at ``directory`` (default: the default folder), however damaged: (count, how). Removes only
    what the cache made; a folder that holds no cache is refused (VitlabError), and so is a cache that cannot be
    changed (read-only, full disk), with the reason."""
    directory = Path(directory or default_dir()).expanduser()
    if not directory.exists():
        return 0, "entries (there is no cache folder)"
    if not directory.is_dir():
        raise VitlabError(f"the cache folder '{directory}' is a file; nothing was removed")
    if not holds_cache(directory):
        raise VitlabError(f"'{directory}' holds no vitlab cache (no cache.db); nothing was removed. Give the cache "
                          "folder (VITLAB_CACHE_DIR or --cache-dir)")
    try:
        try:
            if not (directory / "cache.db").exists():
                return remove_files_aside(directory), "files (moved-aside databases)"
            import diskcache

            with diskcache.Cache(str(directory), disk=_safe_disk()) as c:
                n = int(c.clear())
            # clear() leaves damaged databases moved aside by Store: remove them as well
            return n + remove_files_aside(directory), "entries"
        except (sqlite3.Error, OSError, ValueError) as e:
            if not (isinstance(e, ValueError) or _corrupt_db(e)):
                raise
            return remove_files(directory), "files (the database was unreadable)"
    except (sqlite3.Error, OSError) as e:
        raise VitlabError(f"cannot clear the cache in '{directory}' ({type(e).__name__}: "
                          f"{getattr(e, 'strerror', None) or e}); check that the folder is writable and the disk "
                          "has room") from e
