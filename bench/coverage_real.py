"""How often the tour's 95 % intervals cover on real activations (issue 50): the population is a whole test set.

    PYTHONPATH=$PWD python bench/coverage_real.py            # 10 / 20 / 18 partitions: 1,560 / 780 / 162 subsets
    PYTHONPATH=$PWD python bench/coverage_real.py --quick    # 2 / 4 / 4 partitions: 312 / 156 / 36 subsets

Simulation (bench/coverage_bench.py) knows its population value by construction; here the population is the 10,000
Fashion-MNIST test images and its value is the tour's own statistic on all of them (``zoo:vit-cls``, ``zoo:resnet``,
``zoo:vit-gap``; Figs 8 and 12's ``zoo:vit-cls-noskip``, ``-3pct``, ``-10pct``, ``-seed1``; the untrained twins, which
the learned answers compare against). Each design draws subsets of 64 images in batches of 16, 256 in batches of 32
and 1,024 in batches of 32, forms every check's statistic, its control and its learned answer's intervals (ViT − CNN
and the untrained twins' same statistic) with the tour's interval on the subset, and counts how often the interval
contains the population value. Figs 6 and 11 read their own images: bench/coverage_real_rf.py.

Cost: every model runs over the 10,000 images once per batch size (16 and 32: the per-batch statistics depend on
how images are batched) and each batch's statistic is reduced at once to what the intervals read (per-batch HSIC
terms of the self-CKA maps, the token-by-patch maps, Fig 5's heads and Fig 12's pairs, skip-ratio sums, per-image
attention distances), kept under ``bench/_cache/coverage_real``. A subset is a group of k of those batches: one partition of the
batches (a seeded permutation, cut into groups of k) gives disjoint subsets; several partitions give more subsets
(subsets of different partitions overlap, so the Monte-Carlo error is somewhat above the binomial sqrt(p(1 − p)/R)
printed). Forming 2,500 subsets' intervals took 8 minutes on the shared machine under a load
of 10-20; the forward passes, once, 20-70 s per model.
"""

from __future__ import annotations

import argparse
import os
import time

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):  # one thread: a 65 x 65 eigh (Fig 11's
    os.environ.setdefault(_v, "1")  # probes) took 0.17 s with a thread per core on the shared 2-core machine, 0.03 s
from pathlib import Path

import numpy as np

CACHE = Path(__file__).resolve().parent / "_cache" / "coverage_real"
VERSION = 4  # bump when what is kept per batch changes (4: taps, Fig 5's head Grams and lower blocks' distances)
DATA = "fashion-mnist:test"
TRAINED = ("zoo:vit-cls", "zoo:resnet", "zoo:vit-gap")
EXTRA = ("zoo:vit-cls-noskip", "zoo:vit-cls-3pct", "zoo:vit-cls-10pct", "zoo:vit-cls-seed1")  # Figs 8 and 12
TWINS = ("zoo:vit-cls@random:0", "zoo:resnet@random:0")
PAIRS = (("zoo:vit-cls", "zoo:resnet"), ("zoo:vit-cls@random:0", "zoo:resnet@random:0"))  # Fig 5: ViT heads, CNN
# Figs 8 and 12 read the tour's defaults (TourOptions: noskip, noskip_block, scale_pairs, seed_pair)
DESIGNS = ((64, 16, 10), (256, 32, 20), (1024, 32, 18))  # images, batch size, partitions (full run)
QUICK = ((64, 16, 2), (256, 32, 4), (1024, 32, 4))


# ---------------------------------------------------------------- per-batch statistics, once


def _path(spec: str, images: int | None, data: str, seed: int) -> Path:
    name = f"{spec}_{data}_{images}_{GRAM_BATCH}_s{seed}_v{VERSION}"
    return CACHE / (name.replace(":", "_").replace("@", "_") + ".npz")


GRAM_BATCH = 32  # the forward's batch; a batch of 16 is a diagonal block of its Grams


