"""Issue 10, hardening: one test per item (each fails on the main before the fix), plus the concurrency checks.

Items: 1 localhost bind, 2 bombs skipped, 3 shrink at decode and size caps, 4 bit depth / alpha / animations,
5 precision and versions in cache keys, 6 a cache that heals, 7 app inputs keyed by content, 8 labels in the key,
9 empty shards and rank-0-only commands, 10 small things (long chart names, stale --out files, empty-file hint,
waiting for a model), 11 torch >= 2.6.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bad_inputs import declared_png  # noqa: E402

import vitlab  # noqa: E402
from vitlab import cli
from vitlab.inputs import images  # noqa: E402
from vitlab.inputs.cache import Store  # noqa: E402
from vitlab.inputs.data import FilesSource, decode, folder_source, plan_batches  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CPU = ["--device", "cpu"]


def _png(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def _folder(root: Path, n: int = 8, classes: tuple[str, ...] = ()) -> Path:
    rng = np.random.default_rng(0)
    for k in range(n):
        sub = root / classes[k % len(classes)] if classes else root
        sub.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(sub / f"img{k}.png")
    return root


# ------------------------------------------------------------------------------------------ 1. localhost


def test_1_app_listens_on_localhost_only():
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["server"]["address"] == "localhost"
    assert "0.0.0.0" in (ROOT / "docs" / "hardening.md").read_text()  # how to expose it on purpose


# ------------------------------------------------------------------------------------------ 2. bombs


def test_2_a_decompression_bomb_in_a_folder_is_skipped_and_named(tmp_path, capfd):
    folder = _folder(tmp_path / "imgs", 6)
    (folder / "bomb.png").write_bytes(declared_png(14000, 14000))  # ~30 bytes declaring 196 megapixels
    rc = cli.main(["cka", "-m", "test_vit@random", "-d", str(folder), "-b", "8", *CPU, "-o", str(tmp_path / "o")])
    err = capfd.readouterr().err
    assert rc == 0, err
    assert (tmp_path / "o" / "cka.csv").is_file()
    assert "bomb.png': too many pixels" in err and "Traceback" not in err
    assert json.loads((tmp_path / "o" / "run.json").read_text())["images"] == 6


# ------------------------------------------------------------------------------------------ 3. shrink, caps


def test_3_large_images_are_shrunk_while_decoding_and_caps_are_enforced(monkeypatch):
    big = _png(Image.new("RGB", (3000, 2000), (10, 200, 30)))
    img = images.decode(big, "big.png", min_side=256)
    assert 256 <= min(img.size) < 512 and img.size[0] / img.size[1] == pytest.approx(1.5, rel=0.01)
    assert np.asarray(img)[5, 5].tolist() == [10, 200, 30]
    jpg = io.BytesIO()
    Image.new("RGB", (4000, 4000), (90, 90, 90)).save(jpg, "JPEG")
    assert 256 <= min(images.decode(jpg.getvalue(), "big.jpg", 256).size) < 512  # draft: decoded at 1/8 already
    monkeypatch.setattr(images, "MAX_UPLOAD_BYTES", 1000)
    with pytest.raises(vitlab.VitlabError, match="big.png': .* over the 0 MiB limit per file"):
        images.decode(big, "big.png")
    monkeypatch.setattr(images, "MAX_PIXELS", 1000 * 1000)
    with pytest.raises(vitlab.VitlabError, match="1001×1000 is 1 megapixels, over the limit"):
        images.decode(declared_png(1001, 1000), "wide.png")


def test_3_needed_side_follows_the_model_transform(tiny_vit):
    cfg = tiny_vit.data_config
    side = images.needed_side(cfg)
    assert side == int(np.ceil(cfg["input_size"][-1] / cfg["crop_pct"]))
    src = FilesSource([("huge.png", _png(Image.new("RGB", (2000, 2000), (1, 2, 3))))])
    batch = decode(src, plan_batches(src, [0], 1)[0], side)
    assert side <= min(batch.images[0].size) < 2 * side


# ------------------------------------------------------------------------------------------ 4. bit depth, alpha


def test_4_sixteen_bit_float_alpha_and_animation_are_converted_properly():
    ramp = (np.arange(256 * 4).reshape(16, 64) * 64).astype(np.uint16)  # 0..65472
    got = np.asarray(images.decode(_png(Image.fromarray(ramp)), "ramp16.png"))
    np.testing.assert_array_equal(got, np.clip(np.rint(ramp / 257.0), 0, 255).astype(np.uint8))
    assert len(np.unique(got)) > 200  # Pillow's convert('L') gives 2 values here
    f = np.linspace(0, 1, 100, dtype=np.float32).reshape(10, 10)
    buf = io.BytesIO()
    Image.fromarray(f).save(buf, "TIFF")
    np.testing.assert_array_equal(np.asarray(images.decode(buf.getvalue(), "f.tif")), np.rint(f * 255).astype(np.uint8))
    rgba = np.zeros((8, 8, 4), np.uint8)
    rgba[..., 0] = 255  # red, fully transparent on the left half
    rgba[:, 4:, 3] = 255
    out = np.asarray(images.decode(_png(Image.fromarray(rgba, "RGBA")), "a.png"))
    assert (out[:, :4] == images.BACKGROUND).all() and (out[:, 4:] == (255, 0, 0)).all()
    frames = [Image.new("RGB", (16, 16), c) for c in ((0, 0, 255), (0, 255, 0))]
    gif = io.BytesIO()
    frames[0].save(gif, "GIF", save_all=True, append_images=frames[1:])
    first = images.decode(gif.getvalue(), "anim.gif")
    assert np.asarray(first)[0, 0].tolist() == [0, 0, 255]
    # a GIF's frame count is not in its header: one bounded seek says "several" (issue 24: counting walks the file)
    assert first.info[images.NOTES] == ["animated (several frames): the first frame is used"]


# ------------------------------------------------------------------------------------------ 5. keys


def test_5_precision_device_and_library_versions_are_in_every_statistic_key(tiny_vit, monkeypatch):
    from vitlab.inputs import cache
    from vitlab.engine.run import GramStatistic, forward_precision

    src = FilesSource([(f"{k}.png", _png(Image.new("RGB", (8, 8), (k, 0, 0)))) for k in range(4)])
    batch = plan_batches(src, range(4), 4)[0]
    stat = GramStatistic()
    f32 = stat.cache_key(tiny_vit, batch, forward_precision(tiny_vit, amp=False))
    assert forward_precision(tiny_vit, amp=True) == "float32/cpu"  # autocast only acts on CUDA
    assert stat.cache_key(tiny_vit, batch, "bf16/cuda") != f32
    assert stat.cache_key(tiny_vit, batch, "float32/cuda") != f32
    versions = dict(cache.library_versions())
    assert set(versions) == {"torch", "timm", "pillow", "vitlab"}
    monkeypatch.setattr(cache, "library_versions", lambda: {**versions, "timm": "9.9.9"})
    assert stat.cache_key(tiny_vit, batch, forward_precision(tiny_vit, amp=False)) != f32


# ------------------------------------------------------------------------------------------ 6. the cache heals


def test_6_a_damaged_entry_is_a_miss_reported_once(tmp_path, capfd):
    store = Store(tmp_path / "c")
    store.put("x", {"a": np.arange(3)})
    store.put("y", {"a": np.arange(3)})
    for key in ("x", "y"):
        store._cache.set("a:" + key, store._cache.get("a:" + key)[:20])  # a truncated .npz
    assert store.get("x") is None and store.get("y") is None
    assert store.get("x") is None  # dropped, still a miss
    err = capfd.readouterr().err
    assert err.count("unreadable cache entries are recomputed") == 1
    store.put("x", {"a": np.arange(3)})
    np.testing.assert_array_equal(store.get("x")["a"], np.arange(3))


def test_6_truncated_entries_on_disk_are_recomputed_by_the_next_run(tmp_path, capfd):
    folder, cache_dir = _folder(tmp_path / "imgs", 8), tmp_path / "cache"
    args = ["cka", "-m", "test_vit@random", "-d", str(folder), "-b", "8", *CPU, "--cache-dir", str(cache_dir)]
    assert cli.main([*args, "-o", str(tmp_path / "a")]) == 0
    store = Store(cache_dir)
    keys = [k for k in store._cache.iterkeys() if k.startswith("a:")]
    assert keys
    for k in keys:  # every stored Gram truncated, as a disk full or a crash mid-write leaves them
        store._cache.set(k, store._cache.get(k)[:100])
    store.close()
    capfd.readouterr()
    assert cli.main([*args, "-o", str(tmp_path / "b")]) == 0
    assert "recomputed" in capfd.readouterr().err
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "a" / "cka.csv"), pd.read_csv(tmp_path / "b" / "cka.csv"))


def test_6_a_corrupt_database_is_moved_aside_and_cache_clear_always_works(tmp_path, capfd):
    d = tmp_path / "cache"
    d.mkdir()
    (d / "cache.db").write_bytes(b"this is not sqlite" * 100)
    assert cli.main(["cache", "clear", "--cache-dir", str(d)]) == 0
    assert not (d / "cache.db").exists()
    (d / "cache.db").write_bytes(b"this is not sqlite" * 100)
    store = Store(d)  # opens: the damaged file is moved aside, an empty cache starts
    store.put("k", {"a": np.ones(2)})
    assert store.get("k") is not None and "unreadable" in capfd.readouterr().err
    store.close()
    assert cli.main(["cache", "clear", "--cache-dir", str(d)]) == 0
    assert not list(d.glob("damaged-*"))


def test_6_a_failed_cache_write_is_a_warning_and_results_are_still_written(tmp_path, monkeypatch, capfd):
    import diskcache

    def full(self, *a, **k):
        raise OSError(27, "File too large")

    monkeypatch.setattr(diskcache.Cache, "set", full)
    folder = _folder(tmp_path / "imgs", 8)
    rc = cli.main(["cka", "-m", "test_vit@random", "-d", str(folder), "-b", "8", *CPU, "-o", str(tmp_path / "o")])
    err = capfd.readouterr().err
    assert rc == 0 and (tmp_path / "o" / "cka.csv").is_file(), err
    assert err.count("cannot write to the cache") == 1 and "File too large" in err


@pytest.mark.parametrize("value", ["20GB", "-1", "nan", "zero"])
def test_6_a_bad_cache_budget_is_one_line(value, monkeypatch, capfd):
    monkeypatch.setenv("VITLAB_CACHE_GB", value)
    assert cli.main(["cache", "info"]) == 2
    err = capfd.readouterr().err.strip()
    assert err.count("\n") == 0 and f"VITLAB_CACHE_GB={value!r} must be a positive number" in err


def _cka_cmd(folder: Path, cache_dir: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "vitlab", "cka", "-m", "test_vit@random", "-m", "test_resnet@random", "-d",
            str(folder), "-b", "4", *CPU, "--cache-dir", str(cache_dir), "-o", str(out)]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")


def test_6_two_processes_on_one_cache_agree_and_a_killed_one_leaves_a_usable_cache(tmp_path):
    import diskcache

    folder, cache_dir = _folder(tmp_path / "imgs", 16), tmp_path / "cache"
    procs = [subprocess.Popen(_cka_cmd(folder, cache_dir, tmp_path / f"o{k}"), env=_env(), stderr=subprocess.PIPE,
                              stdout=subprocess.DEVNULL, text=True) for k in range(2)]
    errs = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    a, b = (pd.read_csv(tmp_path / f"o{k}" / "cka.csv") for k in range(2))
    pd.testing.assert_frame_equal(a, b)
    # kill a run as soon as it has written its first entries, then run again on the same cache
    cache2 = tmp_path / "cache2"
    p = subprocess.Popen(_cka_cmd(folder, cache2, tmp_path / "killed"), env=_env(), stderr=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL)
    deadline, entries = time.time() + 120, 0
    while time.time() < deadline and p.poll() is None and entries < 2:
        time.sleep(0.1)
        if (cache2 / "cache.db").exists():
            with diskcache.Cache(str(cache2)) as c:
                entries = len(c)
    p.send_signal(signal.SIGKILL)
    assert p.wait() == -signal.SIGKILL and entries >= 2  # killed mid-run, after it had cached something
    done = subprocess.run(_cka_cmd(folder, cache2, tmp_path / "after"), env=_env(), capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "after" / "cka.csv"), a)


# ------------------------------------------------------------------------------------------ 7. app keys


def test_7_app_inputs_are_keyed_by_content_and_listing(tmp_path, monkeypatch):
    pytest.importorskip("streamlit")
    monkeypatch.setenv("VITLAB_FOLDERS", str(tmp_path))  # the app reads folders only there (vitlab.inputs.folders)
    sys.path.insert(0, str(ROOT / "app"))
    import lab

    one = _png(Image.new("RGB", (8, 8), (1, 2, 3)))
    two = _png(Image.new("RGB", (8, 8), (3, 2, 1)))
    assert len(one) == len(two)  # same name, same size, other pixels
    key = lambda uploads, source=lab.UPLOADS: lab.Settings("a", "b", source, 8, 4, "cpu", uploads).key  # noqa: E731
    assert key((("x.png", one),)) != key((("x.png", two),))
    folder = _folder(tmp_path / "f", 4)
    before = key((), str(folder))
    _folder(tmp_path / "g", 1)
    (tmp_path / "g" / "img0.png").rename(folder / "new.png")
    assert key((), str(folder)) != before


def test_7_removing_every_upload_empties_the_source():
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app" / "Home.py"), default_timeout=180)
    at.session_state["lab.source"] = "uploads"
    at.session_state["lab.model_a"] = at.session_state["lab.model_b"] = "test_vit@random"
    at.run()
    files = [(f"u{k}.png", _png(Image.new("RGB", (20, 20), (40 * k, 9, 9))), "image/png") for k in range(3)]
    at.sidebar.file_uploader(key="w.uploads").set_value(files).run()
    assert len(at.session_state["lab.uploads"]) == 3
    at.sidebar.file_uploader(key="w.uploads").set_value([]).run()
    assert at.session_state["lab.uploads"] == ()
    assert any("no images uploaded" in e.value for e in at.error)


# ------------------------------------------------------------------------------------------ 8. labels


def test_8_a_new_class_folder_renumbers_labels_even_from_the_cache(tmp_path, tiny_vit):
    from vitlab.engine.run import GramStatistic, Run, stream

    root = _folder(tmp_path / "data", 8, classes=("bird", "cat"))
    store = Store(tmp_path / "cache")
    src = folder_source(root)
    labels = [b.labels for b, _ in stream([tiny_vit], src, range(8), 8, [[GramStatistic()]], Run(store=store))]
    assert labels == [[0, 0, 0, 0, 1, 1, 1, 1]]
    _folder(tmp_path / "tmp", 1)
    (root / "ant").mkdir()
    (tmp_path / "tmp" / "img0.png").rename(root / "ant" / "a.png")
    src2 = folder_source(root)
    assert src2.classes == ["ant", "bird", "cat"] and src2.item_id(0).endswith("a.png")
    labels = [b.labels for b, _ in stream([tiny_vit], src2, range(1, 9), 8, [[GramStatistic()]], Run(store=store))]
    assert labels == [[1, 1, 1, 1, 2, 2, 2, 2]]


# ------------------------------------------------------------------------------------------ 9. scale-out


@pytest.mark.distributed
def test_9_an_empty_shard_contributes_nothing(tmp_path):
    out2, out1 = tmp_path / "two", tmp_path / "one"
    args = ["skip-ratio", "-m", "test_vit@random", "-n", "8", "-b", "8", "-d", "fashion-mnist:test", *CPU, "--no-cache"]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_addr=127.0.0.1",
           f"--master_port={_free_port()}", "-m", "vitlab", *args, "-o", str(out2)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=_env(), check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert cli.main([*args, "-o", str(out1)]) == 0
    a, b = pd.read_csv(out1 / "skip_ratio.csv"), pd.read_csv(out2 / "skip_ratio.csv")
    pd.testing.assert_frame_equal(a, b, check_exact=False, rtol=0, atol=1e-12)


def test_9_receptive_field_is_sharded_and_written_by_rank_0_alone(tmp_path):
    out2, out1 = tmp_path / "two", tmp_path / "one"
    args = ["receptive-field", "-m", "test_vit@random", "-n", "8", "-b", "4", "-d", "fashion-mnist:test", *CPU,
            "--no-cache"]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_addr=127.0.0.1",
           f"--master_port={_free_port()}", "-m", "vitlab", *args, "-o", str(out2)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=_env(), check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert done.stdout.count(f"files in {out2}") == 1  # one rank writes and reports
    assert cli.main([*args, "-o", str(out1)]) == 0
    a, b = pd.read_csv(out1 / "receptive_field.csv"), pd.read_csv(out2 / "receptive_field.csv")
    pd.testing.assert_frame_equal(a, b, check_exact=False, rtol=0, atol=1e-9)


# ------------------------------------------------------------------------------------------ 10. small things


def test_10_long_chart_names_never_collide():
    from vitlab.charts.common import slug

    a, b = "cka_" + "x" * 200 + "_left", "cka_" + "x" * 200 + "_right"
    assert slug(a) != slug(b) and len(slug(a)) == len(slug(b)) == 120
    assert slug("short name") == "short_name"


def test_10_a_rerun_into_the_same_out_folder_removes_its_own_stale_charts(tmp_path):
    folder, out = _folder(tmp_path / "imgs", 8), tmp_path / "out"
    base = ["cka", "-d", str(folder), "-b", "8", *CPU, "-o", str(out)]
    assert cli.main([*base, "-m", "test_vit@random", "-m", "test_vit@random:1"]) == 0
    pair = {p.name for p in out.glob("*.png") if "random_1" in p.name}
    assert pair
    (out / "my_notes.txt").write_text("mine")
    assert cli.main([*base, "-m", "test_vit@random"]) == 0
    assert not {p.name for p in out.glob("*.png")} & pair  # the pair's charts are gone
    assert (out / "my_notes.txt").read_text() == "mine" and (out / "cka.csv").is_file()


def test_10_an_empty_png_is_called_empty_and_text_named_png_is_not_a_png():
    with pytest.raises(vitlab.VitlabError, match="empty file") as e:
        images.decode(b"", "shot.png")
    assert "convert it to PNG" not in str(e.value)
    with pytest.raises(vitlab.VitlabError, match="not a valid PNG file"):
        images.decode(b"hello", "shot.png")


def test_10_a_run_waiting_for_a_model_says_so_and_can_be_cancelled(tiny_vit):
    from vitlab import interventions, taps

    class Cancelled(Exception):
        pass

    heard: list[str] = []

    def progress(done, total, text):
        heard.append(text)
        raise Cancelled  # what Streamlit's Cancel does at the next report

    lock, held, release = taps.model_lock(tiny_vit.model), threading.Event(), threading.Event()

    def other_tab():
        with lock:
            held.set()
            release.wait(30)

    t = threading.Thread(target=other_tab)
    t.start()
    held.wait(5)
    result: list = []

    def waiting():
        try:
            with interventions.remove_skip(tiny_vit.model, interventions.SkipRemoval(1, "attn"), progress):
                result.append("ran")
        except Cancelled:
            result.append("cancelled")

    w = threading.Thread(target=waiting)
    w.start()
    w.join(10)
    finished = not w.is_alive()
    release.set()
    t.join(5)
    w.join(5)
    assert finished and result == ["cancelled"]
    assert heard and "waiting for" in heard[0] and "another run" in heard[0]
    assert "forward" not in vars(tiny_vit.model.blocks[1])  # nothing was patched


# ------------------------------------------------------------------------------------------ 11. torch


def test_11_torch_2_6_is_required_for_pickled_checkpoints(tmp_path, monkeypatch):
    from vitlab import models

    req = (ROOT / "requirements.txt").read_text()
    assert "torch>=2.6" in req.replace(" ", "")
    import torch

    path = tmp_path / "w.pth"
    torch.save({"w": torch.zeros(2)}, path)
    monkeypatch.setattr(torch, "__version__", "2.5.1+cpu")
    with pytest.raises(vitlab.VitlabError, match="needs torch >= 2.6"):
        models.read_state_dict(path)


# ------------------------------------------------------------------------------------------ catalogue (issue 24)
# Every class of hostile input of issue 24, each case generated by tests/bad_inputs.py: symbolic links and hostile
# records in --out, caches that cannot be written or opened, hostile sizes, aspect ratios and page counts, names.

from bad_inputs import CACHE_FAILURES, HOSTILE_NAMES, HOSTILE_SHAPES, OUT_CASES, plant_out  # noqa: E402
from test_hardening_ii import _tiny, tiny  # noqa: E402, F401 - the fixture: a one-CSV row of the table


@pytest.mark.parametrize("case", OUT_CASES)
def test_catalogue_out_folders(case, tiny, tmp_path, capfd):  # noqa: F811
    out, outside = tmp_path / "out", tmp_path / "outside"
    out.mkdir()
    outside.mkdir()
    keep = plant_out(case, out, outside)
    before = {p: p.read_bytes() for p in keep}
    assert _tiny(out, 1) == 0
    err = capfd.readouterr().err
    assert "Traceback" not in err
    assert {p: p.read_bytes() for p in keep} == before  # nothing vitlab did not write was changed or removed
    assert (out / "pair_0.csv").is_file() and not (out / "pair_0.csv").is_symlink()
    assert json.loads((out / "run.json").read_text())["command"] == "tiny-out"
    if case.startswith("record") and "reaches" not in case and "link" not in case and "wrong size" not in case:
        assert "ignored" in err or "could not record" in err  # a record vitlab did not write is said to be ignored


@pytest.mark.parametrize("case", sorted(CACHE_FAILURES))
def test_catalogue_caches_that_cannot_be_written(case, tmp_path, monkeypatch, capfd):
    import sqlite3

    import diskcache

    full, empty = tmp_path / "full", tmp_path / "empty"
    store = Store(full)
    store.put("k", {"a": np.arange(5)})
    store.put("big", {"a": np.arange(20000)})  # a value file, not inline
    store.close()

    def refuse(self, *a, **k):
        raise sqlite3.OperationalError(CACHE_FAILURES[case])

    monkeypatch.setattr(diskcache.Cache, "__init__", refuse)
    capfd.readouterr()
    read = Store(full)  # an existing cache is read
    assert read.mode == "ro" and read.get("k")["a"].tolist() == list(range(5))
    np.testing.assert_array_equal(read.get("big")["a"], np.arange(20000))
    read.put("new", {"a": np.ones(2)})  # not stored, not an error
    assert read.get("new") is None and not list(full.glob("damaged-*"))
    none = Store(empty)  # none to read: uncached
    assert none.mode == "off" and none.get("k") is None and none.info()["enabled"] is False
    err = capfd.readouterr().err
    assert err.count("warning") == 2 and CACHE_FAILURES[case] in err


@pytest.mark.parametrize("name", sorted(HOSTILE_SHAPES))
def test_catalogue_hostile_shapes_and_page_counts(name):
    make, short, noted = HOSTILE_SHAPES[name]
    img = images.decode(make(), name, min_side=248)
    assert min(img.size) == short and max(img.size) <= images.MAX_ASPECT * min(img.size)
    assert img.mode in ("L", "RGB") and bool(img.info[images.NOTES]) == noted


def test_catalogue_file_names(tmp_path, capfd):
    folder = _folder(tmp_path / "imgs", 4)
    raw, made = os.fsencode(folder), []
    png = (folder / "img0.png").read_bytes()
    for name in HOSTILE_NAMES:
        try:
            with open(raw + b"/" + name, "wb") as f:
                f.write(png)
            made.append(name)
        except OSError:  # a file system that refuses the name: nothing to test for it here
            continue
    src = folder_source(folder)
    assert len(src) == 4 + len(made)
    ids = [src.item_id(i) for i in range(len(src))]
    assert all(i.encode("utf-8") for i in ids)  # printable: no lone surrogates left
    batches = plan_batches(src, range(len(src)), 8)
    got = [decode(src, b, 64) for b in batches]
    assert sum(len(b.images) for b in got) == len(src) and not any(b.skipped for b in got)
    json.dumps(ids, ensure_ascii=False).encode("utf-8")
    pd.DataFrame({"image": ids}).to_csv(tmp_path / "ids.csv", index=False)
    rc = cli.main(["cka", "-m", "test_vit@random", "-d", str(folder), "-b", "8", *CPU, "--no-cache",
                   "--bootstrap", "0", "-o", str(tmp_path / "o")])
    assert rc == 0 and "Traceback" not in capfd.readouterr().err
    assert json.loads((tmp_path / "o" / "run.json").read_text())["images"] == len(src)
