"""Measuring the tour's checks on models (``vitlab.tour.run_tour`` calls one ``measure_*`` per claim): streams
of cached per-batch statistics, kept per batch (or per image) so that every statistic is bootstrapped with the
same resamples as its control (paired intervals).

Every measurement returns ``(Check, frame)``; a user error (a missing model, data the model cannot read) turns
into a "can't tell" row that says why, so one check never stops the tour.

Under torchrun every stream takes this rank's batches (``run.shard``); CKA terms come back in batch order through
``run.reduce_accumulators`` (``evidence.BootstrapCKA`` keyed by batch number) and per-batch or per-image values
through ``run.gather_ordered``, so every rank bootstraps exactly what a single process would.
"""

from __future__ import annotations

import numpy as np

from ..stats import cka as cka_mod
from ..stats import evidence as ev
from ..inputs import taps as taps_mod
from . import checks as T
from ..analyses.attention import AttentionDistanceStatistic, distance_matrix
from ..engine.context import Run
from ..inputs.data import ImageSource, plan_batches, select, to_tensor
from ..errors import VitlabError
from ..stats.evidence import Estimate
from ..analyses.heads import HeadGramStatistic, default_lower_taps
from ..analyses.localization import LocalizationStatistic, default_layers
from ..inputs.models import LoadedModel, load, twin_spec
from ..analyses.probes import draw_split
from ..engine.run import GramStatistic, stream
from ..analyses.skips import SkipStatistic


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
        self.vit = next((m for m in given if fam[m.label] == "vit" and taps_mod.has_cls_token(m.model)), None)
        self.cnn = next((m for m in given if fam[m.label] in ("resnet", "resnetv2")), None)

    def get(self, spec: str) -> LoadedModel:
        if spec not in self.by_label:
            self.by_label[spec] = load(spec, self.device)
        return self.by_label[spec]

    def twin(self, m: LoadedModel) -> LoadedModel | None:
        return None if self.control == "none" else self.get(twin_spec(m.spec).label)

    def need(self, *what: str) -> None:
        if "vit" in what and self.vit is None:
            raise VitlabError("this check needs a ViT with a CLS token among the models (e.g. zoo:vit-cls)")
        if "cnn" in what and self.cnn is None:
            raise VitlabError("this check needs a ResNet among the models (e.g. zoo:resnet)")


def _indices(source: ImageSource, opts: T.TourOptions):
    return select(source, opts.images, opts.shuffle)


def _self_cka(models: list[LoadedModel], source, opts, run: Run) -> list[ev.BootstrapCKA]:
    """Self-CKA accumulators (default taps) of each model over the same batches."""
    stats = [GramStatistic() for _ in models]
    accs = [ev.BootstrapCKA(s.taps(m), s.taps(m)) for m, s in zip(models, stats)]
    for batch, found in _stream(models, source, _indices(source, opts), opts.batch_size, [[s] for s in stats], run):
        for acc, f in zip(accs, found):
            acc.update(cka_mod.centred(f["gram"]["grams"]), key=batch.index)
    return run.reduce_accumulators(accs)


def _idx(acc: ev.BootstrapCKA, run: Run) -> np.ndarray:
    return ev.resample_indices(len(acc.terms_xy), run.bootstrap, run.seed)


def _point(acc: ev.BootstrapCKA) -> np.ndarray:
    return ev.ratio(acc.xy, acc.xx, acc.yy)


def _rows(*items: tuple[str, str, Estimate]) -> list[dict]:
    return [{"label": label, "role": role, "value": e.value, "lo": e.lo, "hi": e.hi} for label, role, e in items]


