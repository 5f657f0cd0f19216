"""Measuring the tour's checks on models (``vitlab.tour.run_tour`` calls one ``measure_*`` per claim): streams
of cached per-batch statistics, kept per batch (or per image) so that every statistic is resampled with the same
units as its control (paired intervals). Smooth statistics (CKA means, mean distances, ratios of sums, mean probe
margins) get the jackknife-t interval over their units; a rank correlation and a receptive-field radius (a
quantile on the pixel grid) keep the percentile bootstrap (``vitlab.stats.evidence``).

Every measurement returns ``(Check, rows, figure)``: the check, the estimates drawn in the interval chart, and the
data of the paper-style figure (``vitlab.charts.tour``), all from the one run. A user error (a missing model, data
the model cannot read) turns into a "can't tell" row that says why, so one check never stops the tour.

Under torchrun every stream takes this rank's batches (``run.shard``); CKA terms come back in batch order through
``run.reduce_accumulators`` (``evidence.BootstrapCKA`` keyed by batch number) and per-batch or per-image values
through ``run.gather_ordered``, so every rank resamples exactly what a single process would.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..analyses.attention import AttentionDistanceStatistic, distance_matrix
from ..analyses.heads import HeadGramStatistic, default_lower_taps
from ..analyses.localization import LocalizationStatistic, default_layers
from ..analyses.probes import draw_split
from ..analyses.skips import SkipStatistic
from ..charts.words import layer_in_words
from ..engine.context import Run
from ..engine.run import GramStatistic, stream
from ..errors import VitlabError
from ..inputs import taps as taps_mod
from ..inputs.data import ImageSource, plan_batches, select
from ..inputs.models import LoadedModel, load, twin_spec
from ..stats import cka as cka_mod
from ..stats import evidence as ev
from ..stats.evidence import Estimate
import vitlab.tour.checks as T  # the module, not the package: the package imports this one


def _stream(models, source, indices, batch_size, statistics, run: Run, min_batch: int = 4):
    """``run.stream`` with this run's store and info and no progress of its own (the tour reports per check)."""
    return stream(models, source, indices, batch_size, statistics, run.with_progress(None), min_batch=min_batch)


class Models:
    """The models of one tour: those given, their untrained twins and the zoo models some checks name."""

    def __init__(self, given: list[LoadedModel], control: str):
        if control not in ("random", "none"):
            raise VitlabError(f"--control must be 'random' or 'none', not '{control}'")
        self.given, self.control = list(given), control
        self.by_label = {m.label: m for m in given}
        self.device = given[0].device if given else "cpu"
        fam = {m.label: taps_mod.family(m.model) for m in given}
        self._vit = next((m for m in given if fam[m.label] == "vit" and taps_mod.has_cls_token(m.model)), None)
        self._cnn = next((m for m in given if fam[m.label] in ("resnet", "resnetv2")), None)
        self.used: dict[str, None] = {}  # labels of the models the current check reached for (Check.models)

    def _use(self, m: LoadedModel | None) -> LoadedModel | None:
        if m is not None:
            self.used[m.label] = None
        return m

    @property
    def vit(self) -> LoadedModel | None:
        return self._use(self._vit)

    @property
    def cnn(self) -> LoadedModel | None:
        return self._use(self._cnn)

    def get(self, spec: str) -> LoadedModel:
        if spec not in self.by_label:
            self.by_label[spec] = load(spec, self.device)
        return self._use(self.by_label[spec])

    def twin(self, m: LoadedModel) -> LoadedModel | None:
        return None if self.control == "none" else self.get(twin_spec(m.spec).label)

    def need(self, *what: str) -> None:
        if "vit" in what and self._vit is None:
            raise VitlabError("this check needs a ViT with a CLS token among the models, e.g. zoo:vit-cls")
        if "cnn" in what and self._cnn is None:
            raise VitlabError("this check needs a ResNet among the models, e.g. zoo:resnet")


def _indices(source: ImageSource, opts: T.TourOptions):
    return select(source, opts.images, opts.shuffle)


RF_BATCH = 8  # images per backward pass of the receptive fields


def _probe_pool(source: ImageSource, opts: T.TourOptions):
    """The images Fig 11's few-shot draws are taken from: enough for the test images and 30 shots per class."""
    return select(source, None if opts.images is None else max(opts.images, opts.probe_test + 30 * opts.probe_shots),
                  None)


def data_used(key: str, source: ImageSource, opts: T.TourOptions) -> tuple[int, int, str]:
    """(images, batch size, note) that check ``key`` reads: the tour's images, except Fig 6 (its first
    ``rf_images``, a backward pass each, in batches of 8) and Fig 11 (the probe pool of its few-shot draws)."""
    if key == "receptive":
        n = len(select(source, opts.rf_images, None))
        return n, RF_BATCH, "the first images: a backward pass each"
    if key == "probes":
        return (len(_probe_pool(source, opts)), opts.batch_size,
                f"the probe pool: {opts.probe_draws} few-shot draws of {opts.probe_shots} shots per class and "
                f"{opts.probe_test} test images")
    return len(_indices(source, opts)), opts.batch_size, ""


