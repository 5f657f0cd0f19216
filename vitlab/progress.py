"""Progress callbacks: ``cb(done, total, text)``, each with ``.close()``; the CLI draws tqdm bars, the app its own."""

from __future__ import annotations

import sys
from typing import Callable

Progress = Callable[[int, int, str], None]


def tqdm_progress(desc: str) -> Progress:
    """A progress callback drawing a tqdm bar on stderr; call ``.close()`` when done."""
    from tqdm import tqdm

    bar = tqdm(total=0, desc=desc, unit="batch", file=sys.stderr, disable=None)

    def cb(done: int, total: int, text: str) -> None:
        if bar.total != total:
            bar.total = total
            bar.refresh()
        bar.n = done
        bar.set_postfix_str(text, refresh=True)

    cb.close = bar.close  # type: ignore[attr-defined]
    return cb


def silent_progress() -> Progress:
    """A callback that draws nothing (other ranks, tests)."""

    def cb(done: int, total: int, text: str) -> None:
        return None

    cb.close = lambda: None  # type: ignore[attr-defined]
    return cb


def scaled(progress: Progress | None, part: int, parts: int, label: str = "") -> Progress | None:
    """Report part ``part`` of ``parts`` sequential sub-runs as one bar (repeats, several models)."""
    if progress is None or parts <= 1:
        return progress
    prefix = f"{label} {part + 1} of {parts}: " if label else ""
    return lambda done, total, text: progress(part * total + done, parts * total, prefix + text)


def passes(progress: Progress | None, part: int, parts: int, words: str) -> Progress | None:
    """Report pass ``part`` of ``parts`` (each a full stream, with its own batch count) under its own words:
    'pass 2 of 6: zoo:vit-cls, held-out images: batch 3 of 8'. The bar restarts with each pass, and says which."""
    if progress is None:
        return None
    return lambda done, total, text: progress(done, total, f"pass {part + 1} of {parts}: {words}: {text}")
