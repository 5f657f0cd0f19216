"""A store that also keeps in memory, for one planned piece of work, what was put into it.

A planner (the tour: ``vitlab.tour.plan``) streams every statistic its steps need on one model and one image set
in a single pass; each step then streams its own statistics as before and finds them under their own cache keys.
With the disk cache on, the entries are on disk anyway; with ``--no-cache`` (``Store(None)``) or a read-only cache
they would be gone, so :class:`MemoStore` keeps what was put, packed as the disk cache packs it: a step reads the
same arrays (same dtype, same memory order) whether they came from the pass, from disk or from its own forward.

    memo = MemoStore(run.store)
    run = dataclasses.replace(run, store=memo)   # same info, shard and progress; the memo lives with this run

Memory: the per-batch statistics of the planned passes (Grams, sums, per-image features), never activations.
"""

from __future__ import annotations

import json

import numpy as np

from ..inputs.cache import Store, pack, unpack
from ..inputs.entries import ARRAY_KINDS, BadEntry


class MemoStore:
    """``inner`` (a :class:`~vitlab.inputs.cache.Store`) with every entry put through this object also kept in
    memory; reads look in memory first. Everything else (``warnings``, ``mode``, ``info`` ...) is the inner
    store's."""

    def __init__(self, inner: Store):
        self.inner = inner
        self._arrays: dict[str, bytes] = {}
        self._json: dict[str, str] = {}

    def get(self, key: str, shapes: dict[str, tuple] | None = None,
            kinds: str = ARRAY_KINDS) -> dict[str, np.ndarray] | None:
        blob = self._arrays.get(key)
        if blob is None:
            return self.inner.get(key, shapes, kinds)
        try:
            return unpack(blob, shapes, kinds)
        except BadEntry:  # another layout than the caller expects: a miss, as on disk
            return None

    def put(self, key: str, arrays: dict[str, np.ndarray]) -> None:
        self._arrays[key] = pack(arrays)
        self.inner.put(key, arrays)

    def get_json(self, key: str):
        text = self._json.get(key)
        return self.inner.get_json(key) if text is None else json.loads(text)

    def put_json(self, key: str, value) -> None:
        self._json[key] = json.dumps(value)
        self.inner.put_json(key, value)

    @property
    def held_bytes(self) -> int:
        """Bytes of packed arrays held in memory."""
        return sum(len(b) for b in self._arrays.values())

    def __getattr__(self, name: str):
        return getattr(self.inner, name)