def _self_cka(models: list[LoadedModel], source, opts, run: Run) -> list[ev.BootstrapCKA]:
    """Self-CKA accumulators (default taps) of each model over the same batches."""
    stats = [GramStatistic() for _ in models]
    accs = [ev.BootstrapCKA(s.taps(m), s.taps(m)) for m, s in zip(models, stats)]
    for batch, found in _stream(models, source, _indices(source, opts), opts.batch_size, [[s] for s in stats], run):
        for acc, f in zip(accs, found):
            acc.update(cka_mod.centred(f["gram"]["grams"]), key=batch.index)
    return run.reduce_accumulators(accs)


def _jk(acc: ev.BootstrapCKA) -> np.ndarray:
    """Leave-one-batch-out indices of an accumulator's batches (below 4 batches the intervals say "too few")."""
    if not acc.terms_xy:  # every batch had fewer than 4 readable images (one image: one batch of 1)
        raise VitlabError(f"no batch of {cka_mod.MIN_UNBIASED_BATCH} or more readable images: CKA's unbiased "
                          f"estimator needs at least {cka_mod.MIN_UNBIASED_BATCH} images in a batch")
    return ev.jackknife_indices(len(acc.terms_xy))


def _point(acc: ev.BootstrapCKA) -> np.ndarray:
    return ev.ratio(acc.xy, acc.xx, acc.yy)


def _jack(value, loo, unit: str = "batches", bounds=None, resolution: float = 0.0) -> Estimate:
    """Jackknife-t estimate; ``bounds``: the statistic's range (CKA [0, 1], differences of CKA [-1, 1], ...), the
    interval formed on its logit scale so that it never leaves it (``evidence.bounded_jackknife``)."""
    return Estimate.jackknife(float(value), np.asarray(loo), unit, bounds=bounds, resolution=resolution)


CKA_RANGE, CKA_DIFF = (0.0, 1.0), (-1.0, 1.0)  # a CKA mean, a difference of two


def _vit_minus_cnn(est, loo: int, rows: tuple, detail: str, bounds=None, resolution: float = 0.0):
    """The learned answer's inputs when ``est`` holds (ViT, CNN[, their twins]) estimates: ViT − CNN, the twins' ViT −
    CNN (jackknife over the same units; ``loo`` indexes each entry's leave-one-out values), the detail with them, and
    the rows for the chart."""
    effect = _jack(est[0][0].value - est[1][0].value, est[0][loo] - est[1][loo], bounds=bounds,
                   resolution=resolution)
    twin = _jack(est[2][0].value - est[3][0].value, est[2][loo] - est[3][loo], bounds=bounds,
                 resolution=resolution) if len(est) > 2 else None
    if twin is None:
        return effect, None, detail, _rows(*rows)
    return effect, twin, f"{detail}; ViT − CNN {effect.text('.2f')}, untrained twins {twin.text('.2f')}", _rows(
        *rows, ("ViT − CNN", "effect", effect), ("untrained twins: ViT − CNN", "twin", twin))


def _rows(*items: tuple[str, str, Estimate]) -> list[dict]:
    return [{"label": label, "role": role, "value": e.value, "lo": e.lo, "hi": e.hi, "unit": e.unit,
             "units": e.units, "interval": e.basis} for label, role, e in items]


def _cka_frame(m: LoadedModel, acc: ev.BootstrapCKA) -> pd.DataFrame:
    """A self-CKA map as ``CKAResult.to_frame`` columns (model_a, layer_a, model_b, layer_b, cka)."""
    c = _point(acc)
    la, lb = acc.layers_a, acc.layers_b
    return pd.DataFrame({"model_a": m.label, "model_b": m.label, "layer_a": np.repeat(la, len(lb)),
                         "layer_b": np.tile(lb, len(la)), "cka": c.ravel()})


def measure_uniformity(ms: Models, source, opts, run):
    ms.need("vit", "cnn")
    pair = [ms.vit, ms.cnn]
    twins = [ms.twin(m) for m in pair] if ms.control == "random" else []
    accs = _self_cka(pair + twins, source, opts, run)
    idx = _jk(accs[0])
    point = [float(T.off_diagonal_mean(_point(a))) for a in accs]
    loo = [T.off_diagonal_mean(a.replicates(idx)) for a in accs]
    unif = [_jack(p, r, bounds=CKA_RANGE) for p, r in zip(point, loo)]
    g = _jack(point[0] - point[1], loo[0] - loo[1], bounds=CKA_DIFF)
    tg = _jack(point[2] - point[3], loo[2] - loo[3], bounds=CKA_DIFF) if twins else None
    detail = (f"mean CKA between different layers: {ms.vit.label} {unif[0].text()}, {ms.cnn.label} {unif[1].text()}"
              + (f"; untrained: {twins[0].label} {unif[2].text()}, {twins[1].label} {unif[3].text()}" if twins else ""))
    rows = _rows(("ViT − ResNet", "statistic", g), ("no gap", "control", Estimate.exact(0.0)),
                 *([("twins: ViT − ResNet", "twin", tg)] if tg else []),
                 *[(m.label, "detail", u) for m, u in zip(pair + twins, unif)])
    figure = {"cka": pd.concat([_cka_frame(m, a) for m, a in zip(pair + twins, accs)], ignore_index=True)}
    note = None
    if twins:
        note = (f"Control, the app's own and not the paper's: the untrained twins. An untrained ViT's layers are "
                f"nearly all alike, mean CKA {unif[2].text()} against {unif[0].text()} trained, so uniformity alone "
                f"is not learned: the learned answer asks whether the trained gap, {g.text()}, exceeds the untrained "
                f"twins' gap, {tg.text()}.")
    return T.check_uniformity(g, tg, detail, note), rows, figure


