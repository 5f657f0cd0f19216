"""The logit lens (issue 41): every block's readout against a float64 computation from the model's own modules, the
last block equal to the model's logits on the zoo, accuracy and agreement against a direct count, the interval
against a hand-written jackknife, the accumulator contract, the CLI's CSV, and the page."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import vitlab
from vitlab.analyses import logit_lens as L
from vitlab.inputs import taps as taps_mod
from vitlab.inputs.cache import pack, unpack
from vitlab.inputs.data import iter_images, to_tensor

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "app"))  # `import lab` (the app_cache fixture, the page)
FOUR = ("vit-cls", "vit-gap-14", "mixer", "resnet")
ZOO_READY = all((ROOT / "assets" / "zoo" / f"{n}.safetensors").is_file() for n in FOUR + ("vit-gap",))
zoo = pytest.mark.skipif(not ZOO_READY, reason="needs the zoo's checkpoints")


@pytest.fixture(scope="module")
def zoo_models():
    return {n: vitlab.load(f"zoo:{n}", "cpu") for n in FOUR + ("vit-gap",)}


def _batch(loaded, source, n: int = 12):
    return to_tensor([img for _, img in iter_images(source, list(range(n)))], loaded)


def _acts(loaded, x):
    taps = L.block_taps(loaded.model)
    with taps_mod.capture(loaded.model, taps) as acts, torch.inference_mode():
        logits = loaded.model(x)
    return [acts[t] for t in taps], logits


def _layer_norm64(mod, x):
    """A LayerNorm over the last axis in float64 from the module's weight, bias and eps (Identity: unchanged)."""
    if isinstance(mod, torch.nn.Identity):
        return x
    w, b = mod.weight.detach().double().numpy(), mod.bias.detach().double().numpy()
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + mod.eps) * w + b


def reference_readout(model, x) -> np.ndarray | None:
    """float64 logits of one block's output read by the model's final norm, pooling, fc_norm and head, written from
    the modules' weights; None where the head does not take the block's width."""
    fam = taps_mod.family(model)
    x = x.detach().double().numpy()
    head = model.head if fam != "resnet" else model.fc
    w, b = head.weight.detach().double().numpy(), head.bias.detach().double().numpy()
    if fam == "resnet":
        if x.shape[1] != w.shape[1]:
            return None
        return x.mean(axis=(2, 3)) @ w.T + b
    x = _layer_norm64(model.norm, x)
    if fam == "vit" and model.global_pool == "token":
        pooled = x[:, 0]
    else:  # a GAP ViT's spatial tokens, or a Mixer's tokens (no prefix)
        pooled = x[:, taps_mod.num_prefix_tokens(model):].mean(1)
    if fam == "vit":
        pooled = _layer_norm64(model.fc_norm, pooled)
    return pooled @ w.T + b


@zoo
@pytest.mark.parametrize("name", FOUR + ("vit-gap",))
def test_every_block_readout_matches_a_float64_computation_from_the_modules(name, zoo_models, fmnist_source):
    loaded = zoo_models[name]
    blocks, _ = _acts(loaded, _batch(loaded, fmnist_source))
    readable = 0
    for tap, x in zip(L.block_taps(loaded.model), blocks):
        ref = reference_readout(loaded.model, x)
        if ref is None:
            with pytest.raises(vitlab.VitlabError, match="has no readout: the head of ResNet takes 128"):
                L.readout(loaded.model, x)
            continue
        with torch.inference_mode():
            got = L.readout(loaded.model, x).double().numpy()
        readable += 1
        assert np.max(np.abs(got - ref)) <= 1e-4 * max(1.0, np.max(np.abs(ref))), tap
    assert readable == (2 if name == "resnet" else len(blocks))


