"""Output folders (``--out``): a rerun leaves only its own files, never stale charts of an earlier run.

A command's outputs depend on its inputs (one chart per model pair, per layer, ...), so a second run into the same
folder may write fewer or other files than the first; the first run's extra charts would then sit beside the new
CSVs and look current. Each run records the files it wrote in ``.vitlab-files.json``; the next run into that folder
removes those of them it did not write again. Files the user put there are never listed, so never removed.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

MANIFEST = ".vitlab-files.json"


def written_since(out: Path, since_wall: float) -> list[str]:
    """Files under ``out`` (relative paths) modified at or after ``since_wall`` (seconds since the epoch)."""
    limit = int(since_wall * 1e9)
    found = []
    for folder, _, names in os.walk(out):
        for n in names:
            p = Path(folder) / n
            try:
                if p.name != MANIFEST and p.is_file() and p.stat().st_mtime_ns >= limit:
                    found.append(str(p.relative_to(out)))
            except OSError:
                continue
    return sorted(found)


def finish(out: str | Path, started_wall: float) -> list[str]:
    """Remove the files an earlier run recorded in ``out`` that this run (started at ``started_wall``) did not
    write again; record this run's files. Returns the relative paths removed."""
    out = Path(out)
    mine = written_since(out, started_wall)
    try:
        before = json.loads((out / MANIFEST).read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError):
        before = []
    removed = []
    for rel in before:
        p = out / str(rel)
        # stay inside out: a hand-edited manifest must not remove anything elsewhere
        if str(rel) not in mine and p.resolve().is_relative_to(out.resolve()) and p.is_file():
            p.unlink()
            removed.append(str(rel))
    (out / MANIFEST).write_text(json.dumps({"files": mine}, indent=1))
    return removed


def wall_from_perf(t0: float) -> float:
    """The wall-clock time of a ``time.perf_counter()`` reading taken earlier in this process."""
    return time.time() - (time.perf_counter() - t0)
