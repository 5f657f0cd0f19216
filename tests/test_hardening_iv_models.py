"""Issue 46 (Hardening IV), the model side: a model spec is someone else's hand.

1. every failure of a model spec is a VitlabError in words (the CLI: one line, exit 2), never a traceback;
2. a model is sized on the meta device and refused, before anything is built, when it does not fit the free memory
   or the models budget (VITLAB_MODELS_GB);
3. HF_HUB_OFFLINE=1 / VITLAB_OFFLINE=1: no socket is ever opened;
4. --out never writes over a file vitlab did not write;
5. `vitlab app` passes SIGTERM/SIGINT on to its Streamlit child and exits with it; no orphan keeps the port.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest

import vitlab
from vitlab import cli
from vitlab.errors import VitlabError
from vitlab.inputs import budget, hub, models

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))  # test_hardening_ii's one-CSV row
from test_hardening_ii import _tiny, tiny  # noqa: E402, F401 - the fixture

GIB = 2**30


# ------------------------------------------------------------------------------------------ 1. spec failures

SPEC_FAILURES = [
    ("test_vit.badtag@random", "timm knows no pretrained tag 'badtag' for test_vit"),
    ("test_vit.r16_in1k@random", "did you mean test_vit.r160_in1k"),
    ("resnet10t.a1_in1k", "did you mean resnet10t.c3_in1k"),  # pretrained, a tag timm does not know
    ("test_vit.a/b@random", "looks like a hub repository or a path"),
    ("hf-hub:timm/vit_base_patch16_224.augreg_in21k", "looks like a hub repository or a path"),
    ("test_vit@random:18446744073709551616", "from 0 to 18446744073709551615"),  # 2**64: torch.manual_seed overflows
    ("test_vit@random:" + "9" * 4000, "from 0 to 18446744073709551615"),  # int() of 4300+ digits fails
    ("test_vit@random:\u00b2", "from 0 to"),  # '²'.isdigit() is True; int('²') fails
    ("test_vit" + "x" * 5000, "characters long"),
    ("test_vitt@random", "unknown model 'test_vitt'"),
    ("test_vit.@random", "is not a timm name"),
]


@pytest.mark.parametrize("spec,words", SPEC_FAILURES, ids=[s[:40] for s, _ in SPEC_FAILURES])
def test_1_every_spec_failure_is_a_vitlab_error_in_words(spec, words):
    for call in (models.load, models.size):  # loading, and sizing for the app's "what would this cost"
        with pytest.raises(VitlabError) as e:
            call(spec)
        assert words in str(e.value)
        assert len(str(e.value)) < 700 and "\n" not in str(e.value)  # a 5000-character spec is cut when shown


def test_1_the_cli_prints_the_message_and_exits_2(capfd):
    for spec in ("test_vit.badtag@random", "test_vit.a/b@random", "test_vit@random:18446744073709551616"):
        assert cli.main(["taps", "-m", spec, "--device", "cpu"]) == 2
        err = capfd.readouterr().err
        assert err.startswith("vitlab: error: ") and err.count("\n") == 1 and "Traceback" not in err


def test_1_the_largest_seed_torch_takes_still_loads():
    m = models.load(f"test_vit@random:{2**64 - 1}", "cpu")
    assert m.spec.weights == f"random:{2**64 - 1}"


def test_1_any_timm_failure_while_building_names_the_spec(monkeypatch):
    import timm

    def broken(name, **kw):
        raise KeyError("num_features")

    monkeypatch.setattr(timm, "create_model", broken)
    models._size.cache_clear()
    with pytest.raises(VitlabError, match=r"timm cannot build 'resnet10t' \(KeyError"):
        models.load("resnet10t@random:5", "cpu")
    models._size.cache_clear()


# ------------------------------------------------------------------------------------------ 2. size before building


def test_2_size_on_the_meta_device_is_the_built_model_and_cached():
    import timm
    import torch

    for spec in ("test_vit@random:3", "zoo:vit-cls", "zoo:resnet@random:1", "resnet10t@random"):
        m = models.load(spec, "cpu")
        tensors = [*m.model.parameters(), *m.model.buffers()]
        assert models.size(spec) == models.ModelSize(sum(p.numel() for p in m.model.parameters()),
                                                      sum(t.numel() * t.element_size() for t in tensors))
    before = models._size.cache_info()
    models.load("test_vit@random:3", "cpu")
    models.size("test_vit@random:3")
    after = models._size.cache_info()
    assert after.misses == before.misses and after.hits >= before.hits + 2  # sized once per spec
    # sizing on the meta device takes nothing from the seeded initialisation
    torch.manual_seed(3)
    ref = timm.create_model("test_vit", pretrained=False).state_dict()
    got = models.load("test_vit@random:3", "cpu").model.state_dict()
    assert all(torch.equal(ref[k], got[k]) for k in ref)


def _no_real_build(monkeypatch) -> list:
    """timm.create_model that refuses to build anywhere but on the meta device."""
    import timm
    import torch

    real, built = timm.create_model, []

    def create(name, *a, **k):
        if torch.empty(0).device.type != "meta":
            built.append(name)
            raise AssertionError(f"{name} was built for real")
        return real(name, *a, **k)

    monkeypatch.setattr(timm, "create_model", create)
    return built


def test_2_a_model_that_does_not_fit_is_refused_before_anything_is_built(monkeypatch):
    built = _no_real_build(monkeypatch)
    monkeypatch.setattr(budget, "free_bytes", lambda: int(21.3 * GIB))
    monkeypatch.setenv("VITLAB_MODELS_GB", "11.7")
    with pytest.raises(VitlabError) as e:
        vitlab.load("vit_7b_patch16_dinov3@random", "cpu")
    text = str(e.value)
    assert text.startswith("vit_7b_patch16_dinov3@random has 6.7 B parameters (25.0 GiB in float32)")
    assert "this machine has 21.3 GiB free" in text and "(VITLAB_MODELS_GB=11.7) leaves 11.7 GiB" in text
    assert "pick a smaller model" in text and built == []


def test_2_free_memory_alone_refuses_twice_the_weights(monkeypatch):
    built = _no_real_build(monkeypatch)
    size = models.size("resnet10t@random")
    monkeypatch.setattr(budget, "free_bytes", lambda: int(1.5 * size.bytes))  # the weights once, not twice
    with pytest.raises(VitlabError, match="this machine has .* free: pick a smaller model or free memory"):
        vitlab.load("resnet10t@random", "cpu")
    assert built == []


def test_2_the_budget_counts_what_is_already_loaded(monkeypatch):
    monkeypatch.setenv("VITLAB_MODELS_GB", str(10 / 1024))  # 10 MiB
    one = models.size("zoo:vit-cls").bytes  # 0.8 MiB
    assert models.load("zoo:vit-cls", "cpu").label == "zoo:vit-cls"
    with pytest.raises(VitlabError, match=r"beside the 9.5 MiB loaded models already hold.*unload a model"):
        models.load("zoo:vit-cls", "cpu", loaded_bytes=int(9.5 * 2**20))
    assert models.check_fits("zoo:vit-cls", "cpu", loaded_bytes=10 * 2**20 - one) == models.size("zoo:vit-cls")


def test_2_the_cli_sizes_all_its_models_together_before_loading_one(monkeypatch, capfd, tmp_path):
    def no_load(*a, **k):
        raise AssertionError("a model was loaded before all were sized")

    monkeypatch.setattr(models, "load", no_load)
    monkeypatch.setenv("VITLAB_MODELS_GB", str(30 / 1024))  # each of the two fits alone (20.8 MiB), not together
    assert cli.main(["cka", "-m", "resnet10t@random", "-m", "resnet10t@random:1", "-d", "samples", "--device", "cpu",
                     "-o", str(tmp_path / "o")]) == 2
    err = capfd.readouterr().err
    assert "2 models together (resnet10t@random, resnet10t@random:1) have 10.9 M parameters" in err


@pytest.mark.parametrize("value", ["abc", "0", "-1", "nan", "inf", "1e300"])
def test_2_a_bad_models_budget_is_one_line(value, monkeypatch, capfd):
    monkeypatch.setenv("VITLAB_MODELS_GB", value)
    assert cli.main(["taps", "-m", "zoo:vit-cls", "--device", "cpu"]) == 2
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and f"VITLAB_MODELS_GB={value!r}" in err


def test_2_the_default_budget_is_half_the_machine():
    total = budget.total_bytes()
    assert total and budget.models_budget_gb("") == pytest.approx(total / 2 / GIB)


# ------------------------------------------------------------------------------------------ 3. offline: no socket


@pytest.fixture
def no_network(monkeypatch):
    """Every attempt to open a connection is recorded (and fails as an unreachable network would)."""
    calls = []

    def refuse(*a, **k):
        calls.append(a)
        raise OSError("network use in an offline test")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(hub, "_REACHABLE", None)  # not answered yet in this process
    return calls


UNCACHED = "vit_huge_patch14_224.orig_in21k"  # 2.4 GiB on the hub, never in a test machine's cache


@pytest.mark.parametrize("variable", ["HF_HUB_OFFLINE", "VITLAB_OFFLINE"])
def test_3_offline_means_no_lookup_at_all(variable, no_network, monkeypatch, tmp_path):
    for v in ("HF_HUB_OFFLINE", "VITLAB_OFFLINE"):
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv(variable, "1")
    monkeypatch.setenv("VITLAB_DATA_DIR", str(tmp_path / "datasets"))  # no CIFAR on disk
    monkeypatch.setattr(budget, "free_bytes", lambda: 64 * GIB)  # the 2.4 GiB model fits on any test machine
    monkeypatch.setenv("VITLAB_MODELS_GB", "64")
    assert hub.offline() and not hub.hub_reachable()
    assert models.needs_download(UNCACHED)
    assert models.weights_status(UNCACHED) == f"not cached; offline ({variable}=1): no download"
    assert models.download_weights(UNCACHED) is False
    t0 = time.perf_counter()
    with pytest.raises(VitlabError, match=rf"not in the local Hugging Face cache and this process is offline "
                                          rf"\({variable}=1\): nothing is downloaded"):
        models.load(UNCACHED, "cpu")
    assert time.perf_counter() - t0 < 30  # at once, not after ~48 s of retries (a generous bound for a busy machine)
    with pytest.raises(VitlabError, match="this machine is offline"):
        vitlab.open_source("cifar10:test")
    assert no_network == []  # not one connection was attempted


def test_3_online_needs_download_still_opens_no_socket(no_network, monkeypatch):
    """The app's question "would this spec need a download?" is answered from the local caches alone."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("VITLAB_OFFLINE", raising=False)
    assert models.needs_download(UNCACHED) and models.weights_status(UNCACHED) == "download needed"
    assert not models.needs_download("zoo:vit-cls") and not models.needs_download(f"{UNCACHED}@random")
    assert no_network == []


