"""Few-shot least-squares probes against numpy.linalg.lstsq; splits; representations; an end-to-end check."""

from __future__ import annotations

import collections

import numpy as np
import pytest
import torch

import vitlab
from vitlab import VitlabError, probes, taps
from vitlab.inputs.data import decode, plan_batches, to_tensor


def lstsq_weights(x, y, classes, l2):
    """Independent reference: standardise + bias column as big_vision, then ridge as an augmented lstsq."""
    x = np.asarray(x, dtype=np.float64)
    xd = (x - x.mean(0)) / (x.std(0) + 1e-5)
    xd = np.hstack([xd, np.full((len(x), 1), 100.0)])
    t = 2.0 * np.eye(classes)[y] - 1.0
    a = np.vstack([xd, np.sqrt(l2) * np.eye(xd.shape[1])])
    b = np.vstack([t, np.zeros((xd.shape[1], classes))])
    return np.linalg.lstsq(a, b, rcond=None)[0]


def manual_probe(tr, ytr, va, yva, te, yte, classes=10):
    """(validation accuracy, λ, test accuracy, test hits): λ on the grid by validation accuracy (ties: the larger),
    lstsq; the hits say per test image whether it was classified right."""
    best = None
    for l2 in probes.L2_GRID:
        w = lstsq_weights(tr, ytr, classes, l2)

        def hits(x, y, w=w):
            xd = np.hstack([(x - tr.mean(0)) / (tr.std(0) + 1e-5), np.full((len(x), 1), 100.0)])
            return (xd @ w).argmax(1) == y
        v = hits(va, yva).mean()
        if best is None or v >= best[0]:
            h = hits(te, yte)
            best = (v, l2, h.mean(), h)
    return best


@pytest.mark.parametrize("n,d", [(40, 6), (12, 50)])  # primal (N >= D) and dual (N < D) forms
def test_weights_match_lstsq(n, d):
    rng = np.random.default_rng(n)
    x, y = rng.normal(size=(n, d)) * 3 + 5, rng.integers(0, 4, n)
    probe = probes.fit(x, y, 4)
    for l2 in (2.0**-6, 1.0, 2.0**8):
        np.testing.assert_allclose(probe.weights(l2), lstsq_weights(x, y, 4, l2), rtol=1e-6, atol=1e-9)


def test_l2_selection_and_accuracy():
    rng = np.random.default_rng(1)
    centres = rng.normal(size=(3, 8)) * 4
    y = np.repeat(np.arange(3), 10)
    x = centres[y] + rng.normal(size=(30, 8))
    probe = probes.fit(x, y, 3)
    assert probe.accuracy(x, y, 1.0) == 1.0  # separable training data
    # identical validation accuracy for every λ: the tie goes to the largest λ
    l2, acc = probes.select_l2(probe, x[:1], y[:1], grid=(0.5, 1.0, 2.0))
    assert l2 == 2.0 and acc == 1.0


def test_split(fmnist_source):
    s = probes.few_shot_split(fmnist_source, shots=3, val_shots=2, test=50, seed=4)
    assert len(s.train) == 30 and len(s.val) == 20 and len(s.test) == 50 and s.classes == 10
    assert not (set(s.train) & set(s.val)) and not (set(s.test) & (set(s.train) | set(s.val)))
    counts = np.bincount([fmnist_source.label(i) for i in s.train], minlength=10)
    assert (counts == 3).all()
    assert probes.few_shot_split(fmnist_source, 3, 2, 50, seed=4) == s
    with pytest.raises(VitlabError, match="no labels"):
        probes.few_shot_split(vitlab.open_source("samples"))
    with pytest.raises(VitlabError, match="too few"):
        probes.few_shot_split(fmnist_source, shots=5000)