def collect(specs: list[str], batch_size: int, images: int | None = None, data: str = DATA, seed: int = 0,
            progress: bool = True) -> dict[str, dict[str, np.ndarray]]:
    """Per model, per batch of ``batch_size`` (16 or 32) of the first ``images`` of a seeded permutation of ``data``:
    self-CKA terms (T, L, L), (T, L); token-by-patch CKA terms (T, N, G), (T, N), (T, G) of the last localization
    layer; skip-ratio sums (T, S, N) and images (T,); sums of ‖z‖ and ‖f(z)‖ over the batch's images and tokens
    (T, S, 1) each; the lower blocks' per-image attention distances (n, blocks, H) (ViTs). Per pair of models
    (key 'A vs B', when both are among ``specs``): the CKA terms of Fig 5 (the ViT's lower-block heads against the
    CNN's lower layers, :data:`PAIRS`) and of Fig 12 (default taps against default taps, the tour's scale pairs).

    The models run once, in batches of 32 (:func:`_raw`, kept in :data:`CACHE`: npz, no pickle): the per-batch
    Grams (of batch-centred features), per-image skip ratios and distances. A batch of 16 is the first or second
    half of a batch of 32: its Grams are the diagonal blocks (U-centring makes linear HSIC blind to the feature mean
    the Gram was centred with, so a block gives the half-batch's own HSIC up to round-off), its sums the halves'."""
    from vitlab.stats import cka as cka_mod
    from vitlab.stats import evidence as ev

    if GRAM_BATCH % batch_size:
        raise SystemExit(f"batch size {batch_size} must divide {GRAM_BATCH}")
    raws = {spec: _raw(spec, images, data, seed, progress) for spec in specs}
    sizes = next(iter(raws.values()))["sizes"]
    parts = [(t, slice(start, min(int(size), start + batch_size))) for t, size in enumerate(sizes)
             for start in range(0, int(size), batch_size) if min(int(size), start + batch_size) - start >= 4]

    def terms(grams_a, grams_b=None):
        """CKA terms of every part's Grams (T, La, Lb), (T, La), (T, Lb): B's own Grams default to A's."""
        acc = None
        for t, part in parts:
            ga = cka_mod.centred(grams_a[t][:, part, part])
            gb = ga if grams_b is None else cka_mod.centred(grams_b[t][:, part, part])
            if acc is None:
                acc = ev.BootstrapCKA([str(i) for i in range(len(ga))], [str(i) for i in range(len(gb))])
            acc.update(ga, gb)
        return acc.terms()

    out = {}
    for spec, raw in raws.items():
        ends = np.concatenate([[0], np.cumsum(raw["sizes"])])
        xy, xx, _ = terms(raw["self_grams"])
        lxy, lxx, lyy = terms(raw["tok_grams"], raw["patch_grams"])
        rows = [slice(ends[t] + p.start, ends[t] + p.stop) for t, p in parts]
        norms = np.stack([raw["norms"][r].sum(0) for r in rows])  # (T, S, 2)
        o = {"self_xy": xy, "self_xx": xx, "loc_xy": lxy, "loc_xx": lxx, "loc_yy": lyy,
             "ratio_sum": np.stack([raw["ratios"][r].sum(0) for r in rows]),
             "count": np.array([float(r.stop - r.start) for r in rows]), "sizes": np.array([p.stop - p.start
                                                                                          for _, p in parts]),
             "z_sum": norms[..., :1], "fz_sum": norms[..., 1:]}
        o.update({k: raw[k] for k in ("prefix", "dist", "uniform", "dist_max", "taps", "lower") if k in raw})
        if "dist" in raw:  # per part, the rows of its images: the subset's mean distances
            o["rows"] = np.array([[r.start, r.stop] for r in rows])
        out[spec] = o
    for vit, cnn in PAIRS:
        if vit in raws and cnn in raws:
            lower = int(raws[cnn]["lower"])
            xy, xx, yy = terms(raws[vit]["head_grams"], raws[cnn]["self_grams"][:, :lower])
            out[f"{vit} vs {cnn}"] = {"xy": xy, "xx": xx, "yy": yy}
    for a, b in _scale_pairs():
        if a in raws and b in raws:
            xy, xx, yy = terms(raws[a]["self_grams"], raws[b]["self_grams"])
            out[f"{a} vs {b}"] = {"xy": xy, "xx": xx, "yy": yy}
    return out


