"""How often Figs 6 and 11's 95 % intervals cover on real activations (issue 50): the checks with their own images.

    PYTHONPATH=$PWD nice python bench/coverage_real_rf.py            # the run in docs/evidence.md
    PYTHONPATH=$PWD nice python bench/coverage_real_rf.py --quick    # a few subsets per design

bench/coverage_real.py measures every check that reads the tour's images in batches; Fig 6 (receptive fields) reads
its own first ``rf_images`` images (a backward pass each, default 32) and resamples images, and Fig 11 (linear
probes) draws few-shot splits from its own probe pool (the first max(images, 500) images) and resamples draws. Their
population is again the 10,000 Fashion-MNIST test images, with ``zoo:vit-cls``, ``zoo:resnet`` and their untrained
twins, and their statistics are the tour's own functions (``growth_estimates``, ``draw_margins``,
``pool_jackknife``, ``margin_estimate``) on what the tour would have read:

- **Fig 6**: every image's |gradient| maps at the tour's points (``growth_points``), computed once with the tour's
  ``_field_maps`` (about 7 minutes for the four models on the shared machine) and kept in
  ``bench/_cache/coverage_real``. The population
  value is the statistic on the mean maps of all 10,000 images; a subset is a set of images (32, the tour's default,
  64 and 256; not 1,024, see RF_DESIGNS) from a seeded partition of the images, with the tour's 200-resample bootstrap over images.
- **Fig 11**: the probe features (CLS and mean token at the first and the last block) of all 10,000 images. The
  population value is the mean margin over 4,000 few-shot draws from all 10,000 images (its standard error is printed:
  it must be small against the intervals); a subset is a probe pool of 500 images (the tour's pool at 64 and at 256
  images) or 1,024 (at 1,024), with the tour's 5 draws of 10 shots per class and 200 test images and its interval
  (``pool_jackknife``, ``margin_estimate``); the rows "Fig 11 before: ..." are the interval it replaced, the t over
  the 5 draws alone, on the same pools. Only the first and the last block are probed: the margin reads no other (the
  tour probes all six for its curves).

Subsets of one partition are disjoint; several partitions give more subsets that overlap, so the binomial
Monte-Carlo error printed is a lower bound.
"""

from __future__ import annotations

import argparse
import os
import time

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):  # before numpy: one BLAS thread (the
    os.environ.setdefault(_v, "1")  # probes' small eighs, coverage_real.py)

import numpy as np
from coverage_real import CACHE, DATA, report, tally

VERSION = 1
MODELS = (("zoo:vit-cls", "zoo:resnet"), ("zoo:vit-cls@random:0", "zoo:resnet@random:0"))  # (ViT, CNN), twins
# images, partitions of the 10,000 images. Not 1,024: the tour's bootstrap gathers (200, n, 28, 28) float64 maps, 1.3 GB
# a call at 1,024 images (the tour's default is 32)
RF_DESIGNS = ((32, 1), (64, 1), (256, 1))  # ~1 s a subset of 32 on the shared machine (radius_fraction's loop)
RF_QUICK = ((32, 1),)
PROBE_DESIGNS = ((500, 40), (1024, 40))  # probe pool, partitions; ~0.2 s a subset (5 draws of 4 probes, 2 models)
PROBE_QUICK = ((500, 1),)
POPULATION_DRAWS = 4000
PROBE_ROWS = ("Fig 11: probe margin", "Fig 11: untrained twin's margin (learned: untrained twins)")


def _cached(name: str, make):
    path = CACHE / f"{name.replace(':', '_').replace('@', '_')}_v{VERSION}.npz"
    if path.exists():
        with np.load(path, allow_pickle=False) as f:
            return {k: f[k] for k in f.files}
    out = make()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, **out)
    tmp.replace(path)
    return out