def test_representations(tiny_vit, tiny_resnet):
    x = torch.arange(2 * 101 * 3, dtype=torch.float32).reshape(2, 101, 3)
    m = tiny_vit.model
    assert probes.representations(m) == ["cls", "gap", "gap_cls", "first", "token"]
    assert probes.representations(tiny_resnet.model) == ["gap", "token"]
    assert torch.equal(probes.represent(x, m, "cls", 4), x[:, 0])
    assert torch.equal(probes.represent(x, m, "gap", 4), x[:, 1:].mean(1))
    assert torch.equal(probes.represent(x, m, "gap_cls", 4), x.mean(1))
    assert torch.equal(probes.represent(x, m, "token", 4), x[:, [1, 34, 67, 100]])
    assert probes.token_sample(5, 8) == [0, 1, 2, 3, 4]


def test_end_to_end_against_manual(tiny_vit, fmnist_source, store):
    layers = ["blocks.1.resid_post", "blocks.5.resid_post"]
    opts = probes.ProbeOptions(shots=2, val_shots=2, test=24, seed=0, layers=tuple(layers),
                               reps=("cls", "gap", "token"), tokens=2, batch_size=32, draws=1)
    rep = probes.probes([tiny_vit], fmnist_source, opts, vitlab.Run(store=store))
    frame = rep.to_frame()
    assert len(frame) == 6 and frame["accuracy"].between(0, 1).all() and set(frame["tokens"]) == {1, 2}
    assert frame["accuracy_lo"].isna().all() and (frame["draws"] == 1).all()  # one draw: no interval
    split = rep.split
    feats, labels = {}, {}
    for part in ("train", "val", "test"):
        idx = getattr(split, part)
        batch = decode(fmnist_source, plan_batches(fmnist_source, idx, len(idx))[0])
        with taps.capture(tiny_vit.model, layers) as acts, torch.no_grad():
            tiny_vit.model(to_tensor(batch.images, tiny_vit))
        feats[part] = {t: acts[t].double().numpy() for t in layers}
        labels[part] = np.array(batch.labels)
    for tap in layers:
        get = {"cls": lambda a: a[:, 0], "gap": lambda a: a[:, 1:].mean(1)}
        for name, fn in get.items():
            best = manual_probe(*(v for p in ("train", "val", "test") for v in (fn(feats[p][tap]), labels[p])))
            row = frame[(frame["layer"] == tap) & (frame["representation"] == name)].iloc[0]
            assert row["val_accuracy"] == pytest.approx(best[0]) and row["accuracy"] == pytest.approx(best[2])
    counts = collections.Counter(labels["test"].tolist())  # chance: the most common test class's share
    assert frame["chance"].eq(max(counts.values()) / len(labels["test"])).all()
    assert frame["above_chance"].isna().all()  # one draw: no interval, no verdict
    again = probes.probes([tiny_vit], fmnist_source, opts, vitlab.Run(store=store))
    assert again.info.batches_computed == 0
    with pytest.raises(VitlabError, match="no representation"):
        probes.probe_model(tiny_vit, fmnist_source, split, reps=["nope"])