# ------------------------------------------------------------------------------------------ 4. --out


def test_4_a_user_file_named_as_an_output_survives_and_the_run_is_refused(tmp_path, capfd):
    out = tmp_path / "o"
    out.mkdir()
    mine = b"model,layer,my own numbers\n1,2,3\n"
    (out / "cka.csv").write_bytes(mine)
    code = cli.main(["cka", "-m", "zoo:vit-cls", "-m", "zoo:resnet", "-d", "fashion-mnist:test", "-n", "8", "-b", "8",
                     "--bootstrap", "0", "--no-cache", "--device", "cpu", "-o", str(out)])
    err = capfd.readouterr().err
    assert code == 2 and (out / "cka.csv").read_bytes() == mine
    assert "'cka.csv' is already there and is a file vitlab did not write" in err and "choose another --out" in err
    assert sorted(p.name for p in out.iterdir()) == ["cka.csv"]  # nothing else written either


def test_4_a_users_run_json_is_refused_before_any_model_runs(tiny, tmp_path, capfd, monkeypatch):  # noqa: F811
    monkeypatch.setattr(models, "load", lambda *a, **k: pytest.fail("a model was loaded"))
    out = tmp_path / "o"
    out.mkdir()
    (out / "run.json").write_text('{"mine": true}')
    assert _tiny(out, 1) == 2
    assert (out / "run.json").read_text() == '{"mine": true}' and "'run.json' is already there" in capfd.readouterr().err