@zoo
@pytest.mark.parametrize("name", FOUR)
def test_the_last_block_readout_is_the_models_logits(name, zoo_models, fmnist_source, store):
    loaded = zoo_models[name]
    blocks, logits = _acts(loaded, _batch(loaded, fmnist_source))
    with torch.inference_mode():
        last = L.readout(loaded.model, blocks[-1])
    assert torch.max(torch.abs(last - logits)).item() <= 1e-5
    rep = L.logit_lens([loaded], fmnist_source, L.LensOptions(images=24, batch_size=8), vitlab.Run(store=store))
    assert rep.exactness()[loaded.label] <= 1e-5 and not rep.warnings
    frame = rep.to_frame()
    assert frame["agreement"].iloc[-1] == 1.0  # the last block agrees with the model on every image


def _direct(loaded, source, n: int, batch: int):
    """Per batch (T, L) correct and agreeing readouts, counted from captured blocks, and the labels."""
    correct, agree = [], []
    for start in range(0, n, batch):
        idx = list(range(start, min(n, start + batch)))
        x = to_tensor([img for _, img in iter_images(source, idx)], loaded)
        blocks, logits = _acts(loaded, x)
        y = np.array([source.label(i) for i in idx])
        final = logits.argmax(-1).numpy()
        c, a = [], []
        for xb in blocks:
            ref = reference_readout(loaded.model, xb)
            pred = np.full(len(idx), -1) if ref is None else ref.argmax(-1)
            c.append(np.sum(pred == y))
            a.append(np.sum(pred == final))
        correct.append(c)
        agree.append(a)
    return np.array(correct, dtype=float), np.array(agree, dtype=float)


def _jackknife_logit(counts: np.ndarray, n: np.ndarray) -> tuple[float, float]:
    """The 95 % jackknife-t interval of Σcounts/Σn over batches on the logit scale, written out."""
    from scipy.stats import t

    T = len(n)
    loo = np.array([(counts.sum() - counts[k]) / (n.sum() - n[k]) for k in range(T)])
    value = counts.sum() / n.sum()
    z, zl = np.log(value / (1 - value)), np.log(loo / (1 - loo))
    se = np.sqrt((T - 1) / T * np.sum((zl - zl.mean()) ** 2))
    half = t.ppf(0.975, T - 1) * se
    return 1 / (1 + np.exp(-(z - half))), 1 / (1 + np.exp(-(z + half)))


@zoo
def test_accuracy_agreement_and_intervals_against_a_direct_count(zoo_models, fmnist_source, store):
    models = [zoo_models["vit-cls"], zoo_models["resnet"]]
    rep = L.logit_lens(models, fmnist_source, L.LensOptions(images=40, batch_size=8), vitlab.Run(store=store))
    frame = rep.to_frame()
    n, checked = np.full(5, 8.0), 0
    for loaded in models:
        correct, agree = _direct(loaded, fmnist_source, 40, 8)
        part = frame[frame["model"] == loaded.label].reset_index(drop=True)
        for i in range(correct.shape[1]):
            row = part.iloc[i]
            if not row["readout"]:
                assert np.isnan(row["accuracy"]) and np.isnan(row["agreement"])
                assert "the head takes 128" in row["reason"]
                continue
            assert row["accuracy"] == pytest.approx(correct[:, i].sum() / 40, abs=1e-12)
            assert row["agreement"] == pytest.approx(agree[:, i].sum() / 40, abs=1e-12)
            loo = (correct[:, i].sum() - correct[:, i]) / 32
            if np.all((loo > 0) & (loo < 1)) and 0 < row["accuracy"] < 1:  # the logit scale
                lo, hi = _jackknife_logit(correct[:, i], n)
                assert (row["accuracy_lo"], row["accuracy_hi"]) == pytest.approx((lo, hi), abs=1e-12)
                assert row["accuracy_scale"] == "logit"
                checked += 1
            else:  # on a bound the logit is infinite: the rate's own t interval, clipped to [0, 1]
                from scipy.stats import t

                half = t.ppf(0.975, 4) * np.sqrt(4 / 5 * ((loo - loo.mean()) ** 2).sum())
                raw = row["accuracy"] - half, row["accuracy"] + half
                assert row["accuracy_scale"] == "rate"
                assert (row["accuracy_lo"], row["accuracy_hi"]) == pytest.approx(tuple(np.clip(raw, 0, 1)), abs=1e-12)
        # the last block's readout is the model's own prediction: agreement 1 in every batch, no logit, the rate's
        # own interval [1, 1], said as such
        last = part.iloc[-1]
        assert (last["agreement"], last["agreement_lo"], last["agreement_hi"], last["agreement_scale"]) == \
            (1.0, 1.0, 1.0, "rate")
        assert part["interval_units"].eq(5).all()
        assert part["interval_method"].eq("jackknife t on the logit scale of [0, 1]; where the rate or a "
                                          "leave-one-batch-out rate is 0 or 1, the t interval of the rate itself, "
                                          "clipped to [0, 1]").all()
    assert checked >= 6  # the interval was checked by hand on most blocks
    assert rep.results[0].reasons() == [""] * 6
    assert [bool(w) for w in rep.results[1].reasons()] == [True] * 6 + [False] * 2