def test_draws_give_the_tours_pool_aware_interval_of_the_mean(tiny_vit, fmnist_source, store):
    """Draw 0 is the seeded split, draws 1.. re-draw its images (a plain stratified draw here); the accuracy is the
    mean over draws and its interval the tour's Fig 11 computation (``margin_variance``: the draws' spread plus the
    pool's own variance) applied to per-draw accuracies and leave-a-group-out accuracies formed here by hand."""
    import pandas as pd
    from scipy.stats import t as student

    from vitlab.charts.probes import probe_lines
    from vitlab.tour.measure import probes as fig11

    tap = "blocks.3.resid_post"
    opts = probes.ProbeOptions(shots=2, val_shots=2, test=30, seed=5, layers=(tap,), reps=("gap",), batch_size=64,
                               draws=4)
    rep = probes.probes([tiny_vit], fmnist_source, opts, vitlab.Run(store=store, bootstrap=300, seed=7))
    row = rep.to_frame().iloc[0]
    split = rep.split
    pool_idx = list(split.train) + list(split.val) + list(split.test)
    batch = decode(fmnist_source, plan_batches(fmnist_source, pool_idx, len(pool_idx))[0])
    with taps.capture(tiny_vit.model, [tap]) as acts, torch.no_grad():
        tiny_vit.model(to_tensor(batch.images, tiny_vit))
    x, y = acts[tap][:, 1:].double().mean(1).numpy(), np.array(batch.labels)
    n_tr, n_va = len(split.train), len(split.val)
    draws = [(np.arange(n_tr), np.arange(n_tr, n_tr + n_va), np.arange(n_tr + n_va, len(y)))]
    for d in (1, 2, 3):
        order = np.random.default_rng(5 + d).permutation(len(y))
        rank = np.array([(y[order[:k]] == y[i]).sum() for k, i in enumerate(order)])
        draws.append((order[rank < 2], order[(rank >= 2) & (rank < 4)], order[rank >= 4][:30]))
    hits = [manual_probe(x[a], y[a], x[b], y[b], x[c], y[c])[3] for a, b, c in draws]
    accs = np.array([h.mean() for h in hits])
    assert row["accuracy"] == pytest.approx(accs.mean()) and row["draws"] == 4
    # the pool's 10 groups (a seeded permutation of its 70 images modulo 10), each left out of every draw's test images
    group = np.random.default_rng(5).permutation(len(y)) % 10
    left_out = np.array([[h[group[c] != j].mean() for (_, _, c), h in zip(draws, hits)] for j in range(10)])
    within, shared, df = fig11.margin_variance(accs, left_out)
    half = student.ppf(0.975, df) * np.sqrt(within + shared)
    assert df == 3 and half > 1 / 120  # wider than one test image per draw: not widened
    assert row["accuracy_lo"] == pytest.approx(max(0.0, accs.mean() - half))
    assert row["accuracy_hi"] == pytest.approx(min(1.0, accs.mean() + half))
    assert (row["interval_unit"], row["interval_units"], row["interval_method"]) == (
        "draws", 4, "t with the pool's own variance from a jackknife over 10 groups of its images")
    assert rep.interval_caption() == ("bars: 95 % t over 4 few-shot draws with the pool's own variance from a "
                                      "jackknife over 10 groups of its images")
    shares = [max(collections.Counter(y[c].tolist()).values()) / len(c) for _, _, c in draws]
    assert row["chance"] == pytest.approx(np.mean(shares))
    lo, hi, chance = row["accuracy_lo"], row["accuracy_hi"], row["chance"]
    assert row["above_chance"] == ("yes" if lo > chance else "no" if hi <= chance else "can't tell")
    spec = probe_lines(pd.DataFrame([row])).to_dict()
    rules = [layer for layer in spec["layer"] if layer["encoding"].get("y", {}).get("field") == "chance"]
    assert rules and spec["datasets"][rules[0]["data"]["name"]] == [
        {"chance": row["chance"], "label": f"chance {row['chance']:.2f}"}]
    fields = {e.get("field") for layer in spec["layer"] for e in layer["encoding"].values() if isinstance(e, dict)}
    tips = {t.get("field") for t in spec["layer"][0]["encoding"]["tooltip"]}
    assert {"accuracy_lo", "accuracy_hi"} <= fields and {"accuracy_lo", "accuracy_hi"} <= tips
    with pytest.raises(VitlabError, match="draws"):
        probes.probes([tiny_vit], fmnist_source, probes.ProbeOptions(draws=0, layers=(tap,)), vitlab.Run(store=store))


def test_a_short_last_batch_is_kept(tiny_vit, fmnist_source, store):
    """10 training images in batches of 8: the last batch of 2 counts (features are per image, no HSIC), so every
    class keeps its shots and the re-draws find them."""
    opts = probes.ProbeOptions(shots=1, val_shots=1, test=22, layers=("blocks.0.resid_post",), reps=("gap",),
                               batch_size=8, draws=2)
    rep = probes.probes([tiny_vit], fmnist_source, opts, vitlab.Run(store=store))
    assert rep.results[0].images == {"train": 10, "val": 10, "test": 22}