def measure_uniformity(ms: Models, source, opts, run):
    ms.need("vit", "cnn")
    pair = [ms.vit, ms.cnn]
    twins = [ms.twin(m) for m in pair] if ms.control == "random" else []
    accs = _self_cka(pair + twins, source, opts, run)
    idx = _idx(accs[0], run)

    def gap(a, b):
        reps = T.off_diagonal_mean(a.replicates(idx)) - T.off_diagonal_mean(b.replicates(idx))
        return Estimate.from_samples(float(T.off_diagonal_mean(_point(a)) - T.off_diagonal_mean(_point(b))), reps)

    unif = [Estimate.from_samples(float(T.off_diagonal_mean(_point(a))), T.off_diagonal_mean(a.replicates(idx)))
            for a in accs]
    g = gap(accs[0], accs[1])
    tg = gap(accs[2], accs[3]) if twins else None
    detail = (f"mean CKA between different layers: {ms.vit.label} {unif[0].text()}, {ms.cnn.label} {unif[1].text()}"
              + (f"; untrained: {twins[0].label} {unif[2].text()}, {twins[1].label} {unif[3].text()}" if twins else ""))
    rows = _rows(("ViT − ResNet", "statistic", g), *([("twins: ViT − ResNet", "control", tg)] if tg else []),
                 *[(m.label, "detail", u) for m, u in zip(pair + twins, unif)])
    return T.check_uniformity(g, tg, detail), rows


def _distances(m: LoadedModel, source, opts, run, blocks=None) -> np.ndarray:
    """(L, H, n) per-image mean attention distance (prefix keys dropped, not renormalised)."""
    stat = AttentionDistanceStatistic(blocks)
    raw = [(b.index, f[0][stat.name]["raw"])
           for b, f in _stream([m], source, _indices(source, opts), opts.batch_size, [[stat]], run, min_batch=1)]
    return np.concatenate(run.gather_ordered(raw, "attention distances"), axis=-1)


def measure_locality(ms: Models, source, opts, run):
    ms.need("vit")
    m = ms.vit
    dist = distance_matrix(taps_mod.grid_size(m.model), taps_mod.patch_size(m.model))
    uniform = ev.uniform_distance(dist, taps_mod.num_prefix_tokens(m.model), renormalise=False)
    models = [m] + ([ms.twin(m)] if ms.control == "random" else [])
    ests, texts = [], []
    idx = None
    for x in models:
        d = _distances(x, source, opts, run)  # (L, H, n)
        idx = ev.resample_indices(d.shape[-1], run.bootstrap, run.seed) if idx is None else idx
        first = d[0].T  # (n, H)
        reps = T.head_locality(ev.mean_replicates(first, idx), uniform)
        ests.append(Estimate.from_samples(float(T.head_locality(first.mean(0), uniform)), reps))
        f, last = d[0].mean(-1), d[-1].mean(-1)
        texts.append(f"{x.label}: first block heads {f.min():.1f}–{f.max():.1f} px, last block "
                     f"{last.min():.1f}–{last.max():.1f} px")
    detail = (f"{'; '.join(texts)}; uniform attention in the same convention (prefix keys dropped, not "
              f"renormalised) {uniform:.2f} px; locality of the most local first-block head {ests[0].text()}")
    rows = _rows(("most local head: 1 − d/uniform", "statistic", ests[0]),
                 *([("untrained twin", "control", ests[1])] if len(ests) > 1 else []),
                 ("local-head margin", "reference", Estimate.exact(opts.local_margin)))
    return T.check_locality(ests[0], ests[1] if len(ests) > 1 else None, opts.local_margin, detail), rows


def measure_head_rank(ms: Models, source, opts, run):
    ms.need("vit", "cnn")
    vit, cnn = ms.vit, ms.cnn
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
    reps = np.nanmean(acc.replicates(_idx(acc, run)), -1)  # (B, heads)
    neg = Estimate.from_samples(float(-ev.spearman(dist, sim)), -ev.spearman(dist, reps))
    rng = np.random.default_rng(run.seed)
    null = -ev.spearman(dist, np.stack([rng.permutation(sim) for _ in range(opts.permutations)]))
    p = float((1 + (null >= neg.value).sum()) / (1 + len(null)))
    null_hi = float(np.percentile(null, 97.5))
    detail = (f"{len(heads)} heads of blocks {blocks[0]}–{blocks[-1]} of {vit.label} vs {len(ostat.taps_)} lower "
              f"layers of {cnn.label}: −Spearman(distance, CKA) {neg.text()}")
    rows = _rows(("−ρ(distance, CKA)", "statistic", neg), ("permutation null 97.5 %", "control",
                                                             Estimate.exact(null_hi)))
    return T.check_head_rank(neg, p, null_hi, detail), rows