@zoo
def test_below_four_batches_there_is_no_interval_and_no_direction(zoo_models, fmnist_source, store):
    rep = L.logit_lens([zoo_models["vit-cls"]], fmnist_source, L.LensOptions(images=24, batch_size=8),
                       vitlab.Run(store=store))
    frame = rep.to_frame()
    assert frame["accuracy_lo"].isna().all() and frame["interval_method"].str.startswith("too few batches").all()
    first, words = rep.results[0].first_above_chance()
    assert first is None and "no interval (3 < 4 batches)" in words
    assert "no interval: too few batches for one (3 < 4)" in rep.finding().ours
    assert "nan" not in rep.finding().ours.lower()


def test_unlabelled_images_and_a_head_of_other_classes_give_agreement_only(tiny_vit, fmnist_source, store):
    samples = vitlab.open_source("samples")
    rep = L.logit_lens([tiny_vit], samples, L.LensOptions(images=8, batch_size=4), vitlab.Run(store=store))
    r = rep.results[0]
    assert "these images have no labels" in r.accuracy_note and np.isnan(r.accuracy(0).value)
    assert np.isfinite(r.agreement(0).value) and r.agreement(len(r.layers) - 1).value == 1.0
    rep = L.logit_lens([tiny_vit], fmnist_source, L.LensOptions(images=8, batch_size=4), vitlab.Run(store=store))
    assert "the head predicts 1000 classes and these images have 10" in rep.results[0].accuracy_note
    assert rep.exactness()[tiny_vit.label] <= 1e-5
    assert "no accuracy" in rep.finding().ours and "nan" not in rep.words_frame().to_string().lower()


def _counts(rng, blocks: int = 3, n: int = 6) -> dict:
    pred, final = rng.integers(0, 4, size=(blocks, n)), rng.integers(0, 4, size=n)
    return L.batch_counts(pred, final, rng.integers(0, 4, size=n).tolist(), 4)


def test_the_accumulator_contract_order_merge_and_state():
    rng = np.random.default_rng(0)
    batches = [(_counts(rng), k) for k in range(6)]
    one = L.LensAccumulator(["a", "b", "c"])
    for c, k in batches:
        one.update(c, k)
    shuffled = L.LensAccumulator(["a", "b", "c"])
    for c, k in reversed(batches):
        shuffled.update(c, k)
    a, b = L.LensAccumulator(["a", "b", "c"]), L.LensAccumulator(["a", "b", "c"])
    for c, k in batches[:2]:
        a.update(c, k)
    for c, k in batches[2:]:
        b.update(c, k)
    a.merge(b)
    # the per-batch terms as the cache and an ordered gather carry them: arrays only, never pickled
    back = L.LensAccumulator(["a", "b", "c"]).load_keyed_terms([(k, unpack(pack(v))) for k, v in one.keyed_terms()])
    for other in (shuffled, a, back):
        for x, y in zip(one.compute(), other.compute()):
            np.testing.assert_array_equal(x, y)
    correct, agree, n, per_class = one.compute()
    assert n.sum() == 36 and per_class.sum() == 36 and correct.shape == (6, 3)
    # the totals have the same shapes whatever the number of batches (torchrun ranks compare them)
    shapes = {k: np.shape(v) for k, v in one.state().items()}
    assert shapes == {k: np.shape(v) for k, v in a.__class__(one.layers).update(*batches[0]).state().items()}
    np.testing.assert_array_equal(one.state()["agree"], agree.sum(0))
    assert all(v is None for v in L.LensAccumulator(["a"]).state().values())
    with pytest.raises(vitlab.VitlabError, match="different blocks"):
        one.merge(L.LensAccumulator(["a"]))