def _distances(m: LoadedModel, source, opts, run, blocks=None) -> np.ndarray:
    """(L, H, n) per-image mean attention distance (prefix keys dropped, not renormalised)."""
    stat = AttentionDistanceStatistic(blocks)
    raw = [(b.index, f[0][stat.name]["raw"])
           for b, f in _stream([m], source, _indices(source, opts), opts.batch_size, [[stat]], run, min_batch=1)]
    # contiguous whatever the source: fresh per-batch arrays are strided views, cached ones contiguous, and numpy's
    # pairwise sums over other strides differ in the last bit: the page (cold) and the report (warm) must agree
    return np.ascontiguousarray(np.concatenate(run.gather_ordered(raw, "attention distances"), axis=-1))


def _distance_frame(m: LoadedModel, d: np.ndarray, uniform: float) -> pd.DataFrame:
    """Per block and head: mean distance over images with its t interval (attention_distance_chart's columns)."""
    from ..stats.evidence import mean_half_width

    n = d.shape[-1]
    mean, std = d.mean(-1), d.std(-1)
    half = np.vectorize(lambda s: mean_half_width(s, n))(std)
    blocks, heads = np.meshgrid(np.arange(d.shape[0]), np.arange(d.shape[1]), indexing="ij")
    return pd.DataFrame({"model": m.label, "layer": blocks.ravel(), "head": heads.ravel(),
                         "distance_px": mean.ravel(), "std_px": std.ravel(), "distance_lo": (mean - half).ravel(),
                         "distance_hi": (mean + half).ravel(), "images": n, "uniform_px": uniform})


def measure_locality(ms: Models, source, opts, run):
    ms.need("vit")
    m = ms.vit
    dist = distance_matrix(taps_mod.grid_size(m.model), taps_mod.patch_size(m.model))
    uniform = ev.uniform_distance(dist, taps_mod.num_prefix_tokens(m.model), renormalise=False)
    models = [m] + ([ms.twin(m)] if ms.control == "random" else [])
    ests, texts, frames = [], [], []
    for x in models:
        d = _distances(x, source, opts, run)  # (L, H, n)
        first = d[0].T  # (n, H)
        idx = ev.jackknife_indices(len(first))
        loo = T.head_locality(ev.mean_replicates(first, idx), uniform)
        # 1 − d/uniform: at most 1 (distance 0), at least 1 − (largest patch distance)/uniform
        ests.append(_jack(T.head_locality(first.mean(0), uniform), loo, "images",
                          bounds=(1.0 - float(dist.max()) / uniform, 1.0)))
        f, last = d[0].mean(-1), d[-1].mean(-1)
        texts.append(f"{x.label}: first block heads {f.min():.1f}–{f.max():.1f} px, last block "
                     f"{last.min():.1f}–{last.max():.1f} px")
        frames.append(_distance_frame(x, d, uniform))
    detail = (f"{'; '.join(texts)}; uniform attention in the same convention (prefix keys dropped, not "
              f"renormalised) {uniform:.2f} px; locality of the most local first-block head {ests[0].text()}")
    rows = _rows(("most local head: 1 − d/uniform", "statistic", ests[0]),
                 ("uniform attention", "control", Estimate.exact(0.0)),
                 ("local-head margin", "reference", Estimate.exact(opts.local_margin)),
                 *([("untrained twin", "twin", ests[1])] if len(ests) > 1 else []))
    check = T.check_locality(ests[0], ests[1] if len(ests) > 1 else None, opts.local_margin, detail)
    return check, rows, {"distance": pd.concat(frames, ignore_index=True)}