def _field_maps(m: LoadedModel, points: list[tuple[str, str]], source, opts, run: Run) -> list[np.ndarray]:
    """Per-image |gradient| maps (n, H, W) of the centre of each (module, 'in'|'out') point (torchrun: this rank's
    batches, then every rank's maps in batch order)."""
    from ..analyses.receptive import centre_gradient
    from ..engine import dist
    from ..inputs.data import decode

    prefix, grid = taps_mod.num_prefix_tokens(m.model), taps_mod.grid_size(m.model)
    kept = []
    for batch in plan_batches(source, select(source, opts.rf_images, None), 8)[run.shard[0]::run.shard[1]]:
        dist.at_batch(batch.index)
        decode(source, batch)
        if not batch.images:
            continue
        x = to_tensor(batch.images, m)
        kept.append((batch.index, [centre_gradient(m.model, module, x, where, prefix, grid).cpu().numpy()
                                   for module, where in points]))
    kept = run.gather_ordered(kept, "receptive-field maps")
    if not kept:
        raise VitlabError(f"no readable image among the first {opts.rf_images} of '{source.name}'")
    return [np.concatenate([k[i] for k in kept]) for i in range(len(points))]


def _growth(maps: list[np.ndarray], idx: np.ndarray) -> tuple[Estimate, Estimate, Estimate]:
    before, after = maps
    rb, ra = ev.radius_fraction(before.mean(0)), ev.radius_fraction(after.mean(0))
    sb, sa = ev.radius_fraction(ev.mean_replicates(before, idx)), ev.radius_fraction(ev.mean_replicates(after, idx))
    return (Estimate.from_samples(float(ra - rb), sa - sb), Estimate.from_samples(float(rb), sb),
            Estimate.from_samples(float(ra), sa))


def measure_growth(ms: Models, source, opts, run):
    from ..analyses.receptive import block_names

    ms.need("vit", "cnn")
    vmaps = _field_maps(ms.vit, [("blocks.0", "in"), ("blocks.0.ls1", "out")], source, opts, run)
    first = block_names(ms.cnn)[0]
    cmaps = _field_maps(ms.cnn, [(first, "in"), (first, "out")], source, opts, run)
    idx = ev.resample_indices(len(vmaps[0]), run.bootstrap, run.seed)
    vg, vb, va = _growth(vmaps, idx)
    cg, cb, ca = _growth(cmaps, idx)
    detail = (f"50 % radius as a fraction of the input side: {ms.vit.label} block 0 input {vb.text()}, its attention "
              f"sublayer (pre-residual) {va.text()}; {ms.cnn.label} {first} input {cb.text()}, output {ca.text()}")
    rows = _rows(("ViT: attention growth", "statistic", vg), ("CNN: first block growth", "control", cg),
                 ("ViT block 0 input", "detail", vb), ("ViT attention sublayer", "detail", va),
                 ("CNN first block input", "detail", cb), ("CNN first block output", "detail", ca))
    return T.check_growth(vg, cg, detail), rows


def measure_skips(ms: Models, source, opts, run):
    ms.need("vit", "cnn")
    stat = SkipStatistic()
    kept = [(b.index, [(f[k][stat.name]["ratio_sum"], float(np.asarray(f[k][stat.name]["count"]).sum()))
                       for k in range(2)])
            for b, f in _stream([ms.vit, ms.cnn], source, _indices(source, opts), opts.batch_size, [[stat], [stat]],
                                run)]
    kept = run.gather_ordered(kept, "skip-ratio sums")  # every rank's batches, in batch order
    sums = [[per[k][0] for per in kept] for k in range(2)]
    counts = [[per[k][1] for per in kept] for k in range(2)]
    idx = ev.resample_indices(len(counts[0]), run.bootstrap, run.seed)
    est = []
    for s, c in zip(sums, counts):
        s, c = np.stack(s), np.array(c)
        est.append(Estimate.from_samples(float(T.finite_median(s.sum(0) / c.sum())),
                                         T.finite_median(ev.ratio_replicates(s, c, idx))))
    detail = f"median ‖z‖/‖f(z)‖ over sublayers and tokens: {ms.vit.label} {est[0].text('.2f')}, " \
             f"{ms.cnn.label} {est[1].text('.2f')}"
    return T.check_skips(est[0], est[1], detail), _rows(("ViT median ratio", "statistic", est[0]),
                                                          ("CNN median ratio", "control", est[1]))