@zoo
def test_cli_writes_the_csv_chart_and_exactness(tmp_path, capsys):
    from vitlab.cli import main

    out = tmp_path / "lens"
    assert main(["logit-lens", "-m", "zoo:vit-cls", "-m", "zoo:resnet", "-n", "32", "-b", "8", "-o", str(out),
                 "--cache-dir", str(tmp_path / "c")]) == 0
    import pandas as pd

    frame = pd.read_csv(out / "logit_lens.csv")
    assert len(frame) == 6 + 8 and {"accuracy", "accuracy_lo", "agreement_hi", "reason"} <= set(frame)
    assert (out / "logit_lens.png").stat().st_size > 0 and (out / "logit_lens.svg").is_file()
    run = json.loads((out / "run.json").read_text())
    assert max(run["last_block_max_abs_diff"].values()) <= 1e-5
    assert "last block readout = logits" in capsys.readouterr().out


@zoo
@pytest.mark.usefixtures("app_cache")
def test_the_page_shows_accuracy_per_block_with_intervals_for_the_four_models():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app" / "Home.py"), default_timeout=600)
    for k, v in {"lab.source": "fashion-mnist:test", "lab.images": 64, "lab.batch_size": 16}.items():
        at.session_state[k] = v
    at.run()
    at.switch_page("views/logit_lens.py").run()
    at.button(key="lens.zoo").click().run()  # the sidebar's two (zoo:vit-cls, zoo:resnet) and the zoo's other two
    assert not at.exception and not at.error, [e.value for e in at.error]
    table = at.dataframe[0].value
    interval = re.compile(r"^\d\.\d{3} \[\d\.\d{3}, \d\.\d{3}\]$")
    for name in FOUR:
        part = table[table["model"] == f"zoo:{name}"]
        shown = part[part["no readout because"] == ""]
        assert len(shown) == (2 if name == "resnet" else len(part)) and len(part) >= 4, name
        # every readable block but the last (whose agreement is exactly 1) has an accuracy with its interval
        assert shown["accuracy [95 %]"].str.match(interval).all(), shown
    words = re.sub(r"\\([^\w\s])", r"\1", " ".join(m.value for m in at.markdown))  # as read: escapes removed
    # not a paper claim (the tour's Fig 11 check words that, on Linear probes): the question, then these models
    assert "Where does the class appear?" in words and "The paper reports" not in words
    assert "On these models:" in words and "95 % jackknife t over 4 batches" in words
    assert all(f"zoo:{n}" in words for n in FOUR) and not re.search(r"\bnan\b", words, re.IGNORECASE)
    assert any("Beside **Linear probes** (Fig 11)" in c.value and "two answers" in c.value for c in at.caption)


@zoo
def test_under_torchrun_uneven_shards_give_the_single_process_table(tmp_path):
    import os
    import socket
    import subprocess

    import pandas as pd

    from vitlab.cli import main

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = ["logit-lens", "-m", "zoo:vit-cls", "-n", "40", "-b", "8"]  # 5 batches: 3 on rank 0, 2 on rank 1
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR",
                                                             "MASTER_PORT")}
    env.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", VITLAB_DIST_TIMEOUT="60",
               PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                           "--master_addr=127.0.0.1", f"--master_port={port}", "-m", "vitlab", *args, "--no-cache",
                           "-o", str(tmp_path / "two")], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert main([*args, "--no-cache", "-o", str(tmp_path / "one")]) == 0
    two, one = (pd.read_csv(tmp_path / d / "logit_lens.csv") for d in ("two", "one"))
    pd.testing.assert_frame_equal(two, one)
    assert one["accuracy_lo"].notna().all()