def _head_rank(vit: LoadedModel, cnn: LoadedModel, source, opts, run):
    """(−ρ estimate, permutation p, null 97.5 %, detail, per-head frame) of Fig 5 on one ViT/CNN pair."""
    blocks = tuple(range(max(1, len(vit.model.blocks) // 2)))
    dstat, hstat, ostat = AttentionDistanceStatistic(blocks), HeadGramStatistic(blocks), \
        GramStatistic(tuple(default_lower_taps(cnn)))
    heads = [f"b{b}.h{h}" for b in blocks for h in range(vit.model.blocks[0].attn.num_heads)]
    acc = ev.BootstrapCKA(heads, list(ostat.taps_))
    raw = []
    for batch, f in _stream([vit, cnn], source, _indices(source, opts), opts.batch_size, [[dstat, hstat], [ostat]],
                            run):
        raw.append((batch.index, f[0][dstat.name]["raw"]))
        acc.update(cka_mod.centred(f[0][hstat.name]["grams"]), cka_mod.centred(f[1][ostat.name]["grams"]),
                   key=batch.index)
    run.reduce_accumulators(acc)
    raw = run.gather_ordered(raw, "head distances")
    dist = np.concatenate(raw, -1).mean(-1).ravel()  # (len(blocks)·H,) block-major, as the head Grams
    sim = np.nanmean(_point(acc), -1)
    t = len(acc.terms_xy)
    reps = np.nanmean(acc.replicates(ev.resample_indices(t, run.bootstrap, run.seed)), -1)  # (B, heads)
    # a rank correlation is not smooth in the batch sums: percentile bootstrap over the batches
    # ρ lies in [−1, 1] and, over h heads, moves in steps of 12/(h³ − h) (one swap of neighbouring ranks)
    h = len(heads)
    neg = Estimate.from_samples(float(-ev.spearman(dist, sim)), -ev.spearman(dist, reps), unit="batches", units=t,
                                bounds=(-1.0, 1.0), resolution=12.0 / max(h**3 - h, 1))
    rng = np.random.default_rng(run.seed)
    null = -ev.spearman(dist, np.stack([rng.permutation(sim) for _ in range(opts.permutations)]))
    p = float((1 + (null >= neg.value).sum()) / (1 + len(null)))
    null_hi = float(np.percentile(null, 97.5))
    detail = (f"{len(heads)} heads of blocks {blocks[0]}–{blocks[-1]} of {vit.label} vs {len(ostat.taps_)} lower "
              f"layers of {cnn.label}: −Spearman(distance, CKA) {neg.text()}")
    frame = pd.DataFrame({"model": vit.label, "head": heads, "block": [int(h[1:].split(".")[0]) for h in heads],
                          "distance_px": dist, "cka": sim})
    return neg, p, null_hi, detail, frame


def measure_head_rank(ms: Models, source, opts, run):
    ms.need("vit", "cnn")
    neg, p, null_hi, detail, frame = _head_rank(ms.vit, ms.cnn, source, opts, run)
    twin = None
    frames = [frame]
    if ms.control == "random":
        twin, _, _, _, tframe = _head_rank(ms.twin(ms.vit), ms.twin(ms.cnn), source, opts, run)
        detail += f"; untrained twins: {twin.text()}"
        frames.append(tframe)
    rows = _rows(("−ρ(distance, CKA)", "statistic", neg), ("permutation null 97.5 %", "control",
                                                             Estimate.exact(null_hi)),
                 *([("untrained twins", "twin", twin)] if twin else []))
    return T.check_head_rank(neg, p, null_hi, detail, twin), rows, {"heads": pd.concat(frames, ignore_index=True)}


def _field_maps(m: LoadedModel, points: list[tuple[str, str]], source, opts, run: Run) -> list[np.ndarray]:
    """Per-image |gradient| maps (n, H, W) of the centre of each (module, 'in'|'out') point (torchrun: this rank's
    batches, then every rank's maps in batch order); cached per batch (``receptive.field_maps``)."""
    from ..analyses.receptive import field_maps
    from ..engine import dist

    kept = []
    for batch in plan_batches(source, select(source, opts.rf_images, None), RF_BATCH)[run.shard[0]::run.shard[1]]:
        dist.at_batch(batch.index)
        maps = field_maps(m, points, source, batch, run.store)
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


def _map_frame(m: LoadedModel, label: str, maps: np.ndarray) -> pd.DataFrame:
    """The mean |gradient| map (H, W) of one point, normalised to its maximum, as rows (panel, row, col, value)."""
    mean = maps.mean(0)
    mean = mean / mean.max() if mean.max() > 0 else mean
    r, c = np.mgrid[0:mean.shape[0], 0:mean.shape[1]]
    return pd.DataFrame({"model": m.label, "panel": f"{m.label}: {label}", "row": r.ravel(), "col": c.ravel(),
                         "value": mean.ravel()})


def _growth_pair(vit: LoadedModel, cnn: LoadedModel, source, opts, run):
    from ..analyses.receptive import block_names

    # like with like (issue 37): both after their residual, the ViT's attention sublayer at the input of norm2
    # (resid_mid = x + attn) and the CNN's first block at its output (x + branch, then its activation)
    vmaps = _field_maps(vit, [("blocks.0", "in"), ("blocks.0.norm2", "in")], source, opts, run)
    first = block_names(cnn)[0]
    cmaps = _field_maps(cnn, [(first, "in"), (first, "out")], source, opts, run)
    idx = ev.resample_indices(len(vmaps[0]), run.bootstrap, run.seed)
    vg, vb, va, vr = _growth(vmaps, idx)
    cg, cb, ca, cr = _growth(cmaps, idx)
    step = 1.0 / np.sqrt(vmaps[0].shape[-2] * vmaps[0].shape[-1])
    effect = T.difference(vg, cg, vr, cr).widened(step)
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


def _skip_pair(models: list[LoadedModel], source, opts, run):
    """Per model: the median ratio estimate, its leave-one-batch-out values, and the ratio per block and token (Fig
    7's map and lines)."""
    stat = SkipStatistic()
    kept = [(b.index, [(f[k][stat.name]["ratio_sum"], float(np.asarray(f[k][stat.name]["count"]).sum()))
                       for k in range(len(models))])
            for b, f in _stream(models, source, _indices(source, opts), opts.batch_size, [[stat]] * len(models),
                                run)]
    kept = run.gather_ordered(kept, "skip-ratio sums")  # every rank's batches, in batch order
    sums = [[per[k][0] for per in kept] for k in range(len(models))]
    counts = [[per[k][1] for per in kept] for k in range(len(models))]
    idx = ev.jackknife_indices(len(counts[0]))
    out, curves = [], []
    for m, s, c in zip(models, sums, counts):
        s, c = np.stack(s), np.array(c)
        ratio = s.sum(0) / c.sum()  # (S, N)
        loo = T.finite_median(ev.ratio_replicates(s, c, idx))
        out.append((_jack(T.finite_median(ratio), loo), loo))
        curves.append(_skip_curve(m, ratio))
    return out, pd.concat(curves, ignore_index=True)


def _skip_curve(m: LoadedModel, ratio: np.ndarray) -> pd.DataFrame:
    """‖z‖/‖f(z)‖ per block and token (Fig 7: the token × block map and, averaged over a kind's tokens, its lines):
    a block's value is the mean of its sublayers' (attention and MLP for a ViT) finite ratios; prefix tokens are
    kind 'cls', the others 'spatial'. Columns: model, block, layer, depth, token, token_label, kind, ratio."""
    import warnings

    sub = SkipStatistic().params(m)["sublayers"]
    fam = taps_mod.family(m.model)
    prefix = taps_mod.num_prefix_tokens(m.model) if fam in ("vit", "mixer") else 0
    finite = np.where(np.isfinite(ratio), ratio, np.nan)  # (S, N)
    names = [s.rsplit(".", 1)[0] if fam in ("vit", "mixer") else s for s in sub]
    blocks = list(dict.fromkeys(names))
    rows = []
    for b, name in enumerate(blocks):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a block whose ratios are all inf: NaN, dropped
            per_token = np.nanmean(finite[[i for i, n in enumerate(names) if n == name]], 0)  # (N,)
        rows += [{"model": m.label, "block": b, "layer": name, "depth": (b + 1) / len(blocks), "token": t,
                  "token_label": ("CLS" if prefix == 1 else f"P{t}") if t < prefix else str(t - prefix),
                  "kind": "cls" if t < prefix else "spatial", "ratio": float(v)}
                 for t, v in enumerate(per_token) if np.isfinite(v)]
    return pd.DataFrame(rows, columns=["model", "block", "layer", "depth", "token", "token_label", "kind", "ratio"])


def measure_skips(ms: Models, source, opts, run):
    ms.need("vit", "cnn")
    models = [ms.vit, ms.cnn] + ([ms.twin(ms.vit), ms.twin(ms.cnn)] if ms.control == "random" else [])
    est, curves = _skip_pair(models, source, opts, run)
    # a ratio of norms is positive: its interval on the log scale (the leave-one-out values kept by _skip_pair)
    est = [(_jack(e.value, loo, bounds=(0.0, np.inf)), loo) for e, loo in est]
    effect, twin, detail, rows = _vit_minus_cnn(
        est, 1, (("ViT median ratio", "statistic", est[0][0]), ("CNN median ratio", "control", est[1][0])),
        f"median ‖z‖/‖f(z)‖ over sublayers and tokens: {ms.vit.label} {est[0][0].text('.2f')}, "
        f"{ms.cnn.label} {est[1][0].text('.2f')}")
    return T.check_skips(est[0][0], est[1][0], detail, effect, twin), rows, {"skips": curves}


def measure_removal(ms: Models, source, opts, run):
    if len(opts.noskip) != 2:
        raise VitlabError(f"--noskip takes two models (with the skip, retrained without it), not {len(opts.noskip)}")
    normal, noskip = ms.get(opts.noskip[0]), ms.get(opts.noskip[1])
    accs = _self_cka([noskip, normal], source, opts, run)
    idx = _jk(accs[0])
    blocks = [int(t.split(".")[1]) for t in accs[0].layers_a]
    est = [_jack(T.cross_block_mean(_point(a), blocks, opts.noskip_block),
                 T.cross_block_mean(a.replicates(idx), blocks, opts.noskip_block), bounds=CKA_RANGE) for a in accs]
    detail = (f"mean self-CKA between layers before and after block {opts.noskip_block}: {noskip.label} (retrained "
              f"without its skips) {est[0].text()}, {normal.label} {est[1].text()}")
    figure = {"cka": pd.concat([_cka_frame(m, a) for m, a in zip([noskip, normal], accs)], ignore_index=True),
              "block": opts.noskip_block}
    note = (f"Control: {normal.label}, the same recipe trained with its skips; both are trained, so untrained twins "
            f"do not apply." + _zoo_control_note(ms, [normal, noskip]))
    return T.check_removal(est[0], est[1], opts.noskip_block, detail, note), \
        _rows(("retrained without skips", "statistic", est[0]), ("with skips", "control", est[1])), figure


def _localization(models: list[LoadedModel], source, opts, run):
    """Per model: (chance-corrected rate, raw rate, positions, loo corrected) of its last default localization
    layer, and the token-by-position CKA maps of a spread of tokens (Figs 9-10)."""
    stats = [LocalizationStatistic((default_layers(m.model)[-1],)) for m in models]
    accs: list = [None] * len(models)
    for batch, found in _stream(models, source, _indices(source, opts), opts.batch_size, [[s] for s in stats], run):
        for k, (s, f) in enumerate(zip(stats, found)):
            a = f[s.name]
            if accs[k] is None:
                accs[k] = ev.BootstrapCKA([str(t) for t in range(a["tokens_0"].shape[0])],
                                          [str(g) for g in range(a["patches_0"].shape[0])])
            accs[k].update(cka_mod.centred(a["tokens_0"]), cka_mod.centred(a["patches_0"]), key=batch.index)
    if accs[0] is None:
        raise VitlabError("no batch of 4 or more readable images: localization needs at least 4 images"
                          + (" (on this rank: use fewer processes than batches)" if run.shard[1] > 1 else ""))
    run.reduce_accumulators(accs)
    idx = _jk(accs[0])
    out, maps = [], []
    for m, acc, s in zip(models, accs, stats):
        prefix, positions = taps_mod.num_prefix_tokens(m.model), len(acc.layers_b)
        point = _point(acc)
        rate, loo = ev.localized_rate(point, prefix), ev.localized_rate(acc.replicates(idx), prefix)
        corr_loo = ev.chance_corrected(loo, positions)
        low = float(ev.chance_corrected(0.0, positions))  # every token misplaced
        # a rate counts tokens: it moves in steps of 1/positions (1/(positions − 1) once chance-corrected)
        step = 1.0 / max(1, positions - 1)
        cells = point[prefix:]  # (G, G) spatial tokens by positions: (defined cells, all cells) for the words
        out.append((_jack(ev.chance_corrected(rate, positions), corr_loo, bounds=(low, 1.0), resolution=step),
                    _jack(rate, loo, bounds=(0.0, 1.0), resolution=1.0 / positions), positions, corr_loo,
                    (int(np.isfinite(cells).sum()), int(cells.size))))
        maps.append(_token_maps(m, s.layers[0], point, prefix, positions))
    return out, pd.concat(maps, ignore_index=True)


def _token_maps(m: LoadedModel, layer: str, cka: np.ndarray, prefix: int, positions: int,
                count: int = 4) -> pd.DataFrame:
    """CKA of ``count`` spatial tokens (a spread over the grid) with every input position (Figs 9-10's maps)."""
    side = round(np.sqrt(positions))
    tokens = sorted({int(t) for t in np.linspace(0, positions - 1, count)})
    rows = []
    for t in tokens:
        for g in range(positions):
            rows.append({"model": m.label, "layer": layer, "token": t, "panel": f"{m.label}: token {t}",
                         "row": g // side, "col": g % side, "value": float(cka[prefix + t, g]), "own": g == t})
    return pd.DataFrame(rows)


def _loc_text(m: LoadedModel, r) -> str:
    corr, raw, g = r[:3]
    if not np.isfinite(raw.value):  # no token has a defined cell: the rate is undefined, not chance (issue 39)
        defined, cells = r[4]
        return (f"{m.label} last layer: no token has a best-matching patch, {cells - defined} of its {cells} "
                f"token-by-position CKA cells are undefined (features constant over the images, e.g. identical "
                f"images)")
    return (f"{m.label} last layer: {raw.value:.0%} of tokens best matched at their own patch (chance "
            f"{ev.chance_level(g):.0%} on {g} positions), chance-corrected {corr.text('.2f')}")


def measure_localization(ms: Models, source, opts, run):
    ms.need("vit", "cnn")
    models = [ms.vit, ms.cnn] + ([ms.twin(ms.vit), ms.twin(ms.cnn)] if ms.control == "random" else [])
    r, maps = _localization(models, source, opts, run)
    # ViT − CNN of two chance-corrected rates, each in [−1/(positions − 1), 1]
    lows = [float(ev.chance_corrected(0.0, x[2])) for x in r[:2]]
    effect, twin, detail, rows = _vit_minus_cnn(r, 3, (("ViT", "statistic", r[0][0]), ("CNN", "control", r[1][0])),
                                                f"{_loc_text(ms.vit, r[0])}; {_loc_text(ms.cnn, r[1])}",
                                                bounds=(lows[0] - 1.0, 1.0 - lows[1]),
                                                resolution=1.0 / max(1, r[0][2] - 1))
    return T.check_localization(r[0][0], r[1][0], detail, effect, twin), rows, {"maps": maps}


def measure_gap(ms: Models, source, opts, run):
    (cls_spec, gap_spec), follows = opts.gap_models(ms._vit.label if ms._vit is not None else None)
    cls, gap = ms.get(cls_spec), ms.get(gap_spec)
    r, maps = _localization([cls, gap], source, opts, run)
    detail = f"{_loc_text(cls, r[0])}; {_loc_text(gap, r[1])}"
    # timm's avg pooling moves the final LayerNorm into fc_norm, after pooling, unless built with fc_norm=False
    norm_moved = type(getattr(gap.model, "fc_norm", None)).__name__ not in ("NoneType", "Identity")
    note = (f"Control: {gap.label}, the same ViT trained with global average pooling; both are trained, so untrained "
            f"twins do not apply." + ("" if follows or ms._vit is None else
                                       f" {ms._vit.label} has no pooling-only zoo twin: this check uses the zoo pair "
                                       f"{cls.label} and {gap.label}, not the tour's ViT."))
    return T.check_gap(r[0][0], r[1][0], detail, norm_moved, note), _rows(("CLS model", "statistic", r[0][0]),
                                                                    ("GAP model", "control", r[1][0])), {"maps": maps}


def _probe_margins(m: LoadedModel, source, opts, run) -> tuple[np.ndarray, list[str], pd.DataFrame]:
    """Per few-shot draw: min(GAP − CLS at the first layer, CLS gain first → last); features extracted once.
    Also the probe curves: accuracy per block and representation, mean over the draws with its t interval."""
    from ..analyses import probes

    if not source.has_labels:
        raise VitlabError(f"data source '{source.name}' has no labels: the probe check needs Fashion-MNIST, CIFAR "
                          "or a folder with one sub-folder per class")
    layers = tuple(probes.default_layers(m.model))  # the claim compares the first and the last block
    stat = probes.ProbeFeatures(layers, ("cls", "gap"))
    feats: dict[str, list] = {}
    labels: list = []
    pool = _probe_pool(source, opts)
    kept = [(batch.index, (f[0][stat.name], list(batch.labels)))
            for batch, f in _stream([m], source, pool, opts.batch_size, [[stat]], run)]
    for values, batch_labels in run.gather_ordered(kept, "probe features"):  # every rank's, in batch order
        for key, v in values.items():
            feats.setdefault(key, []).append(v)
        labels += batch_labels
    x = {k: np.concatenate(v) for k, v in feats.items()}
    y = np.array(labels)
    classes = len(source.classes)
    margins, texts, accs = [], [], []
    for d in range(opts.probe_draws):
        parts = dict(zip(("train", "val", "test"), draw_split(y, opts.probe_shots, opts.probe_test, run.seed + d)))
        acc = {(rep, i): probes._probe_one({p: x[f"{rep}|{tap}"][ix] for p, ix in parts.items()},
                                           {p: y[ix] for p, ix in parts.items()}, classes)[0]
               for rep in ("cls", "gap") for i, tap in enumerate(layers)}
        last = len(layers) - 1
        margins.append(min(acc["gap", 0] - acc["cls", 0], acc["cls", last] - acc["cls", 0]))
        texts.append(f"CLS {acc['cls', 0]:.0%}→{acc['cls', last]:.0%}, GAP {acc['gap', 0]:.0%}→"
                     f"{acc['gap', last]:.0%} ({layers[0]} → {layers[-1]})")
        accs.append(acc)
    rows = []
    for (rep, i) in accs[0]:
        e = ev.mean_estimate(np.array([a[rep, i] for a in accs]), "draws")
        rows.append({"model": m.label, "layer": layers[i], "index": i, "depth": (i + 1) / len(layers),
                     "representation": rep, "accuracy": e.value, "accuracy_lo": e.lo, "accuracy_hi": e.hi,
                     "draws": len(accs)})
    return np.array(margins), texts, pd.DataFrame(rows)


def measure_probes(ms: Models, source, opts, run):
    ms.need("vit")
    models = [ms.vit] + ([ms.twin(ms.vit)] if ms.control == "random" else [])
    ests, first_text, curves = [], "", []
    for m in models:
        margins, texts, curve = _probe_margins(m, source, opts, run)
        # a difference of accuracies in [−1, 1]; an accuracy moves in steps of one test image per draw
        ests.append(ev.mean_estimate(margins, "draws", bounds=(-1.0, 1.0),
                                     resolution=1.0 / (opts.probe_test * max(1, opts.probe_draws))))
        first_text = first_text or f"{m.label}, first draw: {texts[0]}"
        curves.append(curve)
    detail = (f"margin min(GAP − CLS at the first layer, CLS gain first → last) over {opts.probe_draws} few-shot "
              f"draws ({opts.probe_shots} shots): {ests[0].text()}; {first_text}")
    twin = ests[1] if len(ests) > 1 else None
    rows = _rows(("margin", "statistic", ests[0]), ("no margin", "control", Estimate.exact(0.0)),
                 *([("untrained twin", "twin", twin)] if twin else []))
    return T.check_probes(ests[0], twin, detail), rows, {"probes": pd.concat(curves, ignore_index=True)}


def _zoo_control_note(ms: Models, controls: list[LoadedModel]) -> str:
    """Says plainly when a check's controls are not the tour's own ViT (e.g. model A zoo:vit-cls-14 while Figs 8
    and 12 need a retrained zoo model that exists only with 16 tokens)."""
    vit = ms._vit
    if vit is None or vit.label in {m.label for m in controls}:
        return ""
    names = ", ".join(m.label for m in controls)
    return f" These are the 16-token zoo controls {names}, not the tour's ViT {vit.label}: the zoo retrains only them."


def _upper_mean(curve: np.ndarray) -> np.ndarray:
    """(..., L) block-by-block CKA -> (...) mean over the upper half of the layers."""
    c = np.asarray(curve, dtype=np.float64)
    return np.nanmean(c[..., max(1, c.shape[-1] // 2):], -1)


def measure_scale(ms: Models, source, opts, run):
    """Fig 12 against another seed (issue 33): for each less-data pair, its depth drop (lower-half minus upper-half
    block-by-block CKA with the full-data model) minus the drop of the other-seed pair (same recipe and data,
    seed 1), all over the same batches (paired jackknife); the smallest excess over the less-data pairs is the
    statistic. Two separately trained ViTs diverge at the top anyway: a drop alone cannot isolate data scale."""
    scale_pairs = opts.pairs()
    seed_pair = opts.seed_control()
    all_pairs = list(dict.fromkeys(scale_pairs + [seed_pair]))
    specs = list(dict.fromkeys(s for pair in all_pairs for s in pair))
    models = [ms.get(s) for s in specs]
    stats = [GramStatistic() for _ in models]
    accs = {(a, b): ev.BootstrapCKA(stats[specs.index(a)].taps(ms.get(a)), stats[specs.index(b)].taps(ms.get(b)))
            for a, b in all_pairs}
    for batch, found in _stream(models, source, _indices(source, opts), opts.batch_size, [[s] for s in stats], run):
        c = [cka_mod.centred(f["gram"]["grams"]) for f in found]
        for (a, b), acc in accs.items():
            acc.update(c[specs.index(a)], c[specs.index(b)], key=batch.index)
    run.reduce_accumulators(accs)
    idx = _jk(next(iter(accs.values())))
    drop, upper, curves = {}, {}, []
    for (a, b), acc in accs.items():
        diag = np.diagonal(_point(acc))
        reps = np.diagonal(acc.replicates(idx), axis1=-2, axis2=-1)
        drop[a, b] = (float(T.depth_drop(diag)), T.depth_drop(reps))
        upper[a, b] = (float(_upper_mean(diag)), _upper_mean(reps))
        curves.append(pd.DataFrame({"pair": f"{a} vs {b}", "layer": acc.layers_a, "index": np.arange(len(diag)),
                                    "depth": (np.arange(len(diag)) + 1) / len(diag), "cka": diag}))
    sd, sd_loo = drop[seed_pair]
    # excess drop of each less-data pair over the seed pair: paired, the same leave-one-batch-out sets
    excess = [(drop[p][0] - sd, drop[p][1] - sd_loo) for p in scale_pairs]
    k = int(np.argmin([e[0] for e in excess]))
    # the smallest excess and its leave-one-out values; drops lie in [−1, 1], so their differences in [−2, 2]
    stat = _jack(min(e[0] for e in excess), np.min(np.stack([e[1] for e in excess]), axis=0), bounds=(-2.0, 2.0))
    ests = {p: _jack(v, r, bounds=CKA_DIFF) for p, (v, r) in drop.items()}
    ups = {p: _jack(v, r, bounds=CKA_RANGE) for p, (v, r) in upper.items()}
    seed_label = f"{seed_pair[0]} vs {seed_pair[1]}"
    texts = [f"{a} vs {b}: drop {ests[a, b].text()}, upper-half CKA {ups[a, b].text()}" for a, b in scale_pairs]
    detail = ("block-by-block CKA with the full-data model, lower-half mean minus upper-half mean (the drop): "
              + "; ".join(texts) + f"; other seed, {seed_label}: drop {ests[seed_pair].text()}, upper-half CKA "
              f"{ups[seed_pair].text()}; statistic: the smallest less-data drop minus the other seed's, "
              f"{stat.text()}")
    note = (f"Control, the app's own and not the paper's: {seed_pair[0]}, the same recipe and data with another seed. "
            f"Any two separately trained ViTs drift apart in their upper layers: its drop is {ests[seed_pair].text()} "
            f"and its upper-half CKA {ups[seed_pair].text()}, so less data must differ more than that."
            + _zoo_control_note(ms, models))
    rows = _rows(*[(f"{a} vs {b} minus other seed", "statistic" if i == k else "detail",
                    _jack(excess[i][0], excess[i][1], bounds=(-2.0, 2.0))) for i, (a, b) in enumerate(scale_pairs)],
                 ("no more than another seed", "control", Estimate.exact(0.0)),
                 *[(f"{a} vs {b}: drop", "detail", ests[a, b]) for a, b in all_pairs])
    return T.check_scale(stat, detail, note), rows, {"scale": pd.concat(curves, ignore_index=True)}
