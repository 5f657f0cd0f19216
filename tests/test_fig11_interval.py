"""Fig 11's interval: the draws' spread plus the pool's own variance (``vitlab.tour.measure.probes``).

The coverage on real activations is bench/coverage_real_rf.py's (docs/evidence.md): a pool costs 0.2-0.6 s there, so the
hundreds of pools that tell 90 % from 95 % do not fit a light test. Here the variance formula is checked where the
truth is known in closed form, a mean over overlapping draws from one pool, and the jackknife replicates against a
by-hand computation with the probes' own functions.
"""

from __future__ import annotations

import numpy as np
import pytest

from vitlab.errors import VitlabError
from vitlab.stats import evidence as ev
from vitlab.tour.measure import probes as fig11


def _overlapping_means(rng, pools: int, n: int, k: int, draws: int, groups: int):
    """Per simulated pool of ``n`` standard normal values: each of ``draws`` draws' mean over a random ``k`` of them
    (the draws share the pool, as Fig 11's share its images), and the (groups, draws) replicates of those means
    with each group of :func:`pool_groups` left out, as ``pool_jackknife`` leaves groups out of the test images."""
    g = fig11.pool_groups(n, groups, seed=0)
    out = []
    for _ in range(pools):
        pool = rng.normal(size=n)
        subsets = [rng.choice(n, size=k, replace=False) for _ in range(draws)]
        margins = np.array([pool[s].mean() for s in subsets])
        reps = np.array([[pool[s[g[s] != j]].mean() for s in subsets] for j in range(groups)])
        out.append((margins, reps))
    return out


def test_the_interval_carries_the_pools_own_variance_where_the_truth_is_known():
    # a draw's mean over k of the pool's n values: given the pool its mean is the pool's mean, so
    # Var(mean over D draws) = 1/n (the pool) + (1/k − 1/n)/D (the draws), in closed form
    n, k, draws, groups, pools = 60, 20, 5, 10, 2000
    truth = 1 / n + (1 / k - 1 / n) / draws
    sims = _overlapping_means(np.random.default_rng(0), pools, n, k, draws, groups)
    parts = np.array([fig11.margin_variance(m, r) for m, r in sims])
    assert (parts[:, 2] == draws - 1).all()  # the conservative df: min(D − 1, G − 1)
    # the draws' part is unbiased for (1/k − 1/n)/D, the pool's part for 1/n (Monte-Carlo se ~2 %)
    assert parts[:, 0].mean() == pytest.approx((1 / k - 1 / n) / draws, rel=0.06)
    assert parts[:, 1].mean() == pytest.approx(1 / n, rel=0.08)
    assert (parts[:, 0] + parts[:, 1]).mean() == pytest.approx(truth, rel=0.08)
    # coverage of the true mean, 0 (Monte-Carlo se 0.4 %): the new interval covers (97 %, its df conservative), the t
    # over the draws alone does not (79 %: it sees 29 % of the variance); the resolution is kept far below the widths
    new = [fig11.margin_estimate(m, r, test=10**6, draws=draws) for m, r in sims]
    old = [ev.mean_estimate(m, "draws", bounds=(-1.0, 1.0)) for m, _ in sims]
    cover = np.mean([e.lo <= 0 <= e.hi for e in new])
    assert 0.94 <= cover <= 0.99, cover
    assert np.mean([e.lo <= 0 <= e.hi for e in old]) < 0.85
    e = new[0]
    assert (e.unit, e.units, e.method) == ("draws", draws, "t")
    assert e.basis == (f"t over {draws} draws; with the pool's own variance from a jackknife over {groups} groups "
                       "of its images")
    half = ev.t_quantile(0.975, draws - 1) * np.sqrt(parts[0, 0] + parts[0, 1])
    assert (e.lo, e.hi) == pytest.approx((sims[0][0].mean() - half, sims[0][0].mean() + half))


def test_the_shared_part_is_the_mean_jackknife_covariance_of_different_draws_and_never_negative():
    rng = np.random.default_rng(3)
    margins, reps = rng.normal(size=4), rng.normal(size=(6, 4))
    within, shared, df = fig11.margin_variance(margins, reps)
    c = reps - reps.mean(0)
    pairs = [5 / 6 * (c[:, a] * c[:, b]).sum() for a in range(4) for b in range(4) if a != b]
    assert within == pytest.approx(margins.var(ddof=1) / 4)
    assert shared == pytest.approx(max(0.0, np.mean(pairs))) and df == 3
    # draws whose replicates move against each other: a negative covariance estimate is floored at 0
    anti = np.array([[1.0, -1.0, 1.0, -1.0], [-1.0, 1.0, -1.0, 1.0]] * 3)
    assert fig11.margin_variance(margins, anti)[1] == 0.0
    with pytest.raises(VitlabError, match="pool-jackknife replicates"):
        fig11.margin_variance(margins, reps[:, :3])
    few = fig11.margin_estimate(margins[:3], reps[:, :3], test=200, draws=3)
    assert few.too_few and not np.isfinite(few.lo)


