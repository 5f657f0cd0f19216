"""The disk cache of per-batch statistics and small activation sets.

One diskcache store under ``VITLAB_CACHE_DIR`` (default ``~/.cache/vitlab``), LRU-evicted beyond a size budget
(``VITLAB_CACHE_GB``, default 20). Values are dicts of numpy arrays stored as ``.npz`` bytes and read back with
``allow_pickle=False``: nothing in the cache folder is ever unpickled. Plain JSON-able metadata is stored as JSON.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path

import numpy as np

from .errors import VitlabError

FORMAT = 1  # bump when the stored layout changes


def default_dir() -> Path:
    return Path(os.environ.get("VITLAB_CACHE_DIR") or Path.home() / ".cache" / "vitlab")


def make_key(*parts: object) -> str:
    """A short stable key from its parts (fingerprints, batch keys, statistic keys)."""
    blob = json.dumps([FORMAT, *parts], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def pack(arrays: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **{k: np.asarray(v) for k, v in arrays.items()})
    return buf.getvalue()


def unpack(blob: bytes) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(blob), allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


class Store:
    """Arrays and JSON by key; ``Store(None)`` is a no-op store (``--no-cache``)."""

    def __init__(self, directory: str | Path | None = "default", size_gb: float | None = None):
        self.enabled = directory is not None
        self._cache = None
        if not self.enabled:
            return
        import diskcache

        self.directory = Path(default_dir() if directory == "default" else directory).expanduser()
        size_gb = float(os.environ.get("VITLAB_CACHE_GB", 20)) if size_gb is None else size_gb
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._cache = diskcache.Cache(str(self.directory), size_limit=int(size_gb * 2**30),
                                          eviction_policy="least-recently-used", disk_min_file_size=1 << 16)
        except OSError as e:
            raise VitlabError(f"cannot open the cache folder '{self.directory}': {e}; set VITLAB_CACHE_DIR") from e

    def get(self, key: str) -> dict[str, np.ndarray] | None:
        if self._cache is None:
            return None
        blob = self._cache.get("a:" + key)
        return None if blob is None else unpack(blob)

    def put(self, key: str, arrays: dict[str, np.ndarray]) -> None:
        if self._cache is not None:
            self._cache.set("a:" + key, pack(arrays))

    def get_json(self, key: str):
        if self._cache is None:
            return None
        blob = self._cache.get("j:" + key)
        return None if blob is None else json.loads(blob)

    def put_json(self, key: str, value) -> None:
        if self._cache is not None:
            self._cache.set("j:" + key, json.dumps(value))

    def info(self) -> dict:
        if self._cache is None:
            return {"enabled": False}
        return {"enabled": True, "directory": str(self.directory), "entries": len(self._cache),
                "bytes": int(self._cache.volume()), "size_limit": int(self._cache.size_limit)}

    def clear(self) -> int:
        return 0 if self._cache is None else int(self._cache.clear())

    def close(self) -> None:
        if self._cache is not None:
            self._cache.close()
