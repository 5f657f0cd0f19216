"""How often the tour's 95 % intervals cover on real activations (issue 50): the population is a whole test set.

    PYTHONPATH=$PWD python bench/coverage_real.py            # 10 / 20 / 18 partitions: 1,560 / 780 / 162 subsets
    PYTHONPATH=$PWD python bench/coverage_real.py --quick    # 2 / 4 / 4 partitions: 312 / 156 / 36 subsets

Simulation (bench/coverage_bench.py) knows its population value by construction; here the population is the 10,000
Fashion-MNIST test images and its value is the tour's own statistic on all of them (``zoo:vit-cls``, ``zoo:resnet``,
``zoo:vit-gap``, ``zoo:vit-cls-noskip``, and with ``--twins`` the untrained twins). Each design draws subsets of
64 images in batches of 16, 256 in batches of 32 and 1,024 in batches of 32, forms every check's statistic, its
control and its learned difference (ViT − CNN) with the tour's interval on the subset, and counts how often the
interval contains the population value.

Cost: every model runs over the 10,000 images once per batch size (16 and 32: the per-batch statistics depend on
how images are batched) and each batch's statistic is reduced at once to what the intervals read (per-batch HSIC
terms of the self-CKA maps and of the token-by-patch maps, skip-ratio sums, per-image attention distances), kept
under ``bench/_cache/coverage_real`` (a few MB). A subset is a group of k of those batches: one partition of the
batches (a seeded permutation, cut into groups of k) gives disjoint subsets; several partitions give more subsets
(subsets of different partitions overlap, so the Monte-Carlo error is somewhat above the binomial sqrt(p(1 − p)/R)
printed). Forming 2,500 subsets' intervals takes seconds; the forward passes, once, about a minute per model.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

CACHE = Path(__file__).resolve().parent / "_cache" / "coverage_real"
VERSION = 3  # bump when what is kept per batch changes (3: per-image skip and branch norms)
DATA = "fashion-mnist:test"
TRAINED = ("zoo:vit-cls", "zoo:resnet", "zoo:vit-gap")
EXTRA = ("zoo:vit-cls-noskip",)  # Fig 8 (--extra)
TWINS = ("zoo:vit-cls@random:0", "zoo:resnet@random:0")
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
    (T, S, 1) each; block 0's per-image attention distances (n, H) (ViTs).

    The models run once, in batches of 32 (:func:`_raw`, kept in :data:`CACHE`: npz, no pickle): the per-batch
    Grams (of batch-centred features), per-image skip ratios and distances. A batch of 16 is the first or second
    half of a batch of 32: its Grams are the diagonal blocks (U-centring makes linear HSIC blind to the feature mean
    the Gram was centred with, so a block gives the half-batch's own HSIC up to round-off), its sums the halves'."""
    from vitlab.stats import cka as cka_mod
    from vitlab.stats import evidence as ev

    if GRAM_BATCH % batch_size:
        raise SystemExit(f"batch size {batch_size} must divide {GRAM_BATCH}")
    out = {}
    for spec in specs:
        raw = _raw(spec, images, data, seed, progress)
        ends = np.concatenate([[0], np.cumsum(raw["sizes"])])
        self_acc = loc_acc = None
        ratio, count, zn, fzn = [], [], [], []
        for t, size in enumerate(raw["sizes"]):
            for start in range(0, int(size), batch_size):
                stop = min(int(size), start + batch_size)
                if stop - start < 4:
                    continue
                part = slice(start, stop)
                g = raw["self_grams"][t][:, part, part]
                if self_acc is None:
                    self_acc = ev.BootstrapCKA([str(i) for i in range(len(g))], [str(i) for i in range(len(g))])
                    loc_acc = ev.BootstrapCKA([str(i) for i in range(raw["tok_grams"].shape[1])],
                                              [str(i) for i in range(raw["patch_grams"].shape[1])])
                self_acc.update(cka_mod.centred(g))
                loc_acc.update(cka_mod.centred(raw["tok_grams"][t][:, part, part]),
                               cka_mod.centred(raw["patch_grams"][t][:, part, part]))
                ratio.append(raw["ratios"][ends[t] + start:ends[t] + stop].sum(0))
                norms = raw["norms"][ends[t] + start:ends[t] + stop].sum(0)  # (S, 2)
                zn.append(norms[:, :1])
                fzn.append(norms[:, 1:])
                count.append(float(stop - start))
        xy, xx, _ = self_acc.terms()
        lxy, lxx, lyy = loc_acc.terms()
        o = {"self_xy": xy, "self_xx": xx, "loc_xy": lxy, "loc_xx": lxx, "loc_yy": lyy,
             "ratio_sum": np.stack(ratio), "count": np.array(count), "sizes": np.array(self_acc.sizes),
             "z_sum": np.stack(zn), "fz_sum": np.stack(fzn)}
        o.update({k: raw[k] for k in ("prefix", "dist", "uniform", "dist_max") if k in raw})
        out[spec] = o
    return out