def test_4_vitlab_writes_over_its_own_files_but_not_once_they_are_edited(tiny, tmp_path, capfd):  # noqa: F811
    out = tmp_path / "o"
    assert _tiny(out, 2) == 0
    assert _tiny(out, 2) == 0  # its own files, unchanged: replaced
    (out / "pair_1.csv").write_text("edited by hand\n")
    assert _tiny(out, 2) == 2
    assert (out / "pair_1.csv").read_text() == "edited by hand\n"
    assert "'pair_1.csv' is already there and was changed since vitlab wrote it" in capfd.readouterr().err
    assert _tiny(out, 1) == 0  # the edited pair_1 is not an output of this run: kept, and the run goes on
    assert (out / "pair_1.csv").read_text() == "edited by hand\n"


def test_4_a_run_stopped_half_way_leaves_its_files_recorded(tmp_path):
    from vitlab.inputs.outdir import OutputNames, check_free, remember, write_file

    (tmp_path / "b.csv").write_text("the user's")
    names = OutputNames(tmp_path)
    write_file(names.path("a", "csv"), "1\n")
    with pytest.raises(VitlabError, match="'b.csv' is already there"):
        names.path("b", "csv")
    remember(tmp_path, names.given)
    check_free(tmp_path, [tmp_path / "a.csv"])  # vitlab's own now: the next run may replace it
    with pytest.raises(VitlabError):
        check_free(tmp_path, [tmp_path / "b.csv"])