def field_maps(images: int | None) -> dict[str, dict[str, np.ndarray]]:
    """Per model of :data:`MODELS`: its maps 'before' and 'after' (n, H, W) of the first ``images`` images, by the
    tour's ``_field_maps`` at the tour's points."""
    import torch

    import vitlab
    import vitlab.tour.checks as T
    from vitlab.engine.context import Run
    from vitlab.inputs.cache import Store
    from vitlab.tour.measure.receptive import _field_maps, growth_points

    torch.set_num_threads(1)
    out = {}
    for vit_spec, cnn_spec in MODELS:
        def make(spec, k, pair=(vit_spec, cnn_spec)):
            t = time.perf_counter()
            source = vitlab.open_source(DATA)
            vit, cnn = (vitlab.load(s, "cpu") for s in pair)
            points = growth_points(vit, cnn)[k]
            maps = _field_maps(vit if k == 0 else cnn, points, source, T.TourOptions(rf_images=images),
                               Run(store=Store(None), workers=0))
            print(f"  {spec}: {len(maps[0])} images' field maps, {time.perf_counter() - t:.0f} s", flush=True)
            return {"before": maps[0].astype(np.float32), "after": maps[1].astype(np.float32)}

        for k, spec in enumerate((vit_spec, cnn_spec)):
            out[spec] = _cached(f"fields_{spec}_{images}", lambda spec=spec, k=k: make(spec, k))
    return out


def growth_rows(maps: dict, idx: np.ndarray | None) -> dict[str, object]:
    """Fig 6's intervals on the images ``idx`` by the tour's ``growth_estimates``; on all images (None) only their
    values count (one resample: the tour's 200 would gather 200 copies of the 10,000 images' maps)."""
    from vitlab.tour.checks import TOUR_BOOTSTRAP, TOUR_SEED
    from vitlab.tour.measure.receptive import growth_estimates

    out = {}
    for (vit, cnn), twin in zip(MODELS, (False, True)):
        pick = (lambda a: a) if idx is None else (lambda a: a[idx])
        v, c = ([pick(maps[s]["before"]), pick(maps[s]["after"])] for s in (vit, cnn))
        vg, _, _, cg, _, _, effect = growth_estimates(v, c, 1 if idx is None else TOUR_BOOTSTRAP, TOUR_SEED)
        if twin:
            out["Fig 6: untrained twins' ViT − CNN growth (learned: untrained twins)"] = effect
        else:
            out["Fig 6: ViT growth over its attention sublayer"] = vg
            out["Fig 6: CNN first block's growth (control)"] = cg
            out["Fig 6: ViT − CNN growth (learned difference)"] = effect
    return out


def probe_features(images: int | None) -> dict[str, dict[str, np.ndarray]]:
    """Per ViT of :data:`MODELS`: the tour's probe features (``_probe_stat``) of the first and the last block and the
    labels, of the first ``images`` images."""
    import torch

    import vitlab
    from vitlab.engine.context import Run
    from vitlab.engine.run import stream
    from vitlab.inputs.cache import Store
    from vitlab.inputs.data import select
    from vitlab.tour.measure.probes import _probe_stat

    torch.set_num_threads(1)
    out = {}
    for vit_spec, _ in MODELS:
        def make(spec=vit_spec):
            t = time.perf_counter()
            source = vitlab.open_source(DATA)
            m = vitlab.load(spec, "cpu")
            stat = _probe_stat(m)
            keys = [f"{rep}|{tap}" for rep in ("cls", "gap") for tap in (stat.layers[0], stat.layers[-1])]
            feats: dict[str, list] = {k: [] for k in keys}
            labels: list = []
            for batch, f in stream([m], source, select(source, images, None), 32, [[stat]],
                                   Run(store=Store(None), workers=0)):
                for k in keys:
                    feats[k].append(f[0][stat.name][k])
                labels += list(batch.labels)
            print(f"  {spec}: {len(labels)} images' probe features, {time.perf_counter() - t:.0f} s", flush=True)
            return {**{k: np.concatenate(v) for k, v in feats.items()}, "labels": np.array(labels),
                    "layers": np.array([stat.layers[0], stat.layers[-1]]), "classes": np.array(len(source.classes))}

        out[vit_spec] = _cached(f"probes_{vit_spec}_{images}", make)
    return out


