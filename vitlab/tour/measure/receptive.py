"""Fig 6 (receptive fields): growth of the input gradient's radius over the first attention sublayer and
the first CNN block; a backward pass per image, its own pass (gradients cannot share an inference forward)."""

from __future__ import annotations

import numpy as np
import pandas as pd

import vitlab.tour.checks as T  # vitlab.tour.checks, not vitlab.tour: vitlab.tour imports this one

from ...charts.words import layer_in_words
from ...engine.context import Run
from ...errors import VitlabError
from ...inputs.data import plan_batches, select
from ...inputs.models import LoadedModel
from ...stats import evidence as ev
from ...stats.evidence import Estimate
from .common import RF_BATCH, Models, _rows


def _field_maps(m: LoadedModel, points: list[tuple[str, str]], source, opts, run: Run) -> list[np.ndarray]:
    """Per-image |gradient| maps (n, H, W) of the centre of each (module, 'in'|'out') point (torchrun: this rank's
    batches, then every rank's maps in batch order); cached per batch (``receptive.field_maps``)."""
    from ...analyses.receptive import field_maps
    from ...engine import dist

    kept = []
    batches = plan_batches(source, select(source, opts.rf_images, None), RF_BATCH)[run.shard[0]::run.shard[1]]
    for i, batch in enumerate(batches):
        dist.at_batch(batch.index)
        if run.progress:
            run.progress(i, len(batches), f"{m.label}, receptive fields: batch {i + 1} of {len(batches)}")
        maps = field_maps(m, points, source, batch, run.store, check=run.check)
        if maps is not None:
            kept.append((batch.index, maps))
    kept = run.gather_ordered(kept, "receptive-field maps")
    if not kept:
        raise VitlabError(f"no readable image among the first {opts.rf_images} of '{source.name}'")
    return [np.concatenate([k[i] for k in kept]) for i in range(len(points))]


def _growth(maps: list[np.ndarray], idx: np.ndarray):
    """(growth, before, after) estimates over images (percentile bootstrap: a radius is a quantile on the pixel
    grid) and the growth's replicates (for paired differences)."""
    before, after = maps
    n = len(before)
    rb, ra = ev.radius_fraction(before.mean(0)), ev.radius_fraction(after.mean(0))
    sb, sa = ev.radius_fraction(ev.mean_replicates(before, idx)), ev.radius_fraction(ev.mean_replicates(after, idx))

    # a radius is a quantile on the pixel grid: every resample can land on the same grid point, so an interval
    # narrower than one pixel is widened to the grid's step, 1/sqrt(H·W) of the side (Estimate.widened)
    step = 1.0 / np.sqrt(before.shape[-2] * before.shape[-1])

    def est(v, r):
        return Estimate.from_samples(float(v), r, unit="images", units=n, resolution=step)

    return est(ra - rb, sa - sb), est(rb, sb), est(ra, sa), sa - sb


def growth_estimates(vmaps: list[np.ndarray], cmaps: list[np.ndarray], bootstrap: int, seed: int):
    """Fig 6's estimates from the ViT's and the CNN's per-image maps [before, after] (n, H, W) of the same images:
    (ViT growth, before, after, CNN growth, before, after, ViT − CNN growth), every one over the same bootstrap
    resamples of the images (the difference paired)."""
    idx = ev.resample_indices(len(vmaps[0]), bootstrap, seed)
    vg, vb, va, vr = _growth(vmaps, idx)
    cg, cb, ca, cr = _growth(cmaps, idx)
    step = 1.0 / np.sqrt(vmaps[0].shape[-2] * vmaps[0].shape[-1])
    return vg, vb, va, cg, cb, ca, T.difference(vg, cg, vr, cr).widened(step)


def _map_frame(m: LoadedModel, label: str, maps: np.ndarray) -> pd.DataFrame:
    """The mean |gradient| map (H, W) of one point, normalised to its maximum, as rows (panel, row, col, value)."""
    mean = maps.mean(0)
    mean = mean / mean.max() if mean.max() > 0 else mean
    r, c = np.mgrid[0:mean.shape[0], 0:mean.shape[1]]
    return pd.DataFrame({"model": m.label, "panel": f"{m.label}: {label}", "row": r.ravel(), "col": c.ravel(),
                         "value": mean.ravel()})


def growth_points(vit: LoadedModel, cnn: LoadedModel) -> tuple[list[tuple[str, str]], list[tuple[str, str]], str]:
    """Fig 6's gradient points [before, after] of the ViT and of the CNN, and the CNN's first block. Like with like
    (issue 37): both after their residual, the ViT's attention sublayer at the input of norm2 (resid_mid = x + attn)
    and the CNN's first block at its output (x + branch, then its activation)."""
    from ...analyses.receptive import block_names

    first = block_names(cnn)[0]
    return [("blocks.0", "in"), ("blocks.0.norm2", "in")], [(first, "in"), (first, "out")], first


def _growth_pair(vit: LoadedModel, cnn: LoadedModel, source, opts, run):
    vpoints, cpoints, first = growth_points(vit, cnn)
    vmaps = _field_maps(vit, vpoints, source, opts, run)
    cmaps = _field_maps(cnn, cpoints, source, opts, run)
    vg, vb, va, cg, cb, ca, effect = growth_estimates(vmaps, cmaps, run.bootstrap, run.seed)
    # panels named in words, numbered as the pages and the CLI number them ("block 0 input", "stage 1 block 0 input")
    cnn_block = layer_in_words(first)
    frame = pd.concat([_map_frame(vit, layer_in_words("blocks.0.resid_pre"), vmaps[0]),
                       _map_frame(vit, "attention sublayer + residual", vmaps[1]),
                       _map_frame(cnn, f"{cnn_block} input", cmaps[0]), _map_frame(cnn, f"{cnn_block} output", cmaps[1])],
                      ignore_index=True)
    return (vg, vb, va, cg, cb, ca, effect, first), frame


def measure_growth(ms: Models, source, opts, run):
    ms.need("vit", "cnn")
    (vg, vb, va, cg, cb, ca, effect, first), frame = _growth_pair(ms.vit, ms.cnn, source, opts, run)
    twin, frames = None, [frame]
    if ms.control == "random":
        t, tframe = _growth_pair(ms.twin(ms.vit), ms.twin(ms.cnn), source, opts, run)
        twin = t[6]
        frames.append(tframe)
    detail = (f"50 % radius as a fraction of the input side: {ms.vit.label} block 0 input {vb.text()}, after its "
              f"attention sublayer and residual {va.text()}; {ms.cnn.label} {first} input {cb.text()}, output after "
              f"its residual {ca.text()}; both after their residual, as the paper's Fig 6"
              + (f"; ViT − CNN growth {effect.text()}, untrained twins {twin.text()}" if twin else ""))
    rows = _rows(("ViT: attention growth", "statistic", vg), ("CNN: first block growth", "control", cg),
                 ("ViT block 0 input", "detail", vb), ("ViT attention sublayer + residual", "detail", va),
                 ("CNN first block input", "detail", cb), ("CNN first block output", "detail", ca),
                 *([("ViT − CNN growth", "effect", effect), ("untrained twins", "twin", twin)] if twin else []))
    return T.check_growth(vg, cg, detail, effect, twin), rows, {"fields": pd.concat(frames, ignore_index=True)}