# ------------------------------------------------------------------------------------------ 5. vitlab app: signals


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie nobody reaped yet counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _wait_gone(pid: int, seconds: float) -> bool:
    deadline = time.time() + seconds
    while time.time() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return not _alive(pid)


CHILD = textwrap.dedent("""
    import os, signal, sys, time
    log = sys.argv[1]
    def stop(signum, frame):
        open(log, "a").write(f"got {signum}\\n")
        sys.exit(0)
    if sys.argv[2] == "handles":
        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
    open(log, "a").write(f"pid {os.getpid()}\\n")
    while True:
        time.sleep(0.05)
""")


def _serve(tmp_path, mode: str) -> tuple[subprocess.Popen, int, Path]:
    """``vitlab.cli.app.serve`` in a process of its own, over a small child; (parent, child pid, the child's log)."""
    log = tmp_path / "child.log"
    code = ("import sys; from vitlab.cli.app import serve; "
            f"sys.exit(serve([sys.executable, '-c', {CHILD!r}, {str(log)!r}, {mode!r}]))")
    parent = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.time() + 60
    while time.time() < deadline and not (log.exists() and "pid" in log.read_text()):
        time.sleep(0.05)
    time.sleep(0.2)  # the parent's handlers are set right after the child starts
    return parent, int(log.read_text().split()[1]), log


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_5_serve_passes_the_signal_on_and_exits_when_the_child_does(sig, tmp_path):
    parent, child, log = _serve(tmp_path, "handles")
    try:
        parent.send_signal(sig)
        assert parent.wait(timeout=15) == 0  # the child's own status
        assert f"got {int(sig)}" in log.read_text() and _wait_gone(child, 5)
    finally:
        _end(parent, child)


def _end(parent: subprocess.Popen, child: int) -> None:
    """Whatever a failing test left running, ended by its pid."""
    if parent.poll() is None:
        parent.kill()
        parent.wait()
    if _alive(child):
        os.kill(child, signal.SIGKILL)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_5_a_killed_vitlab_takes_its_server_with_it(tmp_path):
    parent, child, _ = _serve(tmp_path, "default")
    try:
        parent.kill()
        parent.wait(timeout=15)
        assert _wait_gone(child, 10)
    finally:
        _end(parent, child)


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads the child's pid from /proc")
def test_5_vitlab_app_stops_on_sigterm_and_frees_the_port(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "VITLAB_WARMUP": "0", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "vitlab", "app", "--server.port", str(port), "--server.address",
                             "127.0.0.1", "--server.headless", "true"], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    server: list[int] = []
    try:
        deadline, up = time.time() + 120, False
        while time.time() < deadline and proc.poll() is None and not up:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
                    up = r.status == 200
            except OSError:
                time.sleep(0.3)
        assert up, "the server did not start"
        server += _children(proc.pid)
        assert len(server) == 1
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
        assert _wait_gone(server[0], 5)
        with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
            pass
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in server + _children(proc.pid):  # never leave a server behind, even when the test fails
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert "Traceback" not in proc.stderr.read()