def _scale_pairs() -> list[tuple[str, str]]:
    """Fig 12's pairs as the tour's defaults name them: the less-data pairs, then the other-seed pair."""
    import vitlab.tour.checks as T

    o = T.TourOptions()
    return list(dict.fromkeys(o.pairs() + [o.seed_control()]))


def _raw(spec, images, data, seed, progress):
    """One model's pass over the images in batches of :data:`GRAM_BATCH` (module docstring), cached."""
    path = _path(spec, images, data, seed)
    if path.exists():
        with np.load(path, allow_pickle=False) as f:
            return {k: f[k] for k in f.files}
    import dataclasses

    import torch

    import vitlab
    from vitlab.analyses.attention import distance_matrix
    from vitlab.analyses.heads import default_lower_taps
    from vitlab.analyses.skips import SkipStatistic, branch_norms, sublayers
    from vitlab.engine.context import Run
    from vitlab.engine.run import GramStatistic, stream
    from vitlab.inputs import taps as taps_mod
    from vitlab.inputs.cache import Store
    from vitlab.inputs.data import select
    from vitlab.stats import evidence as ev
    from vitlab.tour.measure.attention import _head_stats
    from vitlab.tour.measure.localization import _loc_stat

    @dataclasses.dataclass(frozen=True)
    class PerImageSkips(SkipStatistic):
        """SkipStatistic's ratios before its sum over the batch's images (B, S, N), and each image's sums over
        tokens (a CNN's positions) of ‖z‖ and ‖f(z)‖ (B, S, 2)."""

        name: str = "skips-per-image"

        def compute(self, acts, loaded, batch):
            cnn = taps_mod.family(loaded.model) in ("resnet", "resnetv2")
            out, norms = [], []
            for _, z_tap, fz_tap, sum_tap in sublayers(loaded.model):
                z, total = acts[z_tap], acts[sum_tap]
                nz, nf, _ = branch_norms(z, total - z if cnn else acts[fz_tap])
                r = nz / nf
                out.append((r.mean(dim=1, keepdim=True) if cnn else r).cpu().numpy())
                norms.append(torch.stack([nz.sum(1), nf.sum(1)], -1).cpu().numpy())
            return {"ratio": np.stack(out, axis=1), "norms": np.stack(norms, axis=1)}

    t0 = time.perf_counter()
    torch.set_num_threads(1)
    source = vitlab.open_source(data)
    m = vitlab.load(spec, "cpu")
    vit = taps_mod.family(m.model) == "vit"
    gram = GramStatistic()
    stats = [gram, _loc_stat(m), PerImageSkips()]
    if vit:  # Fig 5's lower blocks (Figs 3-4 read block 0 of them) and their heads' Grams, as the tour's _head_stats
        _, dstat, hstat, _ = _head_stats(m, m)
        stats += [dstat, hstat]
    keep: dict[str, list] = {"self_grams": [], "tok_grams": [], "patch_grams": [], "ratios": [], "norms": [],
                             "dist": [], "head_grams": [], "sizes": []}
    for batch, found in stream([m], source, select(source, images, seed), GRAM_BATCH, [stats],
                               Run(store=Store(None), workers=0)):
        f = found[0]
        n = f["gram"]["grams"].shape[-1]
        if n != GRAM_BATCH:  # the short last batch: padded to 32 so that the arrays stack; its size says which
            pad = [(0, 0), (0, GRAM_BATCH - n), (0, GRAM_BATCH - n)]
        else:
            pad = None
        grams = [("self_grams", f["gram"]["grams"]), ("tok_grams", f[stats[1].name]["tokens_0"]),
                 ("patch_grams", f[stats[1].name]["patches_0"])]
        for key, arr in grams + ([("head_grams", f[stats[4].name]["grams"])] if vit else []):
            keep[key].append(np.pad(arr, pad) if pad else arr)
        keep["ratios"].append(f["skips-per-image"]["ratio"])
        keep["norms"].append(f["skips-per-image"]["norms"])
        keep["sizes"].append(n)
        if vit:
            keep["dist"].append(f[stats[3].name]["raw"].transpose(2, 0, 1))  # (B, blocks, H)
        if progress and batch.index % 50 == 0:
            print(f"  {spec}: batch {batch.index}, {time.perf_counter() - t0:.0f} s", flush=True)
    o = {k: (np.stack(v) if k.endswith("grams") else np.concatenate(v) if k in ("ratios", "norms", "dist")
             else np.array(v))
         for k, v in keep.items() if v}
    o["prefix"] = np.array(taps_mod.num_prefix_tokens(m.model))
    o["taps"] = np.array(gram.taps(m))
    lower = default_lower_taps(m)  # Fig 5's CNN layers: the first half of the default taps, a prefix of self_grams'
    if list(o["taps"][:len(lower)]) != lower:
        raise SystemExit(f"{spec}: its lower taps {lower} are not the first of its default taps {list(o['taps'])}")
    o["lower"] = np.array(len(lower))
    if vit:
        dm = distance_matrix(taps_mod.grid_size(m.model), taps_mod.patch_size(m.model))
        o["uniform"] = np.array(ev.uniform_distance(dm, taps_mod.num_prefix_tokens(m.model), renormalise=False))
        o["dist_max"] = np.array(float(dm.max()))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, **o)
    tmp.replace(path)
    if progress:
        print(f"  {spec}: {len(o['sizes'])} batches of {GRAM_BATCH}, {time.perf_counter() - t0:.0f} s", flush=True)
    return o