def measure_removal(ms: Models, source, opts, run):
    if len(opts.noskip) != 2:
        raise VitlabError(f"--noskip takes two models (with the skip, retrained without it), not {len(opts.noskip)}")
    normal, noskip = ms.get(opts.noskip[0]), ms.get(opts.noskip[1])
    accs = _self_cka([noskip, normal], source, opts, run)
    idx = _idx(accs[0], run)
    blocks = [int(t.split(".")[1]) for t in accs[0].layers_a]
    est = [Estimate.from_samples(float(T.cross_block_mean(_point(a), blocks, opts.noskip_block)),
                                 T.cross_block_mean(a.replicates(idx), blocks, opts.noskip_block)) for a in accs]
    detail = (f"mean self-CKA between layers before and after block {opts.noskip_block}: {noskip.label} (retrained "
              f"without its skips) {est[0].text()}, {normal.label} {est[1].text()}")
    return T.check_removal(est[0], est[1], opts.noskip_block, detail), \
        _rows(("retrained without skips", "statistic", est[0]), ("with skips", "control", est[1]))


def _localization(models: list[LoadedModel], source, opts, run) -> list[tuple[Estimate, Estimate, int]]:
    """Per model: (chance-corrected rate, raw rate, positions) of its last default localization layer."""
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
    idx = _idx(accs[0], run)
    out = []
    for m, acc in zip(models, accs):
        prefix, positions = taps_mod.num_prefix_tokens(m.model), len(acc.layers_b)
        rate, reps = ev.localized_rate(_point(acc), prefix), ev.localized_rate(acc.replicates(idx), prefix)
        out.append((Estimate.from_samples(float(ev.chance_corrected(rate, positions)),
                                          ev.chance_corrected(reps, positions)),
                    Estimate.from_samples(float(rate), reps), positions))
    return out


def _loc_text(m: LoadedModel, r: tuple[Estimate, Estimate, int]) -> str:
    corr, raw, g = r
    return (f"{m.label} last layer: {raw.value:.0%} of tokens best matched at their own patch (chance "
            f"{ev.chance_level(g):.0%} on {g} positions), chance-corrected {corr.text('.2f')}")


def measure_localization(ms: Models, source, opts, run):
    ms.need("vit", "cnn")
    r = _localization([ms.vit, ms.cnn], source, opts, run)
    detail = f"{_loc_text(ms.vit, r[0])}; {_loc_text(ms.cnn, r[1])}"
    return T.check_localization(r[0][0], r[1][0], detail), _rows(("ViT", "statistic", r[0][0]),
                                                                   ("CNN", "control", r[1][0]))


def measure_gap(ms: Models, source, opts, run):
    if len(opts.gap_pair) != 2:
        raise VitlabError(f"--gap-pair takes two models (CLS, GAP), not {len(opts.gap_pair)}")
    cls, gap = ms.get(opts.gap_pair[0]), ms.get(opts.gap_pair[1])
    r = _localization([cls, gap], source, opts, run)
    detail = f"{_loc_text(cls, r[0])}; {_loc_text(gap, r[1])}"
    # timm's avg pooling moves the final LayerNorm into fc_norm, after pooling, unless built with fc_norm=False
    norm_moved = type(getattr(gap.model, "fc_norm", None)).__name__ not in ("NoneType", "Identity")
    return T.check_gap(r[0][0], r[1][0], detail, norm_moved), _rows(("CLS model", "statistic", r[0][0]),
                                                         ("GAP model", "control", r[1][0]))


