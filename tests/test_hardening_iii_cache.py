"""Issue 39: the cache and the saved results are untrusted input. A value file that is a symbolic link (to a big file,
to /dev/zero), a FIFO, an entry that inflates, an array of another dtype or shape, a saved result with an edited
number, without a checksum, or of another type than its fields declare: each is a miss (dropped, said once,
recomputed), read without following it, without blocking and without allocating what it claims. Bad settings
(``VITLAB_IMAGES=abc``) never stop the server: the page names them.

Reads that could hang or allocate gigabytes on a careless reader run in a child process with a memory limit and a
timeout, so that this file fails (rather than taking the machine down) on such a reader."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import socket
import sqlite3
import subprocess
import sys
import textwrap
import time
import urllib.request
import zipfile
from pathlib import Path

import numpy as np
import pytest

import vitlab
from vitlab.inputs.cache import BadEntry, Store, unpack
from vitlab.tour import saved

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "app"))  # `import lab`, as the pages do
BIG = 1 << 16  # at least this many bytes: diskcache keeps the value in a file (below it: inline in sqlite)


def value_file(store: Store, key: str) -> Path:
    """The value file that holds ``key``'s arrays (``ab/cd/<hex>.val``)."""
    with sqlite3.connect(store.directory / "cache.db") as con:
        row = con.execute("SELECT filename FROM Cache WHERE key = ?", ("a:" + key,)).fetchone()
    assert row and row[0], "the entry is not in a file"
    return store.directory / row[0]


def big_entry(store: Store, key: str = "k") -> Path:
    store.put(key, {"a": np.arange(BIG, dtype=np.float64)})
    return value_file(store, key)


# a child process reads one entry under a 1.5 GiB address-space limit and reports what it got and how much its
# resident memory grew; a reader that follows links, blocks on FIFOs or inflates fails these tests by timeout or by
# memory, never by taking the machine with it
CHILD = textwrap.dedent("""
    import json, resource, sys, time
    resource.setrlimit(resource.RLIMIT_AS, (3 << 29, 3 << 29))
    from vitlab.inputs.cache import Store
    store = Store(sys.argv[1], 1)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    try:
        value = store.get(sys.argv[2])
        got = None if value is None else sorted(value)
    except MemoryError:
        got = "MemoryError"
    grew = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
    print(json.dumps({"got": got, "grew": grew, "seconds": time.perf_counter() - t0, "warnings": store.warnings}))
""")