def _raw(spec, images, data, seed, progress):
    """One model's pass over the images in batches of :data:`GRAM_BATCH` (module docstring), cached."""
    path = _path(spec, images, data, seed)
    if path.exists():
        with np.load(path, allow_pickle=False) as f:
            return {k: f[k] for k in f.files}
    import dataclasses

    import torch

    import vitlab
    from vitlab.analyses.attention import AttentionDistanceStatistic, distance_matrix
    from vitlab.analyses.skips import SkipStatistic, branch_norms, sublayers
    from vitlab.engine.context import Run
    from vitlab.engine.run import GramStatistic, stream
    from vitlab.inputs import taps as taps_mod
    from vitlab.inputs.cache import Store
    from vitlab.inputs.data import select
    from vitlab.stats import evidence as ev
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
    stats = [GramStatistic(), _loc_stat(m), PerImageSkips()] + ([AttentionDistanceStatistic((0,))] if vit else [])
    keep: dict[str, list] = {"self_grams": [], "tok_grams": [], "patch_grams": [], "ratios": [], "norms": [],
                             "dist": [], "sizes": []}
    for batch, found in stream([m], source, select(source, images, seed), GRAM_BATCH, [stats],
                               Run(store=Store(None), workers=0)):
        f = found[0]
        n = f["gram"]["grams"].shape[-1]
        if n != GRAM_BATCH:  # the short last batch: padded to 32 so that the arrays stack; its size says which
            pad = [(0, 0), (0, GRAM_BATCH - n), (0, GRAM_BATCH - n)]
        else:
            pad = None
        for key, arr in (("self_grams", f["gram"]["grams"]), ("tok_grams", f[stats[1].name]["tokens_0"]),
                         ("patch_grams", f[stats[1].name]["patches_0"])):
            keep[key].append(np.pad(arr, pad) if pad else arr)
        keep["ratios"].append(f["skips-per-image"]["ratio"])
        keep["norms"].append(f["skips-per-image"]["norms"])
        keep["sizes"].append(n)
        if vit:
            keep["dist"].append(f[stats[3].name]["raw"][0].T)  # (B, H)
        if progress and batch.index % 50 == 0:
            print(f"  {spec}: batch {batch.index}, {time.perf_counter() - t0:.0f} s", flush=True)
    o = {k: (np.stack(v) if k.endswith("grams") else np.concatenate(v) if k in ("ratios", "norms", "dist")
             else np.array(v))
         for k, v in keep.items() if v}
    o["prefix"] = np.array(taps_mod.num_prefix_tokens(m.model))
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