# ---------------------------------------------------------------- the tour's estimates on a set of batches


# rows of :func:`estimates` that are not an interval the tour shows: the mean leads (printed without one) and Fig 7's
# statistic before issue 50 (kept for the comparison in docs/evidence.md)
NOT_SHOWN = ("Fig 7 before: ViT median of mean ratios", "Fig 9: ViT mean lead of its own position",
             "Fig 9: CNN mean lead", "Fig 10: GAP mean lead")


VIT, CNN = "zoo:vit-cls", "zoo:resnet"
VIT_TWIN, CNN_TWIN = TWINS
LEARNED = " (learned: untrained twins)"


def estimates(per: dict[str, dict[str, np.ndarray]], batches: np.ndarray) -> dict[str, object]:
    """Every check's statistic, control and learned answer's intervals (the trained ViT − CNN and the untrained twins'
    same statistic, which the tour compares) on the batches ``batches`` of the collected statistics ``per`` (model
    or 'A vs B' pair -> :func:`collect`'s arrays): the tour's own functions of per-batch terms throughout (uniformity
    and locality: the same lines as ``measure_uniformity`` and ``measure_locality``, whose inputs are streams). A
    row needs its models among ``per``; Figs 6 and 11 have their own populations (bench/coverage_real_rf.py)."""
    import vitlab.tour.checks as T
    from vitlab.stats import evidence as ev
    from vitlab.stats import leads
    from vitlab.tour.measure.attention import head_rank
    from vitlab.tour.measure.common import _jack, _vit_minus_cnn
    from vitlab.tour.measure.similarity import pair_curve, removal_estimate, scale_excess, uniformity_estimate
    from vitlab.tour.measure.skips import median_ratio

    b = np.asarray(batches)
    jk = ev.jackknife_indices(len(b))
    opts = T.TourOptions()
    out: dict[str, object] = {}

    def both(*specs):
        return all(s in per for s in specs)

    def self_map(x):
        xy, xx = x["self_xy"][b], x["self_xx"][b]
        return ev.ratio(xy.sum(0), xx.sum(0), xx.sum(0)), ev.cka_replicates(xy, xx, xx, jk)

    def uniformity(x):
        point, loo = self_map(x)
        return float(T.off_diagonal_mean(point)), T.off_diagonal_mean(loo)

    def gap(v, c):
        (pv, lv), (pc, lc) = uniformity(per[v]), uniformity(per[c])
        return uniformity_estimate(pv - pc, lv - lc, gap=True), (pv, lv), (pc, lc)

    g, uv, uc = gap(VIT, CNN)
    out["Figs 1-2: ViT − ResNet uniformity gap"] = g
    out["Figs 1-2: ViT mean CKA between layers"] = uniformity_estimate(*uv)
    out["Figs 1-2: ResNet mean CKA between layers"] = uniformity_estimate(*uc)
    if both(VIT_TWIN, CNN_TWIN):
        out["Figs 1-2: untrained twins' gap" + LEARNED] = gap(VIT_TWIN, CNN_TWIN)[0]

    vit = per[VIT]
    uniform = float(vit["uniform"])

    def distances(x):  # (n, blocks, H) per-image distances of the subset's images
        return np.concatenate([x["dist"][slice(*x["rows"][t])] for t in b])

    def locality(x):
        first = distances(x)[:, 0]  # (n, H)
        # leave-one-image-out means, (sum − x_i) / (n − 1): ev.mean_replicates' values without its (n, n − 1) gather
        loo = T.head_locality((first.sum(0) - first) / (len(first) - 1), uniform)
        return _jack(T.head_locality(first.mean(0), uniform), loo, "images",
                     bounds=(1.0 - float(vit["dist_max"]) / uniform, 1.0))

    out["Figs 3-4: most local first-block head"] = locality(vit)
    if VIT_TWIN in per:
        out["Figs 3-4: untrained twin's most local head" + LEARNED] = locality(per[VIT_TWIN])

    for (v, c), name in zip(PAIRS, ("Fig 5: −ρ(head distance, CKA with the CNN's lower layers)",
                                    "Fig 5: untrained twins' −ρ" + LEARNED)):
        if f"{v} vs {c}" in per:
            p = per[f"{v} vs {c}"]
            xy, xx, yy = p["xy"][b], p["xx"][b], p["yy"][b]
            parts = [per[v]["dist"][slice(*per[v]["rows"][t])] for t in b]  # each batch's (n, blocks, H)
            sums, counts = np.stack([d.sum(0).ravel() for d in parts]), np.array([len(d) for d in parts], float)
            out[name] = head_rank(sums, counts, ev.ratio(xy.sum(0), xx.sum(0), yy.sum(0)), xy, xx, yy, T.TOUR_SEED,
                                  opts.permutations)[0]

    skip = [median_ratio(per[s]["z_sum"][b], per[s]["fz_sum"][b]) for s in (VIT, CNN, VIT_TWIN, CNN_TWIN) if s in per]
    effect, twin, _, _ = _vit_minus_cnn(skip if len(skip) == 4 else skip[:2], 1, (), "")
    out["Fig 7 before: ViT median of mean ratios"] = _median_of_means(vit["ratio_sum"][b], vit["count"][b])
    out["Fig 7: ViT median skip ratio"], out["Fig 7: CNN median (control)"] = skip[0][0], skip[1][0]
    out["Fig 7: ViT − CNN (learned difference)"] = effect
    if twin is not None:
        out["Fig 7: untrained twins' ViT − CNN" + LEARNED] = twin

    normal, noskip = opts.noskip
    if both(normal, noskip):
        for spec, name in ((noskip, f"Fig 8: {noskip}, block {opts.noskip_block} across"),
                           (normal, f"Fig 8: {normal} with its skips (control)")):
            out[name] = removal_estimate(*self_map(per[spec]), list(per[spec]["taps"]), opts.noskip_block)

    loc = {k: leads.from_terms(x["loc_xy"][b], x["loc_xx"][b], x["loc_yy"][b], int(x["prefix"]))
           for k, x in per.items() if k in (VIT, CNN, "zoo:vit-gap", VIT_TWIN, CNN_TWIN)}
    out["Fig 9: ViT chance-corrected localization"] = loc[VIT].corrected
    out["Fig 9: CNN (control)"] = loc[CNN].corrected
    out["Fig 9: ViT − CNN (learned difference)"] = leads.interval_difference(loc[VIT].corrected, loc[CNN].corrected)
    if both(VIT_TWIN, CNN_TWIN):
        out["Fig 9: untrained twins' ViT − CNN" + LEARNED] = leads.interval_difference(loc[VIT_TWIN].corrected,
                                                                                      loc[CNN_TWIN].corrected)
    out["Fig 9: ViT mean lead of its own position"] = loc[VIT].lead
    out["Fig 9: CNN mean lead"] = loc[CNN].lead
    if "zoo:vit-gap" in loc:
        out["Fig 10: GAP model (control)"] = loc["zoo:vit-gap"].corrected
        out["Fig 10: GAP mean lead"] = loc["zoo:vit-gap"].lead

    pairs = _scale_pairs()
    if all(f"{a} vs {c}" in per for a, c in pairs):
        drop = {}
        for a, c in pairs:
            p = per[f"{a} vs {c}"]
            xy, xx, yy = p["xy"][b], p["xx"][b], p["yy"][b]
            drop[a, c] = pair_curve(ev.ratio(xy.sum(0), xx.sum(0), yy.sum(0)), ev.cka_replicates(xy, xx, yy, jk))[1]
        out["Fig 12: smallest less-data drop minus the other seed's"] = scale_excess(drop, opts.pairs(),
                                                                                      opts.seed_control())[0]
    out["_ties"] = {k: v.ties for k, v in loc.items()}
    return out