def test_pool_groups_partition_the_pool_evenly():
    g = fig11.pool_groups(503, 10, seed=7)
    sizes = np.bincount(g)
    assert len(sizes) == 10 and sizes.min() == 50 and sizes.max() == 51
    assert (g == fig11.pool_groups(503, 10, seed=7)).all()
    with pytest.raises(VitlabError, match="between 2 and 5 groups"):
        fig11.pool_groups(5, 6, seed=0)


def test_pool_jackknife_leaves_each_group_out_of_every_draws_test_images_with_the_probes_fitted_once():
    from vitlab.analyses import probes

    rng = np.random.default_rng(4)
    classes, n, shots, test, draws, groups, seed = 3, 90, 3, 30, 3, 4, 11
    y = np.arange(n) % classes
    layers = ["a", "b"]
    centres = rng.normal(size=(classes, 6))
    x = {f"{rep}|{tap}": centres[y] * s + rng.normal(size=(n, 6))
         for rep, s in (("cls", 0.6), ("gap", 1.0)) for tap in layers}
    reps = fig11.pool_jackknife(x, y, layers, classes, draws, shots, test, seed, groups)
    margins = fig11.draw_margins(x, y, layers, classes, draws, shots, test, seed)[0]
    g = np.random.default_rng(seed).permutation(n) % groups
    for d in range(draws):
        train, val, tst = probes.draw_split(y, shots, test, seed + d)
        fitted = {}
        for key in ("cls|a", "cls|b", "gap|a"):
            p = probes.fit(x[key][train], y[train], classes)
            fitted[key] = (p, probes.select_l2(p, x[key][val], y[val])[0])

        def margin(ix, fitted=fitted):
            acc = {k: p.accuracy(x[k][ix], y[ix], l2) for k, (p, l2) in fitted.items()}
            return min(acc["gap|a"] - acc["cls|a"], acc["cls|b"] - acc["cls|a"])

        assert margins[d] == pytest.approx(margin(tst))  # the tour's margin, from the whole test split
        for j in range(groups):
            assert reps[j, d] == pytest.approx(margin(tst[g[tst] != j]))


def test_the_tours_curves_carry_the_pools_variance_as_the_probes_page():
    """Fig 11's curves: per block and representation, the mean accuracy over the draws with the t interval of
    ``margin_variance`` applied to accuracies and leave-a-group-out accuracies of probes fitted here by hand."""
    from scipy.stats import t as student

    from vitlab.analyses import probes

    rng = np.random.default_rng(5)
    classes, n, shots, test, draws, seed = 3, 120, 3, 40, 4, 11
    y = np.arange(n) % classes
    layers = ["a", "b"]
    centres = rng.normal(size=(classes, 6))
    x = {f"{rep}|{tap}": centres[y] * s + rng.normal(size=(n, 6))
         for rep, s in (("cls", 0.4), ("gap", 0.7)) for tap in layers}
    hits = fig11.draw_hits(x, y, layers, classes, draws, shots, test, seed)
    curves = fig11.probe_curves("m", layers, hits, y, draws, shots, test, seed)
    assert len(curves) == 4 and (curves["draws"] == draws).all()
    g = np.random.default_rng(seed).permutation(n) % fig11.POOL_GROUPS
    for _, row in curves.iterrows():
        key = f"{row['representation']}|{row['layer']}"
        accs, left_out = [], []
        for d in range(draws):
            train, val, tst = probes.draw_split(y, shots, test, seed + d)
            p = probes.fit(x[key][train], y[train], classes)
            l2 = probes.select_l2(p, x[key][val], y[val])[0]
            accs.append(p.accuracy(x[key][tst], y[tst], l2))
            left_out.append([p.accuracy(x[key][tst[g[tst] != j]], y[tst[g[tst] != j]], l2)
                             for j in range(fig11.POOL_GROUPS)])
        within, shared, df = fig11.margin_variance(np.array(accs), np.array(left_out).T)
        half = student.ppf(0.975, df) * np.sqrt(within + shared)
        assert row["accuracy"] == pytest.approx(np.mean(accs))
        assert half > 1 / (test * draws)  # not widened to one test image per draw
        assert (row["accuracy_lo"], row["accuracy_hi"]) == pytest.approx(
            (max(0.0, np.mean(accs) - half), min(1.0, np.mean(accs) + half)))


def test_the_tours_replicates_from_its_fitted_probes_equal_the_refitted_pool_jackknife():
    """The tour fits each draw's probes once (draw_hits) and forms the pool replicates from them; they equal
    pool_jackknife's, which fits the first and last block's probes again."""
    from vitlab.tour.measure.probes import draw_hits, margin_replicates, pool_jackknife

    rng = np.random.default_rng(4)
    classes, n, layers = 4, 160, ["b0", "b1", "b2"]
    y = np.repeat(np.arange(classes), n // classes)
    x = {f"{rep}|{tap}": rng.normal(size=(n, 6)) + 0.8 * (i + 1) * np.eye(classes, 6)[y]
         for rep in ("cls", "gap") for i, tap in enumerate(layers)}
    hits = draw_hits(x, y, layers, classes, 4, 3, 60, 2)
    np.testing.assert_array_equal(margin_replicates(hits, y, layers, 4, 3, 60, 2),
                                  pool_jackknife(x, y, layers, classes, 4, 3, 60, 2))