def margin_rows(feats: dict, pool: np.ndarray | None, draws: int | None = None, before: bool = False
                ) -> tuple[dict[str, object], dict]:
    """Fig 11's margin estimate on the probe pool ``pool`` (all: None) with ``draws`` draws (the tour's: None), by
    the tour's ``draw_margins``, ``pool_jackknife`` and ``margin_estimate`` (the tour's shots, test images and
    seed); and the margins. On all images only the value counts (no jackknife). ``before``: also the interval the
    tour used before, the t interval over the draws ("Fig 11 before: ..."), for its coverage and width."""
    import vitlab.tour.checks as T
    from vitlab.stats import evidence as ev
    from vitlab.tour.measure.probes import draw_margins, margin_estimate, pool_jackknife

    o = T.TourOptions()
    draws = o.probe_draws if draws is None else draws
    out, kept = {}, {}
    for (vit, _), name in zip(MODELS, PROBE_ROWS):
        f = feats[vit]
        ix = slice(None) if pool is None else pool
        x, y, layers = {k: f[k][ix] for k in f if "|" in k}, f["labels"][ix], list(f["layers"])
        margins, _, _ = draw_margins(x, y, layers, int(f["classes"]), draws, o.probe_shots, o.probe_test,
                                     T.TOUR_SEED)
        kept[name] = margins
        if pool is None:
            out[name] = ev.Estimate.exact(float(np.mean(margins)))
            continue
        reps = pool_jackknife(x, y, layers, int(f["classes"]), draws, o.probe_shots, o.probe_test, T.TOUR_SEED)
        out[name] = margin_estimate(margins, reps, o.probe_test, draws)
        if before:
            out[name.replace("Fig 11:", "Fig 11 before:")] = ev.mean_estimate(
                margins, "draws", bounds=(-1.0, 1.0), resolution=1.0 / (o.probe_test * draws))
    return out, kept


def partition(n: int, size: int, count: int, seed: int = 0) -> list[np.ndarray]:
    """``count`` seeded permutations of ``n`` units, each cut into disjoint subsets of ``size`` (sorted)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        perm = rng.permutation(n)
        out += [np.sort(perm[k * size:(k + 1) * size]) for k in range(n // size)]
    return out


def main() -> None:
    from coverage_real import print_table

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="one partition per design")
    p.add_argument("--images", type=int, default=None, help="population: the first N test images (all)")
    p.add_argument("--only", choices=("fields", "probes"), help="one of the two checks")
    a = p.parse_args()
    t0 = time.perf_counter()
    table, counts = {}, {}
    if a.only != "probes":
        maps = field_maps(a.images)
        n = len(next(iter(maps.values()))["before"])
        population = growth_rows(maps, None)
        print(f"Fig 6 population: {n} images; " + "; ".join(f"{k} {e.value:.4f}" for k, e in population.items()))
        for images, parts in (RF_QUICK if a.quick else RF_DESIGNS):
            t, rows = time.perf_counter(), {}
            subsets = partition(n, images, parts)
            for sub in subsets:
                for name, e in growth_rows(maps, sub).items():
                    tally(rows, name, e, population[name].value)
            print(f"Fig 6, {images} images: {len(subsets)} subsets ({parts} partitions), "
                  f"{time.perf_counter() - t:.0f} s")
            report(f"Fig 6: {images} images", rows, population, table)
            counts[f"Fig 6: {images} images"] = len(subsets)
    if a.only != "fields":
        feats = probe_features(a.images)
        n = len(next(iter(feats.values()))["labels"])
        t = time.perf_counter()
        population, margins = margin_rows(feats, None, POPULATION_DRAWS)
        print(f"Fig 11 population: {POPULATION_DRAWS} draws from {n} images ({time.perf_counter() - t:.0f} s); "
              + "; ".join(f"{k} {e.value:.4f} (standard error {margins[k].std(ddof=1) / np.sqrt(len(margins[k])):.4f}"
                          f", one draw's sd {margins[k].std(ddof=1):.4f})" for k, e in population.items()))
        population.update({k.replace("Fig 11:", "Fig 11 before:"): e for k, e in list(population.items())})
        for pool, parts in (PROBE_QUICK if a.quick else PROBE_DESIGNS):
            t, rows = time.perf_counter(), {}
            subsets = partition(n, pool, parts)
            for sub in subsets:
                for name, e in margin_rows(feats, sub, before=True)[0].items():
                    tally(rows, name, e, population[name].value)
            print(f"Fig 11, pools of {pool}: {len(subsets)} subsets ({parts} partitions), "
                  f"{time.perf_counter() - t:.0f} s")
            report(f"Fig 11: pools of {pool}", rows, population, table)
            counts[f"Fig 11: pools of {pool}"] = len(subsets)
    print_table(table, counts)
    print(f"{time.perf_counter() - t0:.0f} s in all")


if __name__ == "__main__":
    main()