def test_chance_level_and_its_verdict():
    assert probes.majority_rate(np.array([0, 1, 2, 3])) == 0.25  # balanced: 1 / classes
    assert probes.majority_rate(np.array([4, 4, 4, 1])) == 0.75  # one class dominates: always answering it
    assert probes.above_chance(0.3, 0.5, 0.25) == "yes"
    assert probes.above_chance(0.2, 0.25, 0.25) == "no"
    assert probes.above_chance(0.2, 0.3, 0.25) == "can't tell"
    assert probes.above_chance(np.nan, np.nan, 0.25) is None


def test_cli_and_chart(tmp_path):
    from vitlab.charts.probes import probe_lines
    from vitlab.cli import main

    out = tmp_path / "probe"
    assert main(["probe", "-m", "test_vit@random", "--shots", "1", "--test", "8", "--layers", "blocks.5.resid_post",
                 "--reps", "gap,first", "-o", str(out), "--no-cache"]) == 0
    for name in ("probe.csv", "probe_accuracy.png", "probe_accuracy.svg", "run.json"):
        assert (out / name).is_file(), name
    import pandas as pd

    frame = pd.read_csv(out / "probe.csv")
    assert set(frame["representation"]) == {"gap", "first"}
    assert probe_lines(frame).to_dict()["layer"][0]["mark"]["type"] == "line"
    assert main(["probe", "-m", "test_vit@random", "--data", "samples", "-o", str(out)]) == 2


def test_the_pool_term_widens_the_t_over_the_draws_exactly_and_is_zero_when_groups_agree():
    """``accuracy_estimate``: half-width² / t² = s²/D + C, C the mean jackknife covariance over the pool's groups of
    two different draws' accuracies (here by explicit loops); with C = 0 it is the t interval over the draws."""
    from vitlab.stats import evidence as ev

    rng = np.random.default_rng(2)
    n, k, draws, groups = 200, 80, 5, 10
    easy = rng.random(n) < 0.5  # an image's hit depends on the image: draws testing on shared images covary
    group = np.random.default_rng(9).permutation(n) % groups
    tests = [rng.choice(n, size=k, replace=False) for _ in range(draws)]
    hits = [(easy[t] ^ (rng.random(k) < 0.2)).astype(float) for t in tests]
    e = probes.accuracy_estimate(hits, [group[t] for t in tests], groups)
    old = ev.mean_estimate(np.array([h.mean() for h in hits]), "draws")
    reps = np.array([[h[group[t] != j].mean() for t, h in zip(tests, hits)] for j in range(groups)])
    c = reps - reps.mean(0)
    pairs = [(groups - 1) / groups * sum(c[j, a] * c[j, b] for j in range(groups))
             for a in range(draws) for b in range(draws) if a != b]
    assert np.mean(pairs) > 0
    q = ev.t_quantile(0.975, draws - 1)  # df min(D − 1, G − 1) = D − 1: the old interval's quantile
    assert e.value == old.value and 0 < e.lo < e.hi < 1
    assert ((e.hi - e.value) / q) ** 2 == pytest.approx(((old.hi - old.value) / q) ** 2 + np.mean(pairs), rel=1e-12)
    assert e.basis == f"t over {draws} draws; with the pool's own variance from a jackknife over {groups} groups of its images"
    # every group holds the same share of each draw's hits: leaving one out changes no accuracy, C = 0
    flat = [np.tile([1.0, 0.0, 1.0, 1.0], 10) if d % 2 else np.tile([1.0, 0.0, 0.0, 1.0], 10) for d in range(draws)]
    by = [np.repeat(np.arange(groups), 4) for _ in range(draws)]
    same = probes.accuracy_estimate(flat, by, groups)
    plain = ev.mean_estimate(np.array([h.mean() for h in flat]), "draws")
    assert (same.lo, same.hi) == pytest.approx((plain.lo, plain.hi), rel=1e-12)