def read_in_child(directory: Path, key: str, timeout: float = 30) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    try:
        out = subprocess.run([sys.executable, "-c", CHILD, str(directory), key], capture_output=True, text=True,
                             timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail(f"reading the entry took more than {timeout} s (it blocked)")
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def assert_miss_without_reading(result: dict) -> None:
    assert result["got"] is None, result
    assert result["grew"] < 64 * 2**20, f"the read allocated {result['grew'] / 2**20:.0f} MiB"
    assert result["seconds"] < 5, result
    assert len(result["warnings"]) == 1 and "unreadable cache entries are recomputed" in result["warnings"][0]


def test_a_value_file_linked_to_a_big_file_or_dev_zero_is_a_miss_without_reading(tmp_path):
    target = tmp_path / "big.bin"
    with open(target, "wb") as f:
        f.truncate(800 * 2**20)  # sparse: 800 MiB to a reader, nothing on the disk
    for to in (target, Path("/dev/zero")):
        store = Store(tmp_path / f"cache-{to.name}", 1)
        path = big_entry(store)
        path.unlink()
        path.symlink_to(to)
        store.close()
        assert_miss_without_reading(read_in_child(store.directory, "k"))
        assert not path.is_symlink() and not path.exists()  # the link was dropped ...
        assert target.stat().st_size == 800 * 2**20  # ... never what it points to
        again = Store(store.directory, 1)  # the next session: a plain miss, nothing said
        assert again.get("k") is None and again.warnings == []


def test_a_linked_shard_folder_is_not_followed(tmp_path):
    store = Store(tmp_path / "cache", 1)
    path = big_entry(store)
    elsewhere = tmp_path / "elsewhere"
    (path.parent.parent).rename(elsewhere)  # the shard folder 'ab' now lives outside the cache ...
    path.parent.parent.symlink_to(elsewhere, target_is_directory=True)  # ... and a link points there
    assert store.get("k") is None
    assert any(elsewhere.rglob("*.val"))  # nothing outside the cache was removed


def test_a_fifo_in_place_of_a_value_file_is_a_miss_at_once(tmp_path):
    store = Store(tmp_path / "cache", 1)
    path = big_entry(store)
    path.unlink()
    os.mkfifo(path)
    store.close()
    assert_miss_without_reading(read_in_child(store.directory, "k", timeout=20))
    assert not path.exists()


def test_a_value_file_of_another_size_than_its_index_is_a_miss(tmp_path):
    store = Store(tmp_path / "cache", 1)
    path = big_entry(store)
    with open(path, "ab") as f:
        f.write(b"\0" * 100)  # grown behind the index's back
    assert store.get("k") is None
    assert "index says" in store.warnings[0]


def bomb(n: int) -> bytes:
    """An npz whose one member is a float64 array of ``n`` zeros, deflated: a few MiB that inflate to
    ``8 n`` bytes (written in chunks: the test itself never holds it)."""
    from numpy.lib import format as npy

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        with zf.open("a.npy", "w", force_zip64=True) as f:
            npy.write_array_header_1_0(f, {"descr": "<f8", "fortran_order": False, "shape": (n,)})
            chunk = bytes(1 << 24)
            for _ in range(n * 8 // len(chunk)):
                f.write(chunk)
    return buf.getvalue()


def test_an_entry_that_inflates_is_refused_before_it_is_read(tmp_path):
    blob = bomb(96 * 2**20)  # 768 MiB of float64 zeros in a few MiB
    assert len(blob) < 8 * 2**20
    store = Store(tmp_path / "cache", 1)
    store._cache.set("a:k", blob)  # planted as an attacker would: raw bytes in a value file
    store.close()
    assert_miss_without_reading(read_in_child(store.directory, "k"))
    with pytest.raises(BadEntry, match="larger than the entry|compressed"):
        unpack(blob)


def test_an_npy_header_that_claims_more_than_its_bytes_is_refused():
    from numpy.lib import format as npy

    arr = io.BytesIO()
    npy.write_array(arr, np.zeros(4))
    member = arr.getvalue().replace(b"'shape': (4,)", b"'shape': (9999999,)")  # claims 80 MB, holds 32 bytes
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("a.npy", member)  # stored, with a correct CRC
    with pytest.raises(BadEntry, match="does not fill"):
        unpack(buf.getvalue())


@pytest.mark.parametrize("value, shapes, why", [
    ({"a": np.array(["3.31"])}, None, "dtype <U4"),  # a string where a float array belongs
    ({"a": np.zeros((3, 5))}, {"a": (3, 4)}, "shape"),  # another shape than the caller's
    ({"b": np.zeros(3)}, {"a": (None,)}, "expected"),  # another name
])
def test_arrays_of_another_dtype_shape_or_name_are_a_miss(store, value, shapes, why):
    store.put("k", value)
    assert store.get("k", shapes) is None
    assert len(store.warnings) == 1 and why in store.warnings[0]
    assert store.get("k", shapes) is None and len(store.warnings) == 1  # dropped, and said once


def test_an_inline_text_entry_read_as_arrays_is_a_miss(store):
    store._cache.set("a:k", "not arrays")
    assert store.get("k") is None and "text where arrays belong" in store.warnings[0]


# ------------------------------------------------------------------------------------------ saved results


def skip_result(ratio: float = 3.31):
    """A real result dataclass with arrays, a float field, lists and an optional array."""
    from vitlab.analyses.skips import SkipResult

    r = np.full((2, 3), ratio)
    return SkipResult(model="m", family="vit", layers=["blocks.0.attn", "blocks.0.mlp"], ratio=r, cosine=r / 10,
                      prefix=1, images=8, identity_err=np.zeros(2), ratio_lo=r - 1, ratio_hi=r + 1)


def test_an_edited_number_is_a_miss_not_an_answer(store):
    key = saved.result_key("t", 1)
    assert saved.save(store, key, skip_result())
    assert saved.load(store, key).ratio[0, 0] == 3.31
    arrays = store.get(key)
    name = next(k for k, a in arrays.items() if a.dtype == np.float64 and np.all(a == 3.31))
    arrays[name] = np.where(arrays[name] == 3.31, 33.14, arrays[name])  # a valid zip: only the checksum can tell
    store.put(key, arrays)
    assert saved.load(store, key) is None
    assert "does not match its checksum" in store.warnings[0]
    assert store.get(key) is None  # dropped: recomputed and saved again by the caller


def test_an_edited_number_in_the_tree_is_a_miss(store):
    key = saved.result_key("t", 2)
    saved.save(store, key, skip_result())
    arrays = store.get(key)
    tree = bytes(arrays[saved.TREE]).replace(b'"images":8', b'"images":80')
    assert tree != bytes(arrays[saved.TREE])
    store.put(key, {**arrays, saved.TREE: np.frombuffer(tree, dtype=np.uint8)})
    assert saved.load(store, key) is None


def test_an_entry_without_a_checksum_is_a_miss(store):
    key = saved.result_key("t", 3)
    arrays = saved.encode(skip_result())
    del arrays[saved.CHECKSUM]  # as an older vitlab saved it
    store.put(key, arrays)
    assert saved.load(store, key) is None and "without its checksum" in store.warnings[0]


def plant(store: Store, key: str, value) -> None:
    """Save ``value`` as an attacker with write access would: well formed, with a correct checksum."""
    store.put(key, saved.encode(value))


@pytest.mark.parametrize("field, value, why", [
    ("ratio", "3.31", "SkipResult.ratio holds a str"),  # a string where a float array belongs
    ("ratio", [[3.31]], "SkipResult.ratio holds a list"),
    ("images", "8", "SkipResult.images holds a str"),
    ("layers", [1, 2], "SkipResult.layers holds a list"),
    ("ratio_lo", {"a": 1}, "SkipResult.ratio_lo holds a dict"),
])
def test_a_wrong_typed_field_is_a_miss(store, field, value, why):
    key = saved.result_key("t", field, why)
    plant(store, key, dataclasses.replace(skip_result(), **{field: value}))
    assert saved.load(store, key) is None
    assert why in store.warnings[0], store.warnings


def test_another_shape_or_top_level_type_is_a_miss(store):
    from vitlab.analyses.skips import SkipReport, SkipResult

    report = SkipReport(results=[skip_result()], info=vitlab.RunInfo())
    key = saved.result_key("report")
    plant(store, key, report)
    assert isinstance(saved.load(store, key, expect=SkipReport), SkipReport)  # the real thing loads
    assert saved.load(store, key, expect=SkipResult) is None  # another top-level type
    assert "where a SkipResult belongs" in store.warnings[0]
    plant(store, key, [report])
    assert saved.load(store, key, expect=SkipReport) is None
    short = dataclasses.replace(skip_result(), ratio=np.ones((1, 3)))  # 2 layers, 1 row of ratios
    plant(store, key, SkipReport(results=[short], info=vitlab.RunInfo()))
    assert saved.load(store, key) is None  # its own table cannot be drawn
    plant(store, key, (report, vitlab.RunInfo()))
    assert saved.load(store, key, expect=(SkipReport, vitlab.RunInfo)) is not None
    assert saved.load(store, key, expect=(SkipReport, SkipReport)) is None


def test_the_tour_and_a_cka_report_pass_their_own_checks(store, tiny_vit, fmnist_source):
    """Real results conform to their annotations (a check that refused them would recompute every visit)."""
    rep = vitlab.run.cka([tiny_vit, tiny_vit], fmnist_source, vitlab.CKAOptions(images=16, batch_size=8),
                         vitlab.Run(store=Store(None), bootstrap=20))
    key = saved.result_key("cka")
    assert saved.save(store, key, rep)
    back = saved.load(store, key, expect=type(rep))
    assert back is not None and store.warnings == []
    np.testing.assert_array_equal(back.pair(0, 1).cka, rep.pair(0, 1).cka)


# ------------------------------------------------------------------------------------------ the app

APP = ROOT / "app"
pytest.importorskip("streamlit")


SETTINGS = {"lab.model_a": "zoo:vit-cls", "lab.model_b": "zoo:resnet", "lab.source": "fashion-mnist:test",
            "lab.images": 16, "lab.batch_size": 8}


def app_session():
    """A new browser session on the CKA page (nothing in its memory; the disk cache as it is)."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(APP / "Home.py"), default_timeout=600)
    for k, v in SETTINGS.items():
        at.session_state[k] = v
    at.run()
    at.switch_page("views/similarity.py").run()
    assert not at.exception, [e.message for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


def tamper_saved(directory: Path) -> int:
    """Every saved result in the cache at ``directory`` replaced by a well-formed, checksummed one whose CKA matrices
    are a string (the page's heatmap would die on it: "could not convert string to float"); returns how many."""
    store = Store(directory)
    n = 0
    for key in [k[2:] for k in store._cache.iterkeys() if k.startswith("a:")]:
        arrays = store.get(key)
        if arrays is None or saved.CHECKSUM not in arrays:
            continue  # a per-batch statistic
        report = saved.decode(arrays)
        if not isinstance(report, vitlab.run.CKAReport):
            continue  # the page's other results (sensitivity)
        for r in report.results.values():
            r.cka = np.array2string(r.cka)
        store.put(key, saved.encode(report))
        n += 1
    store.close()
    return n


def caption(at) -> str:
    return " ".join(c.value for c in at.caption)


@pytest.mark.usefixtures("app_cache")
def test_a_planted_saved_result_is_recomputed_and_the_page_renders():
    import lab

    first = app_session()
    directory = lab.store().directory
    for restart in (False, True):
        assert tamper_saved(directory) == 1
        if restart:  # a restarted server: a new store object, nothing in memory
            lab.store.clear()
        at = app_session()
        assert "its saved result was unreadable (Status says why) and was recomputed" in caption(at)
        assert at.dataframe[0].value.equals(first.dataframe[0].value) if at.dataframe else True
        at.run()  # the next run's status (drawn before the page) names it, once
        status = [w.value for w in at.sidebar.warning]
        assert sum("unreadable saved results are recomputed" in w for w in status) == 1, status
        assert "SKIP" not in status[0] and "CKAResult.cka holds a str" in " ".join(status)
    again = app_session()  # the recomputed result replaced the planted one
    assert "result from the disk cache" in caption(again)


# ------------------------------------------------------------------------------------------ settings


@pytest.mark.parametrize("var, text, words", [
    ("VITLAB_IMAGES", "abc", "VITLAB_IMAGES='abc' is not a whole number"),
    ("VITLAB_BATCH_SIZE", "8x", "VITLAB_BATCH_SIZE='8x' is not a whole number"),
    ("VITLAB_IMAGES", "2", "VITLAB_IMAGES='2' is outside 4 to 100000"),
    ("VITLAB_DEVICE", "gpu", "VITLAB_DEVICE='gpu' is not one of auto, cpu, cuda"),
])
def test_a_bad_setting_is_named_on_the_page_and_the_default_used(monkeypatch, var, text, words):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv(var, text)
    at = AppTest.from_file(str(APP / "Home.py"), default_timeout=300)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    errors = [e.value for e in at.sidebar.error]
    assert any(words in e for e in errors), errors
    assert at.session_state["lab.images"] == 64 and at.session_state["lab.batch_size"] == 16


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_server_starts_with_bad_settings(tmp_path):
    """``vitlab app``'s command (app/serve.py, whose warm start imports the settings) answers its health check."""
    from vitlab.cli import app_command

    port = free_port()
    env = {**os.environ, "VITLAB_IMAGES": "abc", "VITLAB_BATCH_SIZE": "8x", "VITLAB_WARMUP": "0",
           "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    cmd = app_command(["--server.port", str(port), "--server.address", "127.0.0.1", "--server.headless", "true",
                       "--browser.gatherUsageStats", "false"])
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline, ok = time.time() + 120, False
        while time.time() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
                    ok = r.status == 200
                    break
            except OSError:
                time.sleep(0.5)
        assert ok and proc.poll() is None, f"the server did not start: {proc.poll()}"
    finally:
        proc.terminate()
        try:
            out = proc.communicate(timeout=20)[0]
        except subprocess.TimeoutExpired:
            proc.kill()
            out = proc.communicate()[0]
    assert "Traceback" not in out, out[-3000:]


# ------------------------------------------------------------------------------------------ per-batch statistics


def test_planted_grams_and_batch_records_are_recomputed_by_a_run(tmp_path, tiny_vit, fmnist_source):
    """A run that finds Grams of another layout (one tap too many, a string) or batch records of other types
    recomputes them, and its CKA is the one a clean run gives."""
    opts = vitlab.CKAOptions(images=16, batch_size=8)
    clean = vitlab.run.cka([tiny_vit, tiny_vit], fmnist_source, opts, vitlab.Run(store=Store(None), bootstrap=0))
    store = Store(tmp_path / "cache", 1)
    vitlab.run.cka([tiny_vit, tiny_vit], fmnist_source, opts, vitlab.Run(store=store, bootstrap=0))
    keys = [k for k in store._cache.iterkeys()]
    grams = [k[2:] for k in keys if k.startswith("a:")]
    assert len(grams) == 2  # one per batch (the same model twice)
    L = store.get(grams[0])["grams"].shape[0]
    store.put(grams[0], {"grams": np.zeros((L + 1, 8, 8), np.float32)})  # another tap set's shape
    store.put(grams[1], {"grams": np.full((L, 8, 8), "0.5")})  # a string where floats belong
    for k in (k[2:] for k in keys if k.startswith("j:")):
        store.put_json(k, {"ids": [1, 2], "labels": "x", "skipped": [[1]], "notices": []})
    again = vitlab.run.cka([tiny_vit, tiny_vit], fmnist_source, opts, vitlab.Run(store=store, bootstrap=0))
    np.testing.assert_allclose(again.pair(0, 1).cka, clean.pair(0, 1).cka, rtol=1e-6)
    assert again.info.batches_computed == 2
    assert len(store.warnings) == 1 and "unreadable cache entries are recomputed" in store.warnings[0]
    third = vitlab.run.cka([tiny_vit, tiny_vit], fmnist_source, opts, vitlab.Run(store=store, bootstrap=0))
    assert third.info.batches_from_cache == 2  # the recomputed entries replaced the planted ones


def test_the_cli_goes_on_past_a_fifo_and_says_so_once(tmp_path):
    """``vitlab cka`` with a FIFO in place of a cached Gram's value file: finishes (no hang), recomputes that batch,
    and says so in one line on stderr and in run.json."""
    env = {**os.environ, "VITLAB_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    cmd = [sys.executable, "-m", "vitlab", "cka", "-m", "test_vit@random:0", "-d", "fashion-mnist:test", "-n", "128",
           "-b", "64", "--bootstrap", "0", "--workers", "0"]
    first = subprocess.run(cmd + ["--out", str(tmp_path / "a")], env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    files = sorted((tmp_path / "cache").glob("[0-9a-f][0-9a-f]/[0-9a-f][0-9a-f]/*.val"))
    assert len(files) == 2, files  # one Gram entry per batch, each in a value file
    files[0].unlink()
    os.mkfifo(files[0])
    try:
        second = subprocess.run(cmd + ["--out", str(tmp_path / "b")], env=env, capture_output=True, text=True,
                                timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("vitlab cka hung on a FIFO in the cache")
    assert second.returncode == 0, second.stderr[-2000:]
    assert second.stderr.count("unreadable cache entries are recomputed") == 1, second.stderr[-2000:]
    record = json.loads((tmp_path / "b" / "run.json").read_text())
    assert record["batches_computed"] == 1 and record["batches_from_cache"] == 1
    assert len(record["cache_warnings"]) == 1 and "not a regular file" in record["cache_warnings"][0]
    tables = sorted((tmp_path / "a").glob("*.csv"))
    assert tables
    for f in tables:  # the recomputed batch gives the same numbers
        assert (tmp_path / "b" / f.name).read_text() == f.read_text(), f.name