def _median_of_means(sums: np.ndarray, counts: np.ndarray):
    """Fig 7's statistic before issue 50 (for the comparison in docs/evidence.md): the median over sublayers and
    tokens of the mean per-image ratio, from per-batch ratio sums (T, S, N) and images (T,), jackknife t, log scale."""
    import vitlab.tour.checks as T
    from vitlab.stats import evidence as ev
    from vitlab.tour.measure.common import _jack

    loo = T.finite_median(ev.ratio_replicates(sums, counts, ev.jackknife_indices(len(counts))))
    return _jack(float(T.finite_median(sums.sum(0) / counts.sum())), loo, bounds=(0.0, np.inf))


def partitions(batches: int, per_subset: int, count: int, seed: int = 0) -> list[np.ndarray]:
    """``count`` partitions of ``batches`` batches, each cut into disjoint subsets of ``per_subset`` batches."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        perm = rng.permutation(batches)
        out += [np.sort(perm[k * per_subset:(k + 1) * per_subset]) for k in range(batches // per_subset)]
    return out


def coverage(per: dict, population: dict, subsets: list[np.ndarray]) -> dict[str, dict]:
    """Per statistic: how many subsets' intervals cover the population value, misses below / above, intervals that
    are the statistic's whole range, no interval, mean width, mean estimate."""
    rows: dict[str, dict] = {}
    for sub in subsets:
        for name, e in estimates(per, sub).items():
            if not name.startswith("_"):
                tally(rows, name, e, population[name].value)
    return rows