def _probe_margins(m: LoadedModel, source, opts, run) -> tuple[np.ndarray, list[str]]:
    """Per few-shot draw: min(GAP − CLS at the first layer, CLS gain first → last); features extracted once."""
    from ..analyses import probes

    if not source.has_labels:
        raise VitlabError(f"data source '{source.name}' has no labels: the probe check needs Fashion-MNIST, CIFAR "
                          "or a folder with one sub-folder per class")
    every = probes.default_layers(m.model)
    layers = (every[0], every[-1])  # the claim compares the first and the last block
    stat = probes.ProbeFeatures(layers, ("cls", "gap"))
    feats: dict[str, list] = {}
    labels: list = []
    pool = select(source, max(opts.images, opts.probe_test + 30 * opts.probe_shots), None)
    kept = [(batch.index, (f[0][stat.name], list(batch.labels)))
            for batch, f in _stream([m], source, pool, opts.batch_size, [[stat]], run)]
    for values, batch_labels in run.gather_ordered(kept, "probe features"):  # every rank's, in batch order
        for key, v in values.items():
            feats.setdefault(key, []).append(v)
        labels += batch_labels
    x = {k: np.concatenate(v) for k, v in feats.items()}
    y = np.array(labels)
    classes = len(source.classes)
    margins, texts = [], []
    for d in range(opts.probe_draws):
        parts = dict(zip(("train", "val", "test"), draw_split(y, opts.probe_shots, opts.probe_test, run.seed + d)))
        acc = {(rep, i): probes._probe_one({p: x[f"{rep}|{tap}"][ix] for p, ix in parts.items()},
                                           {p: y[ix] for p, ix in parts.items()}, classes)[0]
               for rep in ("cls", "gap") for i, tap in enumerate((layers[0], layers[-1]))}
        margins.append(min(acc["gap", 0] - acc["cls", 0], acc["cls", 1] - acc["cls", 0]))
        texts.append(f"CLS {acc['cls', 0]:.0%}→{acc['cls', 1]:.0%}, GAP {acc['gap', 0]:.0%}→{acc['gap', 1]:.0%} "
                     f"({layers[0]} → {layers[-1]})")
    return np.array(margins), texts


def measure_probes(ms: Models, source, opts, run):
    ms.need("vit")
    models = [ms.vit] + ([ms.twin(ms.vit)] if ms.control == "random" else [])
    ests, first_text = [], ""
    for m in models:
        margins, texts = _probe_margins(m, source, opts, run)
        ests.append(ev.mean_estimate(margins, run.bootstrap, run.seed))
        first_text = first_text or f"{m.label}, first draw: {texts[0]}"
    detail = (f"margin min(GAP − CLS at the first layer, CLS gain first → last) over {opts.probe_draws} few-shot "
              f"draws ({opts.probe_shots} shots): {ests[0].text()}; {first_text}")
    twin = ests[1] if len(ests) > 1 else None
    rows = _rows(("margin", "statistic", ests[0]), *([("untrained twin", "control", twin)] if twin else []))
    return T.check_probes(ests[0], twin, detail), rows


def measure_scale(ms: Models, source, opts, run):
    scale_pairs = opts.pairs()
    specs = list(dict.fromkeys(s for pair in scale_pairs for s in pair))
    models = [ms.get(s) for s in specs]
    stats = [GramStatistic() for _ in models]
    accs = {(a, b): ev.BootstrapCKA(stats[specs.index(a)].taps(ms.get(a)), stats[specs.index(b)].taps(ms.get(b)))
            for a, b in scale_pairs}
    for batch, found in _stream(models, source, _indices(source, opts), opts.batch_size, [[s] for s in stats], run):
        c = [cka_mod.centred(f["gram"]["grams"]) for f in found]
        for (a, b), acc in accs.items():
            acc.update(c[specs.index(a)], c[specs.index(b)], key=batch.index)
    run.reduce_accumulators(accs)
    first = next(iter(accs.values()))
    idx = _idx(first, run)
    points, reps, texts = [], [], []
    for (a, b), acc in accs.items():
        p = T.depth_drop(np.diagonal(_point(acc)))
        r = T.depth_drop(np.diagonal(acc.replicates(idx), axis1=-2, axis2=-1))
        points.append(float(p))
        reps.append(r)
        texts.append(f"{a} vs {b}: {Estimate.from_samples(float(p), r).text()}")
    drop = Estimate.from_samples(min(points), np.min(np.stack(reps), axis=0))
    detail = ("block-by-block CKA, lower-half mean minus upper-half mean (smallest over the pairs): "
              + "; ".join(texts))
    rows = _rows(*[(t.split(":")[0], "statistic" if i == int(np.argmin(points)) else "detail",
                    Estimate.from_samples(points[i], reps[i])) for i, t in enumerate(texts)],
                 ("no depth trend", "control", Estimate.exact(0.0)))
    return T.check_scale(drop, detail), rows
