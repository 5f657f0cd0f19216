"""Statistics formed inside the capture: one forward pass whose hooks reduce each tap the moment it exists.

A statistic that can be computed one tap at a time (``Statistic.streams``: a Gram per tap, attention distances
per block) gets ``reduce_tap(tap, activation)`` called from the forward hook; the hook keeps only that small
result, so the activation is freed as soon as the forward itself is done with it. Peak memory above a plain
forward is then one tap's transient (its centred copy and Gram), whatever the number of taps: holding every tap
of a batch cost ViT-B/16 14.5 MB per image against ~6 MB for the plain forward (FACTS.md).

Statistics that need several taps at once (skip ratios, head Grams, probe features) still receive the held
activations through ``compute(acts, ...)``; a tap is held whenever any of them needs it, and a streaming
statistic that shares the tap reduces the held tensor afterwards, with the same numbers.

Inside the hook autocast is switched off and bf16/fp16 activations are cast to float32 first, as the held path
does after the forward, so the reduced statistic is the same computation on the same values.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..inputs import taps as taps_mod
from .pipeline import to_device


def forward_statistics(loaded, x, todo: Sequence, batch, amp: bool = False) -> dict[str, dict[str, np.ndarray]]:
    """One forward of ``loaded`` on the host input ``x`` (B, C, H, W); each statistic of ``todo`` on this batch."""
    import torch

    taps_of = {s.name: list(s.taps(loaded)) for s in todo}
    every = sorted({t for names in taps_of.values() for t in names})
    held = {t for s in todo if not s.streams for t in taps_of[s.name]}
    parts: dict[str, dict] = {s.name: {} for s in todo if s.streams}
    kind = torch.device(loaded.device).type

    def reducer(tap: str, users: list):
        def reduce(t):
            with torch.autocast(kind, enabled=False):
                t = t.float() if t.dtype in (torch.bfloat16, torch.float16) else t
                for s in users:
                    parts[s.name][tap] = s.reduce_tap(tap, t, loaded)

        return reduce

    reduce = {t: reducer(t, [s for s in todo if s.streams and t in taps_of[s.name]]) for t in every if t not in held}
    use_amp = amp and kind == "cuda"
    with taps_mod.capture(loaded.model, every, reduce=reduce) as acts, torch.inference_mode():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_amp):
            acts["logits"] = loaded.model(to_device(x, loaded.device))
        acts = {k: (v.float() if v.dtype in (torch.bfloat16, torch.float16) else v)
                for k, v in acts.items() if v is not None}
    out = {}
    for s in todo:
        if not s.streams:
            out[s.name] = s.compute(acts, loaded, batch)
            continue
        got = parts[s.name]
        for t in taps_of[s.name]:
            if t not in got:  # held for another statistic: reduce the held tensor (same values)
                got[t] = s.reduce_tap(t, acts[t], loaded)
        out[s.name] = s.finish(got, loaded, batch)
    return out