def tally(rows: dict[str, dict], name: str, e, truth: float) -> None:
    """Count one interval ``e`` against the population value ``truth`` in ``rows[name]``."""
    r = rows.setdefault(name, {"covered": 0, "below": 0, "above": 0, "none": 0, "n": 0, "width": 0.0, "value": 0.0})
    r["n"] += 1
    r["value"] += e.value
    if not (np.isfinite(e.lo) and np.isfinite(e.hi) and np.isfinite(truth)):
        r["none"] += 1
        return
    r["width"] += e.hi - e.lo
    lo, hi = min(e.lo, e.value), max(e.hi, e.value)
    r["covered"] += lo <= truth <= hi
    r["below"] += hi < truth
    r["above"] += lo > truth


def report(design: str, rows: dict[str, dict], population: dict, table: dict) -> None:
    """Print each row's coverage ± its binomial Monte-Carlo standard error, misses by side, widths and estimates
    against the population value, and put its cell in ``table[name][design]``."""
    for name, r in rows.items():
        k = r["n"] - r["none"]
        p = r["covered"] / max(k, 1)
        se = 100 * np.sqrt(p * (1 - p) / max(k, 1))
        truth = population[name] if isinstance(population[name], float) else population[name].value
        print(f"  {name:44s} {100 * p:5.1f} % ± {se:.1f}  (below {r['below']}, above {r['above']}, no interval "
              f"{r['none']}, mean width {r['width'] / max(k, 1):.3f}, mean estimate {r['value'] / r['n']:.4f} "
              f"against {truth:.4f})", flush=True)
        cell = f"{100 * p:.1f} ± {se:.1f}" if k else f"no interval in {r['n']}"
        table.setdefault(name, {})[design] = cell + (f" (of {k})" if 0 < k < r["n"] else "")


