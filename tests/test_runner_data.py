"""Data sources, the single-pass runner, the cache, and the CLI's output contract."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image

import vitlab
from vitlab import VitlabError, data, run, taps

from .reference import hsic1_song, linear_gram64


def _write_images(folder, n, size=40, classes=("a", "b")):
    rng = np.random.default_rng(0)
    for i in range(n):
        d = folder / classes[i % len(classes)]
        d.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 255, (size, size + 8, 3), dtype=np.uint8)).save(d / f"img{i:03d}.png")


def test_folder_source_labels_order_and_corrupt_image(tmp_path):
    _write_images(tmp_path, 6)
    (tmp_path / "b" / "broken.jpg").write_bytes(b"not a jpeg at all")
    src = data.open_source(str(tmp_path))
    assert src.classes == ["a", "b"] and len(src) == 7
    ids = [src.item_id(i) for i in range(len(src))]
    assert ids == sorted(ids)
    batch = data.decode(src, data.plan_batches(src, list(range(7)), 7)[0])
    assert len(batch.images) == 6 and len(batch.skipped) == 1
    assert "broken.jpg" in batch.skipped[0][1]


def test_unknown_source_and_empty_folder(tmp_path):
    with pytest.raises(VitlabError, match="neither a folder nor a known data set"):
        data.open_source(str(tmp_path / "nope"))
    with pytest.raises(VitlabError, match="holds no images"):
        data.open_source(str(tmp_path))


def test_exif_orientation_and_greyscale(tmp_path, tiny_vit):
    img = Image.new("RGB", (30, 10), (200, 10, 10))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 on display
    img.save(tmp_path / "o.jpg", exif=exif)
    src = data.FilesSource([tmp_path / "o.jpg"])
    assert src.load(0).size == (10, 30)
    grey = data.FilesSource([("g.png", _png_bytes(Image.new("L", (20, 20), 128)))])
    x = data.to_tensor([grey.load(0)], tiny_vit)  # RGB model: greyscale replicated
    assert x.shape[1] == 3 and torch.allclose(x[0, 0], x[0, 1])


def _png_bytes(img):
    import io

    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def test_uploads_and_select():
    src = data.uploads_source([("a.png", _png_bytes(Image.new("RGB", (8, 8))))] * 3)
    assert len(src) == 3
    assert data.select(src, 2) == [0, 1]
    assert sorted(data.select(src, None, shuffle=1)) == [0, 1, 2]
    with pytest.raises(VitlabError, match="no images uploaded"):
        data.uploads_source([])


def test_fashion_mnist_source(fmnist_source):
    assert len(fmnist_source) >= 500 and fmnist_source.classes[0] == "T-shirt/top"
    img = fmnist_source.load(0)
    assert img.size == (28, 28) and fmnist_source.label(0) == 9  # first test image: ankle boot


def _reference_cka(loaded, source, indices, bs, tap_names):
    """Plain float64 minibatch CKA of one model with itself, straight from captured activations."""
    L = len(tap_names)
    xy = np.zeros((L, L))
    for start in range(0, len(indices), bs):
        x = data.to_tensor([source.load(i) for i in indices[start:start + bs]], loaded)
        with taps.capture(loaded.model, tap_names) as acts, torch.no_grad():
            loaded.model(x)
        grams = [linear_gram64(acts[t].reshape(len(x), -1).double().numpy()) for t in tap_names]
        xy += np.array([[hsic1_song(a, b) for b in grams] for a in grams])
    d = np.sqrt(np.diag(xy))
    return xy / np.outer(d, d)


def test_runner_cka_matches_reference_on_bias_dominated_default_init_activations(tiny_resnet, fmnist_source, store):
    """Post-ReLU features of a default-init ResNet have a large common mean: the hard case for float32."""
    indices = list(range(20))
    tap_names = taps.default_taps(tiny_resnet.model)
    ref = _reference_cka(tiny_resnet, fmnist_source, indices, 8, tap_names)
    rep = run.cka([tiny_resnet], fmnist_source, run.CKAOptions(images=20, batch_size=8), run.Run(store=store))
    np.testing.assert_allclose(rep.pair(0, 0).cka, ref, atol=1e-6)
    assert rep.pair(0, 0).batches == 3 and rep.images == 20  # 8 + 8 + 4


def test_second_run_computes_zero_batches_and_third_model_reuses(tiny_vit, tiny_resnet, fmnist_source, store):
    opts = run.CKAOptions(images=16, batch_size=8)
    first = run.cka([tiny_vit, tiny_resnet], fmnist_source, opts, run.Run(store=store))
    assert first.info.batches_computed == 2
    again = run.cka([tiny_vit, tiny_resnet], fmnist_source, opts, run.Run(store=store))
    assert again.info.batches_computed == 0 and again.info.batches_from_cache == 2
    np.testing.assert_array_equal(again.pair(0, 1).cka, first.pair(0, 1).cka)
    third = vitlab.load("test_vit@random:5", "cpu")
    calls = []
    hook = tiny_vit.model.register_forward_hook(lambda *a: calls.append(1))
    try:
        rep3 = run.cka([tiny_vit, tiny_resnet, third], fmnist_source, opts, run.Run(store=store))
    finally:
        hook.remove()
    assert calls == [] and rep3.info.batches_computed == 2  # only the new model ran
    assert rep3.info.forward_passes == {third.label: 2}
    np.testing.assert_allclose(rep3.pair(0, 1).cka, first.pair(0, 1).cka, rtol=1e-12)


def test_a_short_last_batch_joins_the_one_before(tiny_resnet, fmnist_source, store):
    # 10 images in batches of 4: 4 and 6, not 4, 4 and a dropped 2 (issue 24: no image is left out)
    rep = run.cka([tiny_resnet], fmnist_source, run.CKAOptions(images=10, batch_size=4), run.Run(store=store))
    assert not rep.info.dropped_batches and rep.images == 10 and rep.pair(0, 0).batches == 2


def test_repeats_give_mean_and_spread(tiny_resnet, fmnist_source, store):
    rep = run.cka([tiny_resnet], fmnist_source, run.CKAOptions(images=8, batch_size=8, repeats=3),
                  run.Run(store=store))
    r = rep.pair(0, 0)
    assert r.std is not None and r.std.shape == r.cka.shape and np.nanmax(r.std) > 0
    singles = [run.cka([tiny_resnet], fmnist_source, run.CKAOptions(images=8, batch_size=8, shuffle=s),
                       run.Run(store=store)).pair(0, 0).cka
               for s in range(3)]
    np.testing.assert_allclose(r.cka, np.mean(singles, axis=0), rtol=1e-12)


def test_float64_verify_mode_agrees(tiny_vit, fmnist_source, store):
    f32 = run.cka([tiny_vit], fmnist_source, run.CKAOptions(images=12, batch_size=6), run.Run(store=store))
    f64 = run.cka([tiny_vit], fmnist_source, run.CKAOptions(images=12, batch_size=6), run.Run(store=store),
                  statistic=run.GramStatistic(precision="float64"))
    assert f64.info.batches_computed == 2  # a separate cache entry
    np.testing.assert_allclose(f32.pair(0, 0).cka, f64.pair(0, 0).cka, atol=1e-6)


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "vitlab", *args], capture_output=True, text=True, env=env,
                          timeout=600)


def test_cli_cka_output_contract_and_cache(tmp_path):
    out = tmp_path / "out"
    folder = tmp_path / "imgs"
    _write_images(folder, 9)
    (folder / "a" / "zz_corrupt.png").write_bytes(b"\x89PNG broken")
    args = ["cka", "-m", "test_vit@random", "-m", "test_resnet@random", "--data", str(folder), "--images", "10",
            "-b", "5", "--out", str(out)]
    r = _cli(*args)
    assert r.returncode == 0, r.stderr[-3000:]
    frame = pd.read_csv(out / "cka.csv")
    # issue 12: every cell carries its 95 % interval over batches; the permutation null only with --permutations
    assert list(frame.columns) == ["model_a", "layer_a", "model_b", "layer_b", "cka", "cka_lo", "cka_hi",
                                   "interval_unit", "interval_units", "interval_method", "p_null", "null_lo", "null_hi"]
    # 10 images in batches of 5 (a corrupt one skipped): too few batches for an interval, and it says so
    assert frame["interval_method"].str.startswith("too few batches for an interval").all()
    assert frame["p_null"].isna().all() and frame["cka_lo"].isna().all() and frame["cka"].notna().all()
    assert set(zip(frame.model_a, frame.model_b)) == {(a, b) for a in ("test_vit@random", "test_resnet@random")
                                                      for b in ("test_vit@random", "test_resnet@random")}
    meta = json.loads((out / "run.json").read_text())
    for key in ("models", "images", "batch_size", "batches_computed", "batches_from_cache", "skipped_images",
                "seconds"):
        assert key in meta
    assert meta["batches_computed"] == 2 and meta["images"] == 9 and len(meta["skipped_images"]) == 1
    assert "zz_corrupt.png" in r.stderr and "skipped 1" in r.stderr
    assert len(list(out.glob("*.png"))) == 4 and len(list(out.glob("*.svg"))) == 4
    again = _cli(*args)
    assert json.loads((out / "run.json").read_text())["batches_computed"] == 0, again.stderr[-2000:]


@pytest.mark.parametrize("args,msg", [
    (["cka", "-m", "nonexistent_model_q"], "unknown model"),
    (["cka", "-m", "test_vit@random", "--data", "/does/not/exist"], "neither a folder"),
    (["cka", "-m", "test_resnet@random", "--tokens", "cls"], "no CLS token"),
])
def test_cli_user_errors_are_one_line(args, msg):
    r = _cli(*args, "--images", "8", "--no-cache")
    assert r.returncode == 2
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.startswith("vitlab: error")]
    assert len(lines) == 1 and msg in lines[0] and "Traceback" not in r.stderr


def test_cifar_offline_is_a_clear_error(tmp_path, monkeypatch):
    import vitlab

    monkeypatch.setenv("VITLAB_DATA_DIR", str(tmp_path / "datasets"))
    monkeypatch.setattr(vitlab.hub, "hub_reachable", lambda timeout=1.5: False)
    with pytest.raises(VitlabError, match="cifar10 is not in .* offline: go online once"):
        data.open_source("cifar10")
    with pytest.raises(VitlabError, match="split must be 'train' or 'test'"):
        data.open_source("cifar100:val")


def test_cli_cache_info_and_clear(tmp_path):
    import os

    env = dict(os.environ, VITLAB_CACHE_DIR=str(tmp_path / "c"))
    r = _cli("cka", "-m", "test_resnet@random", "--images", "8", "-b", "8", "--out", str(tmp_path / "o"), env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    info = _cli("cache", "info", env=env)
    entries = int(info.stdout.split(":")[1].split()[0])
    assert entries >= 2  # the batch's metadata and its Grams
    cleared = _cli("cache", "clear", env=env)
    assert f"removed {entries} entries" in cleared.stdout
    assert " 0 entries" in _cli("cache", "info", env=env).stdout
