"""torch.distributed scale-out on CPU (gloo, 2 processes on localhost): results equal the single-process ones.

Three launches, each a few tiny processes: the ``cka`` command under ``torchrun`` (5 usable batches, an odd
number, the short last batch joining the one before it, so the ranks get unequal shares), the accumulator
reductions with an abrupt death of one rank, and the ``cka`` command with one rank failing on purpose.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time

import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.distributed

DATA = ["-d", "fashion-mnist:test", "-n", "22", "-b", "4", "--device", "cpu"]  # 4 batches of 4 + one of 6 (the short
# last one of 2 joins the one before it: issue 24), so the ranks get unequal shares
MODELS = ["-m", "test_vit@random", "-m", "test_vit@random:1"]  # two models: cross-model pairs too


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR",
                                                             "MASTER_PORT")}
    return dict(env, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", VITLAB_DIST_TIMEOUT="60", **extra)


def _launch_pair(script: str, args: list[str], timeout: float = 90, **extra) -> list[tuple[int, str, float]]:
    """Start ranks 0 and 1 of a 2-process group by hand (the env:// variables torchrun would set)."""
    port, t0 = _free_port(), time.perf_counter()
    procs = [subprocess.Popen([sys.executable, script, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, env=_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2",
                                                  RANK=str(r), LOCAL_RANK=str(r), **extra))
             for r in range(2)]
    out = []
    for p in procs:
        try:
            text, _ = p.communicate(timeout=max(1.0, timeout - (time.perf_counter() - t0)))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail(f"a rank did not finish within {timeout} s: the failure path hangs")
        out.append((p.returncode, text, time.perf_counter() - t0))
    return out


def _cka_frame(folder) -> pd.DataFrame:
    return pd.read_csv(folder / "cka.csv").sort_values(["model_a", "layer_a", "model_b", "layer_b"],
                                                      ignore_index=True)


def test_cka_under_torchrun_equals_single_process_and_fills_the_cache(tmp_path):
    from vitlab import cli

    cache, out2 = tmp_path / "cache2", tmp_path / "out2"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_addr=127.0.0.1",
           f"--master_port={_free_port()}", "-m", "vitlab", "cka", *MODELS, *DATA, "--cache-dir", str(cache),
           "-o", str(out2)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=150, env=_env(), check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("CKA over 22 images") == 1  # rank 0 alone reports and writes
    run2 = json.loads((out2 / "run.json").read_text())
    assert (run2["processes"], run2["images"], run2["batches_computed"], run2["batches_from_cache"]) == (2, 22, 5, 0)
    assert not run2["dropped_batches"]  # no image is left out for want of company

    # a later single-process run finds every batch that either rank cached
    assert cli.main(["cka", *MODELS, *DATA, "--cache-dir", str(cache), "-o", str(tmp_path / "out1")]) == 0
    run1 = json.loads((tmp_path / "out1" / "run.json").read_text())
    assert (run1["batches_computed"], run1["batches_from_cache"]) == (0, 5)
    assert cli.main(["cka", *MODELS, *DATA, "--no-cache", "-o", str(tmp_path / "out0")]) == 0

    ref, two, cached = _cka_frame(tmp_path / "out0"), _cka_frame(out2), _cka_frame(tmp_path / "out1")
    assert len(ref) == len(two) == 4 * 12 * 12  # (2 models)^2 ordered pairs x 12 x 12 taps
    assert (ref[["model_a", "layer_a", "model_b", "layer_b"]] == two[["model_a", "layer_a", "model_b", "layer_b"]]
            ).all().all()
    np.testing.assert_allclose(two["cka"], ref["cka"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(cached["cka"], ref["cka"], rtol=0, atol=1e-12)


REDUCE_WORKER = textwrap.dedent('''
    import json, os, sys
    import numpy as np
    from vitlab.engine import dist
    from vitlab.stats.cka import MinibatchCKA, centred
    from vitlab.errors import VitlabError
    from vitlab.engine.run import RunInfo

    class Extremes:
        """A statistic that is not a sum (largest value seen): it must go through merge, not a summed state."""
        def __init__(self): self.top, self.n = np.full(3, -np.inf), 0
        def update(self, x): self.top, self.n = np.maximum(self.top, x.max(0)), self.n + len(x)
        def merge(self, o): self.top, self.n = np.maximum(self.top, o.top), self.n + o.n; return self
        def state(self): return {"top": self.top, "n": np.array(self.n)}
        def load_state(self, s): self.top, self.n = np.array(s["top"]), int(s["n"]); return self

    def batches():
        rng = np.random.default_rng(0)
        for n in (6, 5, 7, 4, 6):  # five batches of unequal sizes: ranks take 3 and 2
            x = rng.normal(size=(n, 8)) + 5.0
            feats = [x, np.tanh(x @ rng.normal(size=(8, 6))), x[:, :3] ** 2]
            yield np.stack([f @ f.T for f in feats]), x[:, :3], rng.uniform(0, 50, size=(2, 2, 3, n))

    def fill(accs, chosen):
        for grams, x, dist_ in chosen:
            c = centred(grams)
            accs["cka"].update(c)
            accs["cross"].update(c[:2], c[1:])
            accs["extremes"].update(x)
            if "attn" in accs:
                accs["attn"].update({"raw": dist_[0], "renorm": dist_[1]})

    def make():
        accs = {"cka": MinibatchCKA(list("abc"), list("abc")), "cross": MinibatchCKA(list("ab"), list("bc")),
                "extremes": Extremes()}
        from vitlab.analyses.attention import AttentionDistanceAccumulator

        accs["attn"] = AttentionDistanceAccumulator([0, 1], 3)
        return accs

    def main():
        ctx = dist.context()
        all_batches = list(batches())
        mine, single = make(), make()
        fill(mine, all_batches[ctx.rank::ctx.world])
        fill(single, all_batches)
        ctx.reduce(mine)
        info = RunInfo(ctx.rank + 1, 2 * ctx.rank, [("shared.png", "x"), (f"r{ctx.rank}.png", "y")],
                       [f"batch {9 - 4 * ctx.rank}: 2 readable image(s)"], float(ctx.rank + 1))
        ctx.reduce_info(info)
        gathered = ctx.gather(ctx.rank * 10)
        if ctx.is_main:
            out = {k: {"dist": {s: np.asarray(v).tolist() for s, v in mine[k].state().items()},
                       "single": {s: np.asarray(v).tolist() for s, v in single[k].state().items()}} for k in mine}
            out["info"] = {"computed": info.batches_computed, "cached": info.batches_from_cache,
                           "skipped": info.skipped_images, "dropped": info.dropped_batches, "seconds": info.seconds}
            out["gathered"] = gathered
            out["cka_values"] = [mine["cka"].compute().cka.tolist(), single["cka"].compute().cka.tolist()]
            open(sys.argv[1], "w").write(json.dumps(out))
        if ctx.rank == 1:
            import time; time.sleep(1.0)  # let rank 0 finish receiving, then vanish
            os._exit(3)  # dies without a word while rank 0 waits in a collective
        ctx.reduce(mine)

    try:
        with dist.guard():
            main()
    except VitlabError as e:
        print(f"vitlab: error: {e}", file=sys.stderr)
        sys.exit(2)
''')


def test_reductions_equal_single_process_and_a_dead_rank_stops_the_other(tmp_path):
    script, result = tmp_path / "reduce_worker.py", tmp_path / "reduced.json"
    script.write_text(REDUCE_WORKER)
    (rc0, log0, _), (rc1, _, _) = _launch_pair(str(script), [str(result)], timeout=80)
    got = json.loads(result.read_text())
    for name in ("cka", "cross", "extremes", "attn"):
        if name not in got:
            continue
        for key, ref in got[name]["single"].items():
            np.testing.assert_allclose(got[name]["dist"][key], ref, rtol=1e-13, atol=1e-12, err_msg=f"{name}.{key}")
    np.testing.assert_allclose(got["cka_values"][0], got["cka_values"][1], rtol=0, atol=1e-12)
    assert got["extremes"]["dist"]["n"] == 28  # every image counted once
    assert got["info"] == {"computed": 3, "cached": 2, "skipped": [["shared.png", "x"], ["r0.png", "y"],
                                                                   ["r1.png", "y"]],
                           "dropped": ["batch 5: 2 readable image(s)", "batch 9: 2 readable image(s)"], "seconds": 2.0}
    assert got["gathered"] == [0, 10]
    assert rc1 == 3
    assert rc0 == 2, log0
    assert "rank 0 of 2 stopped: all_gather across ranks failed" in log0


FAIL_WORKER = textwrap.dedent('''
    import os, sys
    import vitlab.inputs.data
    from vitlab import cli
    from vitlab.errors import VitlabError

    if os.environ["RANK"] == "1":
        def broken(text):
            raise VitlabError(f"data source '{text}': injected failure on this rank only")
        vitlab.inputs.data.open_source = broken
    sys.exit(cli.main(sys.argv[1:]))
''')


def test_a_failing_rank_stops_the_run_with_its_message(tmp_path):
    script = tmp_path / "fail_worker.py"
    script.write_text(FAIL_WORKER)
    (rc0, log0, _), (rc1, log1, _) = _launch_pair(
        str(script), ["cka", "-m", "test_vit@random", *DATA, "--no-cache", "-o", str(tmp_path / "out")], timeout=80)
    assert rc1 == 2, log1
    assert "vitlab: error: rank 1 of 2 failed: data source 'fashion-mnist:test': injected failure" in log1
    assert rc0 != 0, log0
    assert "rank 1 of 2 failed: data source 'fashion-mnist:test': injected failure" in log0
    assert "stopping rank 0 of 2" in log0
    assert not (tmp_path / "out" / "run.json").exists()


def test_one_process_is_a_no_op_context(monkeypatch):
    from vitlab.engine import dist
    from vitlab.stats.cka import MinibatchCKA

    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    ctx = dist.context()
    got = (ctx.distributed, ctx.is_main, ctx.shard, dist.shard(), dist.is_main())
    assert got == (False, True, (0, 1), (0, 1), True)
    acc = MinibatchCKA(["a"], ["a"])
    acc.update(np.ones((1, 4, 4)))
    before = {k: v.copy() for k, v in acc.state().items()}
    ctx.reduce({"x": acc})
    assert all(np.array_equal(before[k], v) for k, v in acc.state().items())
    assert ctx.gather(5) == [5]
    with dist.guard():
        pass
    assert dist._CONTEXT is None


@pytest.mark.parametrize("env, needle", [
    ({"WORLD_SIZE": "2", "RANK": "0"}, "MASTER_ADDR, MASTER_PORT is not: launch several processes with torchrun"),
    ({"WORLD_SIZE": "two"}, "WORLD_SIZE='two' must be a non-negative integer"),
    ({"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1", "VITLAB_DIST_TIMEOUT": "-3"},
     "VITLAB_DIST_TIMEOUT='-3' must be a positive number of seconds"),
    ({"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1", "VITLAB_DIST_BACKEND": "mpi"},
     "VITLAB_DIST_BACKEND='mpi': use nccl (GPUs) or gloo (CPU)"),
])
def test_bad_launch_settings_are_named(monkeypatch, env, needle):
    from vitlab.engine import dist
    from vitlab.errors import VitlabError

    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "VITLAB_DIST_TIMEOUT"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(VitlabError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        dist.context()
    assert dist._CONTEXT is None


def test_one_gpu_for_every_rank_is_refused(monkeypatch):
    from vitlab.engine import dist
    from vitlab.errors import VitlabError

    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    with pytest.raises(VitlabError, match="every rank of this machine on one GPU"):
        dist._device_for("cuda:1")
    assert dist._device_for("cpu") == "cpu"


SMALL = ["-d", "fashion-mnist:test", "-n", "14", "-b", "4", "--device", "cpu"]  # batches of 4, 4 and 6 (issue 24)
SUM_COMMANDS = {  # command arguments, CSV outputs
    "skip-ratio": (["-m", "test_vit@random", "-m", "test_resnet@random"], ["skip_ratio.csv", "skip_ratio_summary.csv"]),
    "localization": (["-m", "test_vit@random"], ["localization.csv", "localization_summary.csv"]),
    "compare-checkpoints": (["--pair", "test_vit@random", "test_vit@random:1"], ["checkpoints.csv"]),
}
# ranks among tied CKAs (Fashion-MNIST's blank border patches are identical) flip with float round-off
TIE_COLUMNS = {"argmax_position", "own_rank", "localized"}


def _assert_same_frames(got: pd.DataFrame, ref: pd.DataFrame, name: str) -> None:
    assert list(got.columns) == list(ref.columns) and len(got) == len(ref) > 0, name
    for col in (c for c in ref.columns if c not in TIE_COLUMNS):
        if pd.api.types.is_float_dtype(ref[col]):
            np.testing.assert_allclose(got[col], ref[col], rtol=0, atol=1e-9, err_msg=f"{name}: {col}")
        else:
            assert (got[col].astype(str) == ref[col].astype(str)).all(), f"{name}: {col}"


@pytest.mark.parametrize("command", list(SUM_COMMANDS))
def test_sum_commands_under_torchrun_equal_single_process(tmp_path, command):
    from vitlab import cli

    models, csvs = SUM_COMMANDS[command]
    out2, out1 = tmp_path / "two", tmp_path / "one"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_addr=127.0.0.1",
           f"--master_port={_free_port()}", "-m", "vitlab", command, *models, *SMALL, "--no-cache", "-o", str(out2)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=_env(), check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("over 14 images") == 1  # rank 0 alone reports and writes
    run2 = json.loads((out2 / "run.json").read_text())
    assert (run2["processes"], run2["batches_computed"]) == (2, 3)  # rank 0 two batches, rank 1 one
    assert not run2["dropped_batches"]
    assert cli.main([command, *models, *SMALL, "--no-cache", "-o", str(out1)]) == 0
    assert json.loads((out1 / "run.json").read_text())["processes"] == 1
    for name in csvs:
        _assert_same_frames(pd.read_csv(out2 / name), pd.read_csv(out1 / name), f"{command} {name}")


def test_probe_features_gathered_from_two_shards_equal_one_pass():
    from vitlab.analyses.probes import ProbeFeatures, _gather, few_shot_split
    from vitlab.engine.context import Run
    from vitlab.inputs.data import open_source
    from vitlab.inputs.models import load

    model, source = load("test_vit@random", "cpu"), open_source("fashion-mnist:test")
    split = few_shot_split(source, shots=1, test=8, seed=0)
    stat = ProbeFeatures(("blocks.0.resid_post",), ("gap",), 2)
    sent = []
    _gather(model, source, split, stat, 4, Run(shard=(1, 2), gather=lambda mine: sent.append(mine) or [mine]))
    two = _gather(model, source, split, stat, 4, Run(shard=(0, 2), gather=lambda mine: [mine, sent[0]]))
    one = _gather(model, source, split, stat, 4, Run())
    for part in ("train", "val", "test"):
        np.testing.assert_array_equal(two[1][part], one[1][part])
        for key, ref in one[0][part].items():
            np.testing.assert_allclose(two[0][part][key], ref, rtol=0, atol=1e-5)
    assert len(one[1]["test"]) == 8


# ---------------------------------------------------------------- every data-set analysis, with its intervals

# 80 images in batches of 16: 5 batches, so 2 ranks take 3 and 2 and 3 ranks take 2, 2 and 1
ZOO_DATA = ["-d", "fashion-mnist:test", "-n", "80", "-b", "16", "--device", "cpu", "--no-cache", "--bootstrap",
            "50", "--seed", "3", "--workers", "0"]
SPLIT = {  # command: its arguments (each a data-set analysis whose batches split over ranks)
    "cka": ["-m", "zoo:vit-cls", "-m", "zoo:resnet", "--permutations", "10"],  # intervals and permutation null
    "similarity": ["-m", "zoo:vit-cls", "-m", "zoo:resnet"],  # six measures, sketches, the agreement's ranks
    "compare-models": ["-m", "zoo:vit-cls", "-m", "zoo:resnet", "-m", "zoo:mixer"],
    "cka-sensitivity": ["-m", "zoo:vit-cls", "--other", "zoo:resnet", "--layer-a", "blocks.1.resid_post",
                        "--layer-b", "layer1.0"],
    "head-ablation": ["-m", "zoo:vit-cls", "--other", "zoo:resnet", "--draws", "2", "--k", "1"],
    "token-norms": ["-m", "zoo:vit-cls"],
    "localization": ["-m", "zoo:vit-cls"],
    "receptive-field": ["-m", "zoo:vit-cls", "-n", "24", "-b", "8"],  # the radii's intervals (3 batches)
    "tour": ["-m", "zoo:vit-cls", "-m", "zoo:resnet", "--rf-images", "24", "--probe-draws", "2", "--probe-shots",
             "2", "--probe-test", "40", "--permutations", "50"],
    "attribution": ["-m", "zoo:vit-cls", "-n", "20", "-b", "4", "--methods", "rollout,grad-rollout",
                    "--random-orders", "2", "--cell-px", "7"],  # 5 batches of 4 images
}


def _split_commands(out) -> list[list[str]]:
    # the command's own -n/-b come after the common ones: argparse keeps the last
    return [[name, *ZOO_DATA, *args, "-o", str(out / name)] for name, args in SPLIT.items()]


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    """Every command of SPLIT in this process (one torch thread, as each rank), tables only."""
    import torch

    from tests.dist_driver import run_commands

    out, threads = tmp_path_factory.mktemp("one"), torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run_commands(_split_commands(out))
    finally:
        torch.set_num_threads(threads)
    return out


def _torchrun_commands(tmp_path, processes: int, commands: list[list[str]], timeout: float) -> str:
    spec = tmp_path / "commands.json"
    spec.write_text(json.dumps(commands))
    driver = os.path.join(os.path.dirname(__file__), "dist_driver.py")
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={processes}",
           "--master_addr=127.0.0.1", f"--master_port={_free_port()}", driver, str(spec)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_env(), check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return done.stdout


def _assert_same_tables(got_dir, ref_dir) -> None:
    """Every CSV of the single-process run, and the same CSV of the torchrun run: numbers (point estimates,
    interval ends, p-values, ranks) within 1e-7, NaN in the same cells, text (verdicts, details) identical."""
    names = sorted(p.relative_to(ref_dir) for p in ref_dir.glob("*/*.csv"))
    assert len(names) >= 2 * len(SPLIT) - 1 and {n.parts[0] for n in names} == set(SPLIT)
    for name in names:
        ref, got = pd.read_csv(ref_dir / name), pd.read_csv(got_dir / name)
        assert list(got.columns) == list(ref.columns) and len(got) == len(ref), name
        for col in ref.columns:
            a, b = ref[col], got[col]
            if pd.api.types.is_numeric_dtype(a) and pd.api.types.is_numeric_dtype(b):
                np.testing.assert_allclose(b.to_numpy(float), a.to_numpy(float), rtol=0, atol=1e-7,
                                           err_msg=f"{name}: {col}")
            else:
                assert (b.fillna("<NA>").astype(str) == a.fillna("<NA>").astype(str)).all(), f"{name}: {col}"


def _interval_columns_present(ref_dir) -> None:
    """The comparison covers intervals: each command that reports them has them (finite) in its tables."""
    cka = pd.read_csv(ref_dir / "cka" / "cka.csv")
    assert {"cka_lo", "cka_hi", "p_null", "null_lo", "null_hi"} <= set(cka.columns)
    assert np.isfinite(cka[["cka_lo", "cka_hi", "p_null"]].to_numpy()).any()
    assert "radius50_lo" in pd.read_csv(ref_dir / "receptive-field" / "receptive_field_summary.csv")
    for name, cols in (("head-ablation/summary.csv", ["lo", "hi"]), ("attribution/faithfulness_summary.csv",
                                                                      ["lo", "hi"]),
                       ("tour/tour_intervals.csv", ["lo", "hi"])):
        assert np.isfinite(pd.read_csv(ref_dir / name)[cols].to_numpy()).any(), name


@pytest.mark.slow
def test_every_split_command_under_torchrun_equals_one_process(tmp_path, one_process):
    stdout = _torchrun_commands(tmp_path, 2, _split_commands(tmp_path), timeout=900)
    assert stdout.count("files in ") == len(SPLIT)  # rank 0 alone reports and writes each command
    for name in SPLIT:
        run = json.loads((tmp_path / name / "run.json").read_text())
        assert run["processes"] == 2, name
    _interval_columns_present(one_process)
    _assert_same_tables(tmp_path, one_process)


@pytest.mark.slow
def test_three_processes_and_five_batches_equal_one_process(tmp_path, one_process):
    stdout = _torchrun_commands(tmp_path, 3, _split_commands(tmp_path), timeout=900)
    assert stdout.count("files in ") == len(SPLIT)
    assert json.loads((tmp_path / "similarity" / "run.json").read_text())["batches_computed"] == 5  # 2 + 2 + 1
    _assert_same_tables(tmp_path, one_process)


BATCH_FAIL_WORKER = textwrap.dedent('''
    import os, sys
    import vitlab.engine.inflight
    from vitlab import cli

    real = vitlab.engine.inflight.forward_statistics

    def failing(loaded, x, todo, batch, amp=False):
        if os.environ["RANK"] == "1" and batch.index == 3:
            raise RuntimeError("injected failure in the forward")
        return real(loaded, x, todo, batch, amp)

    vitlab.engine.inflight.forward_statistics = failing
    sys.exit(cli.main(sys.argv[1:]))
''')


def test_a_rank_failing_at_a_batch_names_it_and_keeps_earlier_batches_cached(tmp_path):
    from vitlab import cli

    script, cache = tmp_path / "batch_fail_worker.py", tmp_path / "cache"
    script.write_text(BATCH_FAIL_WORKER)
    args = ["similarity", "-m", "zoo:vit-cls", "--measure", "cka,procrustes", "-d", "fashion-mnist:test", "-n", "64",
            "-b", "16", "--device", "cpu", "--workers", "0", "--cache-dir", str(cache)]
    (rc0, log0, _), (rc1, log1, _) = _launch_pair(str(script), [*args, "-o", str(tmp_path / "out")], timeout=80)
    assert rc1 != 0 and "rank 1 of 2 failed at batch 3: RuntimeError: injected failure in the forward" in log1, log1
    assert rc0 != 0 and "rank 1 of 2 failed at batch 3" in log0 and "stopping rank 0 of 2" in log0, log0
    assert not (tmp_path / "out" / "run.json").exists()
    # rank 1's batch 1 (and whatever rank 0 finished) stayed in the cache: one process now computes the rest
    assert cli.main([*args, "-o", str(tmp_path / "again")]) == 0
    again = json.loads((tmp_path / "again" / "run.json").read_text())
    assert again["batches_from_cache"] >= 1 and again["batches_from_cache"] + again["batches_computed"] == 4


def test_keyed_terms_of_two_shards_rebuild_one_process_bit_for_bit(monkeypatch):
    """The ordered gather behind every interval under torchrun, without processes: two shards' BootstrapCKA terms
    (with a permutation null) put back in batch order equal one process's sums, interval and null exactly."""
    from vitlab.engine import dist
    from vitlab.stats.cka import centred
    from vitlab.stats.evidence import BootstrapCKA

    rng = np.random.default_rng(1)
    batches = []
    for n in (6, 5, 7, 6, 8):
        x = rng.normal(size=(n, 5)) + 3.0
        batches.append((centred(np.stack([x @ x.T, np.tanh(x) @ np.tanh(x).T])),
                        centred(np.stack([(x[:, :2] ** 2) @ (x[:, :2] ** 2).T]))))
    one, shards = BootstrapCKA(["a", "b"], ["c"], permutations=4, seed=7), []
    for key, (ga, gb) in enumerate(batches):
        one.update(ga, gb, key=key)
    for rank in range(2):
        acc = BootstrapCKA(["a", "b"], ["c"], permutations=4, seed=7)
        for key in range(rank, len(batches), 2):
            acc.update(*batches[key], key=key)
        shards.append(acc)
    monkeypatch.setattr(dist, "gather_objects", lambda mine: [mine, [shards[1].keyed_terms()]])
    dist._gather_keyed_terms([shards[0]])  # rank 0 receives rank 1's batches 1 and 3
    got, ref = shards[0], one
    assert got.keys == [0, 1, 2, 3, 4] and (got.batches, got.images) == (ref.batches, ref.images)
    for k in ("xy", "xx", "yy"):
        assert np.array_equal(got.state()[k], ref.state()[k])  # added in the same order: the same bits
    e_got, e_ref = got.evidence(50, 3), ref.evidence(50, 3)
    for field in ("cka", "lo", "hi", "p_null", "null_lo", "null_hi"):
        assert np.array_equal(getattr(e_got, field), getattr(e_ref, field), equal_nan=True), field


def test_gather_ordered_puts_ranks_values_in_batch_order_and_names_a_rank_that_left():
    from vitlab.engine.context import Run
    from vitlab.errors import VitlabError

    mine = [(1, "b1"), (3, "b3")]
    other = ("ordered", "values", [(0, "b0"), (2, "b2"), (4, "b4")])
    assert Run(shard=(1, 2), gather=lambda o: [other, o]).gather_ordered(mine) == ["b0", "b1", "b2", "b3", "b4"]
    assert Run().gather_ordered([(2, "x"), (0, "y")]) == ["y", "x"]
    with pytest.raises(VitlabError, match="the same batch came from two ranks"):
        Run(shard=(1, 2), gather=lambda o: [other, o]).gather_ordered([(2, "again")])
    stray = ("ordered", "outcome of tour check 'cka'", [(0, None)])
    with pytest.raises(VitlabError, match="rank 0 did not send its token norms: it left this step"):
        Run(shard=(1, 2), gather=lambda o: [stray, o]).gather_ordered(mine, "token norms")


# ---------------------------------------------------------------- SVCCA/PWCCA: every rank's own features, in order

CCA_DATA = ["-d", "fashion-mnist:test", "-n", "80", "-b", "16", "--device", "cpu", "--no-cache", "--workers", "0"]
CCA_COMMANDS = {  # name: arguments; own features (all tokens, GAP) and a forced sketch (its shift gathered too)
    "sim-all": ["similarity", "-m", "zoo:vit-cls", "-m", "zoo:resnet", "--measure", "svcca,pwcca,pwcca-svd20"],
    "sim-gap": ["similarity", "-m", "zoo:vit-cls", "-m", "zoo:resnet", "--measure", "svcca,pwcca,pwcca-svd20",
                "--tokens", "gap"],
    "sim-sketch": ["similarity", "-m", "zoo:vit-cls", "-m", "zoo:resnet", "--measure", "svcca,pwcca-svd20",
                   "--sketch-dims", "64"],
    "mm-svcca": ["compare-models", "-m", "zoo:vit-cls", "-m", "zoo:resnet", "-m", "zoo:mixer", "--measure", "svcca"],
    "mm-pwcca": ["compare-models", "-m", "zoo:vit-cls", "-m", "zoo:resnet", "-m", "zoo:mixer", "--measure",
                 "pwcca-svd20", "--tokens", "gap"],
}


def _cca_commands(out) -> list[list[str]]:
    return [[args[0], *CCA_DATA, *args[1:], "-o", str(out / name)] for name, args in CCA_COMMANDS.items()]


@pytest.mark.slow
@pytest.mark.parametrize("processes", [2, 3])
def test_svcca_pwcca_under_torchrun_equal_one_process_to_1e9(tmp_path, processes):
    """CCA holds every image's features at once: each rank's batches are gathered in batch order (5 batches: 3 + 2
    or 2 + 2 + 1), so every cell, NaN included, and a sketch's measured shift equal one process's to 1e-9."""
    import torch

    from tests.dist_driver import run_commands

    one, threads = tmp_path / "one", torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run_commands(_cca_commands(one))
    finally:
        torch.set_num_threads(threads)
    _torchrun_commands(tmp_path, processes, _cca_commands(tmp_path / "dist"), timeout=600)
    for name in CCA_COMMANDS:
        for csv in sorted((one / name).glob("*.csv")):
            ref, got = pd.read_csv(csv), pd.read_csv(tmp_path / "dist" / name / csv.name)
            assert list(got.columns) == list(ref.columns) and len(got) == len(ref), csv
            for col in ref.columns:
                if pd.api.types.is_numeric_dtype(ref[col]):
                    np.testing.assert_allclose(got[col].to_numpy(float), ref[col].to_numpy(float), rtol=0,
                                               atol=1e-9, err_msg=f"{name}/{csv.name}: {col}")
                else:
                    same = got[col].fillna("<NA>").astype(str) == ref[col].fillna("<NA>").astype(str)
                    assert same.all(), f"{name}/{csv.name}: {col}"
        r1 = json.loads((one / name / "run.json").read_text())
        r2 = json.loads((tmp_path / "dist" / name / "run.json").read_text())
        assert r2["processes"] == processes and r2["images"] == r1["images"] == 80, name
        assert r2.get("cca") == r1.get("cca"), name  # features used, and a sketch's shift, bit for bit
    sim = pd.read_csv(one / "sim-all" / "similarity.csv")
    assert sim["value"].notna().any()
    assert np.isfinite(pd.read_csv(one / "mm-svcca" / "compare_models.csv")["value"]).all()
    assert json.loads((one / "sim-sketch" / "run.json").read_text())["cca"]["shift"]["svcca"]["mean"] is not None