def print_table(table: dict, counts: dict) -> None:
    cols = list(counts)
    print("subsets: " + ", ".join(f"{c} {counts[c]}" for c in cols))
    print("\n| check | " + " | ".join(cols) + " |\n|---|" + "---|" * len(cols))
    for name, row in table.items():
        print(f"| {name} | " + " | ".join(row.get(c, "") for c in cols) + " |")


def full_batches(per: dict, batch_size: int) -> int:
    """How many leading batches of every model hold exactly ``batch_size`` images (a short last batch is left out)."""
    sizes = next(iter(per.values()))["sizes"]
    return int((sizes == batch_size).sum())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer partitions: 312 / 156 / 36 subsets")
    p.add_argument("--no-twins", action="store_true", help="without the untrained twins (the learned answers)")
    p.add_argument("--no-extra", action="store_true", help="without Figs 8 and 12's zoo models")
    p.add_argument("--images", type=int, default=None, help="population: the first N of the permutation (all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--collect-only", action="store_true")
    p.add_argument("--model", help="run only this model's pass (e.g. several passes side by side), then stop")
    a = p.parse_args()
    specs = list(TRAINED) + ([] if a.no_extra else list(EXTRA)) + ([] if a.no_twins else list(TWINS))
    t0 = time.perf_counter()
    if a.model:
        _raw(a.model, a.images, DATA, a.seed, True)
        return
    for spec in specs:
        _raw(spec, a.images, DATA, a.seed, True)
    print(f"the models' passes: {time.perf_counter() - t0:.0f} s", flush=True)
    if a.collect_only:
        return
    pop_per = collect(specs, 32, a.images, seed=a.seed, progress=False)
    population = estimates(pop_per, np.arange(len(pop_per[specs[0]]["count"])))
    n = int(pop_per[specs[0]]["sizes"].sum())
    print(f"population: {n} images of {DATA} in batches of 32; near-ties on all of them: {population['_ties']}")
    for name, e in population.items():
        if not name.startswith("_"):
            print(f"  {name:44s} {e.text()}")
    table, counts = {}, {}
    for images, bs, parts in (QUICK if a.quick else DESIGNS):
        t = time.perf_counter()
        per = collect(specs, bs, a.images, seed=a.seed, progress=False)
        subsets = partitions(full_batches(per, bs), images // bs, parts, a.seed)
        cov = coverage(per, population, subsets)
        print(f"{images}/{bs}: {len(subsets)} subsets ({parts} partitions), {time.perf_counter() - t:.0f} s")
        report(f"{images}/{bs}", cov, population, table)
        counts[f"{images}/{bs}"] = len(subsets)
    print_table(table, counts)
    print(f"{time.perf_counter() - t0:.0f} s in all")


if __name__ == "__main__":
    main()