def estimates(per: dict[str, dict[str, np.ndarray]], batches: np.ndarray) -> dict[str, object]:
    """Every check's statistic, control and learned difference (ViT − CNN) with the tour's interval, on the batches
    ``batches`` of the collected statistics ``per`` (model -> :func:`collect`'s arrays): the tour's own code where it
    is a function of per-batch terms (localization, skip ratios), the same few lines as the tour elsewhere."""
    import vitlab.tour.checks as T
    from vitlab.stats import evidence as ev
    from vitlab.stats import leads
    from vitlab.tour.measure.common import CKA_DIFF, CKA_RANGE, _jack
    from vitlab.tour.measure.skips import median_ratio

    b = np.asarray(batches)
    vit, cnn = per["zoo:vit-cls"], per["zoo:resnet"]
    out: dict[str, object] = {}

    def uniformity(x):
        xy, xx = x["self_xy"][b], x["self_xx"][b]
        point = float(T.off_diagonal_mean(ev.ratio(xy.sum(0), xx.sum(0), xx.sum(0))))
        return point, T.off_diagonal_mean(ev.cka_replicates(xy, xx, xx, ev.jackknife_indices(len(b))))

    (pv, lv), (pc, lc) = uniformity(vit), uniformity(cnn)
    out["Figs 1-2: ViT − ResNet uniformity gap"] = _jack(pv - pc, lv - lc, bounds=CKA_DIFF)
    out["Figs 1-2: ViT mean CKA between layers"] = _jack(pv, lv, bounds=CKA_RANGE)
    out["Figs 1-2: ResNet mean CKA between layers"] = _jack(pc, lc, bounds=CKA_RANGE)
    ends = np.concatenate([[0], np.cumsum(vit["sizes"])])
    first = np.concatenate([vit["dist"][ends[t]:ends[t + 1]] for t in b])  # (n, H)
    uniform = float(vit["uniform"])
    # leave-one-image-out means, (sum − x_i) / (n − 1): ev.mean_replicates' values without its (n, n − 1) gather
    loo = T.head_locality((first.sum(0) - first) / (len(first) - 1), uniform)
    out["Figs 3-4: most local first-block head"] = _jack(T.head_locality(first.mean(0), uniform), loo, "images",
                                                         bounds=(1.0 - float(vit["dist_max"]) / uniform, 1.0))
    (sv, lsv), (sc, lsc) = (median_ratio(x["z_sum"][b], x["fz_sum"][b]) for x in (vit, cnn))
    out["Fig 7 before: ViT median of mean ratios"] = _median_of_means(vit["ratio_sum"][b], vit["count"][b])
    out["Fig 7: ViT median skip ratio"], out["Fig 7: CNN median (control)"] = sv, sc
    out["Fig 7: ViT − CNN (learned difference)"] = _jack(sv.value - sc.value, lsv - lsc)
    loc = {k: leads.from_terms(x["loc_xy"][b], x["loc_xx"][b], x["loc_yy"][b], int(x["prefix"]))
           for k, x in per.items() if k in ("zoo:vit-cls", "zoo:resnet", "zoo:vit-gap")}
    out["Fig 9: ViT chance-corrected localization"] = loc["zoo:vit-cls"].corrected
    out["Fig 9: CNN (control)"] = loc["zoo:resnet"].corrected
    out["Fig 9: ViT − CNN (learned difference)"] = leads.interval_difference(loc["zoo:vit-cls"].corrected,
                                                                            loc["zoo:resnet"].corrected)
    out["Fig 9: ViT mean lead of its own position"] = loc["zoo:vit-cls"].lead
    out["Fig 9: CNN mean lead"] = loc["zoo:resnet"].lead
    if "zoo:vit-gap" in loc:
        out["Fig 10: GAP model (control)"] = loc["zoo:vit-gap"].corrected
        out["Fig 10: GAP mean lead"] = loc["zoo:vit-gap"].lead
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
        est = estimates(per, sub)
        for name, e in est.items():
            if name.startswith("_"):
                continue
            r = rows.setdefault(name, {"covered": 0, "below": 0, "above": 0, "none": 0, "n": 0, "width": 0.0,
                                       "value": 0.0})
            truth = population[name].value
            r["n"] += 1
            r["value"] += e.value
            if not (np.isfinite(e.lo) and np.isfinite(e.hi)):
                r["none"] += 1
                continue
            r["width"] += e.hi - e.lo
            lo, hi = min(e.lo, e.value), max(e.hi, e.value)
            r["covered"] += lo <= truth <= hi
            r["below"] += hi < truth
            r["above"] += lo > truth
    return rows


def full_batches(per: dict, batch_size: int) -> int:
    """How many leading batches of every model hold exactly ``batch_size`` images (a short last batch is left out)."""
    sizes = next(iter(per.values()))["sizes"]
    return int((sizes == batch_size).sum())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer partitions: 312 / 156 / 36 subsets")
    p.add_argument("--twins", action="store_true", help="also the untrained twins (the learned answers' twins)")
    p.add_argument("--extra", action="store_true", help="also zoo:vit-cls-noskip (Fig 8)")
    p.add_argument("--images", type=int, default=None, help="population: the first N of the permutation (all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--collect-only", action="store_true")
    p.add_argument("--model", help="run only this model's pass (e.g. several passes side by side), then stop")
    a = p.parse_args()
    specs = list(TRAINED) + (list(EXTRA) if a.extra else []) + (list(TWINS) if a.twins else [])
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
    table = {}
    for images, bs, parts in (QUICK if a.quick else DESIGNS):
        t = time.perf_counter()
        per = collect(specs, bs, a.images, seed=a.seed, progress=False)
        subsets = partitions(full_batches(per, bs), images // bs, parts, a.seed)
        cov = coverage(per, population, subsets)
        print(f"{images}/{bs}: {len(subsets)} subsets ({parts} partitions), {time.perf_counter() - t:.0f} s")
        for name, r in cov.items():
            k = r["n"] - r["none"]
            p = r["covered"] / max(k, 1)
            print(f"  {name:44s} {100 * p:5.1f} % ± {100 * np.sqrt(p * (1 - p) / max(k, 1)):.1f}  (below "
                  f"{r['below']}, above {r['above']}, no interval {r['none']}, mean width "
                  f"{r['width'] / max(k, 1):.3f}, mean estimate {r['value'] / r['n']:.4f} against "
                  f"{population[name].value:.4f})", flush=True)
            table.setdefault(name, {})[f"{images}/{bs}"] = f"{100 * p:.1f} %"
    cols = [f"{i}/{b}" for i, b, _ in (QUICK if a.quick else DESIGNS)]
    print("\n| check | " + " | ".join(cols) + " |\n|---|" + "---|" * len(cols))
    for name, row in table.items():
        print(f"| {name} | " + " | ".join(row.get(c, "") for c in cols) + " |")
    print(f"{time.perf_counter() - t0:.0f} s in all")


if __name__ == "__main__":
    main()
