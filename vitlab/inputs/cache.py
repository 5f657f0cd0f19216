"""The disk cache of per-batch statistics and small activation sets.

One diskcache store under ``VITLAB_CACHE_DIR`` (default ``~/.cache/vitlab``), LRU-evicted beyond a size budget
(``VITLAB_CACHE_GB``, default 20). Values are dicts of numpy arrays stored as ``.npz`` bytes and read back with
``allow_pickle=False``: nothing in the cache folder is ever unpickled. Plain JSON-able metadata is stored as JSON.

The cache is an optimisation, so it heals instead of failing a run (docs/hardening.md):

- an entry that cannot be read (truncated file, damaged zip, wrong layout) is a miss: it is dropped, recomputed,
  and reported once per store;
- a write that fails (disk full, file too large, read-only folder) is a warning: the results are still returned;
- a ``cache.db`` that is not a database is moved out of the way on open (the cache starts empty), and
  :func:`clear` removes the store's files even when diskcache cannot open them.

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
import shutil
import sqlite3
import sys
from pathlib import Path

import numpy as np

from ..errors import VitlabError

FORMAT = 2  # bump when the stored layout or image decoding changes (2: safe decoding, shrink at decode)
DEFAULT_GB = 20.0
_DB_FILES = ("cache.db", "cache.db-wal", "cache.db-shm")


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
    return value


def pack(arrays: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **{k: np.asarray(v) for k, v in arrays.items()})
    return buf.getvalue()


def unpack(blob: bytes) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(blob), allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def _corrupt_db(e: Exception) -> bool:
    """A database error that means damaged files (not a lock held by another process, which resolves itself)."""
    text = str(e).lower()
    return isinstance(e, sqlite3.DatabaseError) and not ("locked" in text or "busy" in text)


class Store:
    """Arrays and JSON by key; ``Store(None)`` is a no-op store (``--no-cache``)."""

    def __init__(self, directory: str | Path | None = "default", size_gb: float | None = None):
        self.enabled = directory is not None
        self._cache = None
        self.warnings: list[str] = []
        self._bad_reads = 0
        if not self.enabled:
            return
        self.directory = Path(default_dir() if directory == "default" else directory).expanduser()
        self.size_gb = size_budget_gb() if size_gb is None else size_gb
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._cache = self._open()
        except OSError as e:
            raise VitlabError(f"cannot open the cache folder '{self.directory}': {e}; set VITLAB_CACHE_DIR") from e
        except sqlite3.DatabaseError as e:
            if not _corrupt_db(e):
                raise VitlabError(f"the cache '{self.directory}' is busy ({e}); try again, or use --no-cache") from e
            moved = _move_aside(self.directory)
            self._warn(f"the cache database in '{self.directory}' was unreadable ({e}); moved it to '{moved}' and "
                       "started an empty cache")
            self._cache = self._open()

    def _open(self):
        import diskcache

        return diskcache.Cache(str(self.directory), size_limit=int(self.size_gb * 2**30),
                               eviction_policy="least-recently-used", disk_min_file_size=1 << 16)

    def _warn(self, text: str) -> None:
        if text not in self.warnings:
            self.warnings.append(text)
            print(f"vitlab: warning: {text}", file=sys.stderr)

    def _read(self, key: str, decode):
        if self._cache is None:
            return None
        try:
            blob = self._cache.get(key)
            return None if blob is None else decode(blob)
        except Exception as e:  # noqa: BLE001 - any damage (zip, JSON, missing value file, sqlite) is a miss
            self._bad_reads += 1
            try:
                self._cache.delete(key)
            except Exception:  # noqa: BLE001, S110 - a damaged database may refuse the delete too; still a miss
                pass
            self._warn(f"unreadable cache entries are recomputed (first: {type(e).__name__}: {str(e)[:120]})")
            return None

    def _write(self, key: str, value) -> None:
        if self._cache is None:
            return
        try:
            self._cache.set(key, value)
        except Exception as e:  # noqa: BLE001 - disk full, file too large, read-only: the result itself is kept
            self._warn(f"cannot write to the cache in '{self.directory}' ({type(e).__name__}: {e}); results are "
                       "still written, but will be recomputed next time")

    def get(self, key: str) -> dict[str, np.ndarray] | None:
        return self._read("a:" + key, unpack)

    def put(self, key: str, arrays: dict[str, np.ndarray]) -> None:
        self._write("a:" + key, pack(arrays))

    def get_json(self, key: str):
        return self._read("j:" + key, json.loads)

    def put_json(self, key: str, value) -> None:
        self._write("j:" + key, json.dumps(value))

    def info(self) -> dict:
        if self._cache is None:
            return {"enabled": False}
        return {"enabled": True, "directory": str(self.directory), "entries": len(self._cache),
                "bytes": int(self._cache.volume()), "size_limit": int(self._cache.size_limit)}

    def clear(self) -> int:
        if self._cache is None:
            return 0
        try:
            return int(self._cache.clear())
        except Exception:  # noqa: BLE001 - clearing must always work: fall back to removing the files
            self._cache.close()
            removed = remove_files(self.directory)
            self._cache = self._open()
            return removed

    def close(self) -> None:
        if self._cache is not None:
            self._cache.close()


def _move_aside(directory: Path) -> Path:
    """Rename the damaged database files (kept for inspection, never read again); return the new folder."""
    n = 0
    while (target := directory / f"damaged-{n}").exists():
        n += 1
    target.mkdir()
    for name in _DB_FILES:
        if (directory / name).exists():
            (directory / name).rename(target / name)
    return target


def remove_files(directory: str | Path) -> int:
    """Remove what diskcache keeps in ``directory`` (its database, its value files in two-hex-digit folders, and
    damaged databases moved aside) without opening it; other files are left alone. Returns the files removed."""
    directory = Path(directory)
    removed = 0
    for name in _DB_FILES:
        if (directory / name).exists():
            (directory / name).unlink()
            removed += 1
    for sub in directory.iterdir() if directory.is_dir() else ():
        if sub.is_dir() and (re.fullmatch(r"[0-9a-f]{2}", sub.name) or sub.name.startswith("damaged-")):
            removed += sum(1 for p in sub.rglob("*") if p.is_file())
            shutil.rmtree(sub)
    return removed


def clear(directory: str | Path | None = None) -> tuple[int, str]:
    """Empty the cache at ``directory`` (default: the default folder), however damaged: (count, how)."""
    directory = Path(directory or default_dir()).expanduser()
    if not directory.is_dir():
        return 0, "nothing to clear"
    try:
        import diskcache

        with diskcache.Cache(str(directory)) as c:
            n = int(c.clear())
        # clear() leaves damaged databases moved aside by Store: remove them as well
        return n + remove_files_aside(directory), "entries"
    except Exception:  # noqa: BLE001 - an unreadable database: remove its files instead
        return remove_files(directory), "files (the database was unreadable)"


def remove_files_aside(directory: Path) -> int:
    n = 0
    for sub in directory.glob("damaged-*"):
        if sub.is_dir():
            n += sum(1 for p in sub.rglob("*") if p.is_file())
            shutil.rmtree(sub)
    return n
