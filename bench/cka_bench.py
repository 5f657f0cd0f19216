"""Benchmark: vitlab's minibatch CKA against plain forward passes, PyPI peers and a float64 reference.

For each model pair and each image count N, every method runs in its own fresh subprocess (so peak memories do
not mix) over the same models, images, batches and layers:

    forward        decode + transform + forward of both models, no hooks: the floor every method pays
    forward-cl     the same forward with vitlab's layout (CNNs channels-last, vitlab.models.wants_channels_last)
    vitlab         vitlab.run.cka with no cache (Store(None)): the real cost of a cold run
    vitlab-warm    vitlab.run.cka again on a cache that an earlier (untimed) run filled
    pytorch-cka    cka.compute_cka (pytorch-cka 1.1.3), one DataLoader, per-batch Grams, float32 Song HSIC_1
    torch-cka      torch_cka.CKA.compare (torch-cka 0.21), one DataLoader per model, Grams per layer pair
    pytorch-cka-cl, torch-cka-cl   the peers on vitlab's layout (only with --methods): what they would take
                   if their users put their CNNs channels-last themselves
    float64        the reference: the same activations (vitlab.taps.capture), float64 mean-centred linear Grams,
                   Song et al. 2012 eq. 5 (three-term unbiased HSIC_1) per batch, summed over batches
                   (Nguyen et al. 2021 eq. 3), CKA = ratio of the sums; written here, independent of vitlab.cka

The peers, the forward floor and the float64 reference run the models in timm's own layout, as their users have
them; vitlab and forward-cl run them as vitlab.load gives them (CNNs channels-last: faster convolutions whose
float32 round-off differs, which the error column then includes).

Printed per method: wall s, CPU s, the forward floor, time above it, ratio to it, peak memory (RSS via
getrusage on CPU; torch.cuda.max_memory_allocated on CUDA), its growth over the models-loaded baseline, and max
|CKA - float64 CKA| over the cross-model matrix.

Layers: the module outputs that all methods can tap the same way (forward hooks on the same module): ResNet block
outputs (vitlab's default CNN taps) and ViT/Mixer block outputs (vitlab's ``blocks.{i}.resid_post``). vitlab's
other default ViT tap, ``resid_mid``, is the *input* of ``norm2``, which the peers' output hooks cannot reach.

    nice python bench/cka_bench.py                        # defaults: ~5 min on 2 CPU cores
    python bench/cka_bench.py --models resnet18@random,vit_tiny_patch16_224@random --images 64,256 --device cuda
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

# the editable install of this checkout maps `vitlab` as a namespace package outside the repo root: import from here
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from verdicts import interval_text, verdict

METHODS = ("float64", "forward", "forward-cl", "vitlab", "vitlab-warm", "pytorch-cka", "torch-cka")
EXTRA = ("pytorch-cka-cl", "torch-cka-cl")  # only when asked for with --methods
VITLAB_LAYOUT = ("forward-cl", "vitlab", "vitlab-warm", "vitlab-fill", *EXTRA)  # the others get timm's layout
# the second pair: two default-init ResNets, post-ReLU block outputs with a large common mean on both sides
DEFAULT_SCENARIOS = ("test_resnet@random,test_vit@random", "test_resnet@random:0,test_resnet@random:1=64")


# ---------------------------------------------------------------- shared setup (worker side)

def setup(args):
    """Models, source, the cross-model layer lists (tap names and their module names) and batch indices."""
    import torch

    import vitlab

    torch.set_grad_enabled(False)
    models = [vitlab.load(s, args.device) for s in args.models.split(",")]
    source = vitlab.open_source(args.data)
    indices = vitlab.select(source, args.images)
    taps = [hookable_taps(m.model) for m in models]
    return models, source, indices, taps


def timm_layout(models):
    """The models as timm makes them (default memory layout), for the peers, the floor and the reference; the
    same modules when vitlab.load already gave them that layout."""
    import copy
    import dataclasses

    import torch

    return [m if m.memory_format == "contiguous" else
            dataclasses.replace(m, model=copy.deepcopy(m.model).to(memory_format=torch.contiguous_format),
                                memory_format="contiguous") for m in models]


def hookable_taps(model) -> list[tuple[str, str]]:
    """(vitlab tap, module name) of default CKA taps that are plain module outputs (what output hooks see)."""
    from vitlab import taps as taps_mod

    table = taps_mod.tap_table(model)
    out = [(t, table[t].module) for t in taps_mod.default_taps(model)
           if table[t].where == "out" and not table[t].transpose and not table[t].clone]
    if not out:
        raise SystemExit(f"{type(model).__name__}: no default tap is a module output; the peers cannot tap it")
    return out


def batches(indices, batch_size):
    return [indices[i:i + batch_size] for i in range(0, len(indices), batch_size)]


def model_input(source, idx, loaded):
    """(B, C, H, W) input of one model for the images ``idx``: vitlab's decode, then the model's own timm transform
    (the tensor vitlab's runner makes, bit for bit, tests/test_evaltransform.py; the floor pays timm's cost)."""
    import torch

    mode = "L" if loaded.in_chans == 1 else "RGB"
    imgs = [source.load(i) for i in idx]
    return torch.stack([loaded.transform(img if img.mode == mode else img.convert(mode)) for img in imgs]).to(
        loaded.device)


class PairDataset:
    """Item i -> (both models' transformed image, padded and stacked (2, C, H, W), 0): one DataLoader for two
    models with different transforms (pytorch-cka feeds one tensor to both)."""

    def __init__(self, source, indices, models, which=None):
        self.source, self.indices, self.models, self.which = source, indices, models, which
        self.shape = [max(m.data_config["input_size"][k] for m in models) for k in range(3)]

    def __len__(self):
        return len(self.indices)

    def _one(self, img, m, pad: bool):
        import torch

        mode = "L" if m.in_chans == 1 else "RGB"
        x = m.transform(img if img.mode == mode else img.convert(mode))
        if not pad:
            return x
        return torch.nn.functional.pad(x, (0, self.shape[2] - x.shape[2], 0, self.shape[1] - x.shape[1],
                                           0, self.shape[0] - x.shape[0]))

    def __getitem__(self, i):
        import torch

        img = self.source.load(self.indices[i])
        if self.which is not None:  # one model's input only (torch-cka takes one loader per model)
            return self._one(img, self.models[self.which], pad=False), 0
        return torch.stack([self._one(img, m, pad=True) for m in self.models]), 0


def pick(model, k: int, shape):
    """Wrap ``model`` so that it reads its own slot ``k`` of a PairDataset batch; its modules become ``m.*``."""
    import torch

    class Pick(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, x):
            return self.m(x[:, k, :shape[0], :shape[1], :shape[2]].contiguous())

    return Pick()


def loader(dataset, batch_size):
    from torch.utils.data import DataLoader

    return DataLoader(dataset, batch_size=batch_size, shuffle=False, num_workers=0)


# ---------------------------------------------------------------- methods (each returns the cross CKA or None)

def run_forward(models, source, indices, taps, args, _cache):
    import torch

    with torch.inference_mode():
        for idx in batches(indices, args.batch_size):
            for m in models:
                m.model(model_input(source, idx, m))


def run_vitlab(models, source, indices, taps, args, cache):
    import vitlab

    stats = [vitlab.GramStatistic(taps_=tuple(t for t, _ in tp)) for tp in taps]
    store = vitlab.Store(cache)
    report = vitlab.run.cka(models, source, vitlab.CKAOptions(images=args.images, batch_size=args.batch_size),
                            vitlab.Run(store=store), statistic=stats)
    store.close()
    return report.pair(0, 1).cka


def run_pytorch_cka(models, source, indices, taps, args, _cache):
    import cka

    ds = PairDataset(source, indices, models)
    wrapped = [pick(m.model, k, m.data_config["input_size"]) for k, m in enumerate(models)]
    layers = [[f"m.{mod}" for _, mod in tp] for tp in taps]
    out = cka.compute_cka(wrapped[0], wrapped[1], loader(ds, args.batch_size), layers=layers[0],
                          model2_layers=layers[1], device=args.device, progress=False)
    return out[0].double().cpu().numpy()


def run_torch_cka(models, source, indices, taps, args, _cache):
    import warnings

    import torch_cka

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = torch_cka.CKA(models[0].model, models[1].model, model1_name="A", model2_name="B",
                          model1_layers=[mod for _, mod in taps[0]], model2_layers=[mod for _, mod in taps[1]],
                          device=args.device)
        c.compare(loader(PairDataset(source, indices, models, 0), args.batch_size),
                  loader(PairDataset(source, indices, models, 1), args.batch_size))
    return c.export()["CKA"].double().cpu().numpy()


def song_hsic1(ka: np.ndarray, kb: np.ndarray) -> np.ndarray:
    """Unbiased HSIC_1 of every pair of (La, n, n) and (Lb, n, n) Grams (Song et al. 2012, eq. 5), float64:
    [tr(K~ L~) + 1'K~1 1'L~1 / ((n-1)(n-2)) - 2/(n-2) 1'K~ L~1] / (n(n-3)), K~ = K with a zero diagonal."""
    n = ka.shape[-1]
    ka, kb = ka.copy(), kb.copy()
    ka[:, np.arange(n), np.arange(n)] = 0
    kb[:, np.arange(n), np.arange(n)] = 0
    trace = np.einsum("aij,bji->ab", ka, kb)
    sums = np.outer(ka.sum(axis=(1, 2)), kb.sum(axis=(1, 2))) / ((n - 1) * (n - 2))
    cross = 2 / (n - 2) * np.einsum("ai,bi->ab", ka.sum(axis=1), kb.sum(axis=2))  # 1'K~ L~ 1 = (K~1)'(L~1)
    return (trace + sums - cross) / (n * (n - 3))


def centred_grams(acts: dict, names: list[str]) -> tuple[np.ndarray, list[float]]:
    """float64 Grams of mean-centred features, and each layer's bias ratio tr(X X') / tr(Xc Xc')."""
    grams, bias = [], []
    for t in names:
        x = acts[t].reshape(acts[t].shape[0], -1).double().cpu().numpy()
        xc = x - x.mean(axis=0, keepdims=True)
        grams.append(xc @ xc.T)
        bias.append(float((x * x).sum() / (xc * xc).sum()))
    return np.stack(grams), bias


def run_float64(models, source, indices, taps, args, _cache):
    import torch

    from vitlab import taps as taps_mod

    xy = np.zeros((len(taps[0]), len(taps[1])))
    xx, yy = np.zeros(len(taps[0])), np.zeros(len(taps[1]))
    bias = [np.zeros(len(t)) for t in taps]
    for idx in batches(indices, args.batch_size):
        grams = []
        for k, m in enumerate(models):
            names = [t for t, _ in taps[k]]
            with taps_mod.capture(m.model, names) as acts, torch.inference_mode():
                m.model(model_input(source, idx, m))
            g, b = centred_grams(acts, names)
            grams.append(g)
            bias[k] = np.maximum(bias[k], b)
        xy += song_hsic1(grams[0], grams[1])
        xx += np.diagonal(song_hsic1(grams[0], grams[0]))
        yy += np.diagonal(song_hsic1(grams[1], grams[1]))
    run_float64.bias = [b.tolist() for b in bias]
    return xy / np.sqrt(np.outer(xx, yy))


NOTES = """how the peers were called (same models, images, batches, layers):
  pytorch-cka: one DataLoader; an item is both models' own transformed image, padded and stacked (2, C, H, W);
    each model is wrapped to read its slot, so its hooked modules are named m.<module>. It clamps CKA to [0, 1].
  torch-cka: one DataLoader per model (its API), so each image is decoded twice; it does not disable autograd,
    the models come with requires_grad False (as vitlab.load gives them), so no graph is built.
  vitlab: vitlab.run.cka also computes each model's CKA with itself (the app shows it); the peers do not."""

RUNNERS = {"forward": run_forward, "forward-cl": run_forward, "vitlab": run_vitlab, "vitlab-warm": run_vitlab,
           "vitlab-fill": run_vitlab,
           "pytorch-cka": run_pytorch_cka, "torch-cka": run_torch_cka, "float64": run_float64,
           "pytorch-cka-cl": run_pytorch_cka, "torch-cka-cl": run_torch_cka}


# ---------------------------------------------------------------- worker: one method, one N, one process

def peak_mib(device: str) -> float:
    import torch

    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def timed(fn, device: str) -> tuple[object, float, float]:
    import torch

    t0, c0 = time.perf_counter(), time.process_time()
    result = fn()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return result, time.perf_counter() - t0, time.process_time() - c0


def worker(args) -> dict:
    """One run of one method in this fresh process: its result, its (solo) time and the process's peak memory."""
    import torch

    models, source, indices, taps = setup(args)
    if args.worker not in VITLAB_LAYOUT:
        models = timm_layout(models)
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    base = peak_mib(args.device)
    result, wall, cpu = timed(lambda: RUNNERS[args.worker](models, source, indices, taps, args, args.cache),
                              args.device)
    out = {"method": args.worker, "images": len(indices), "wall": wall, "cpu": cpu, "peak": peak_mib(args.device),
           "base": base, "cka": None if result is None else np.asarray(result, dtype=np.float64).tolist(),
           "layers": [[t for t, _ in tp] for tp in taps]}
    if args.worker == "float64":
        out["bias"] = run_float64.bias
    return out


def timing_worker(args) -> dict:
    """Every timed method ``args.repeats`` times, interleaved (round r starts at method r), in one process: the
    methods then see the same machine load, which on a shared machine moves far more than they differ."""
    import copy
    import dataclasses

    models, source, indices, taps = setup(args)
    plain = timm_layout(models)
    RUNNERS["vitlab"](models, source, indices, taps, args, args.cache)  # fills the cache for vitlab-warm
    methods = [m for m in args.methods if m != "float64"]
    times: dict[str, list] = {m: [] for m in methods}
    for r in range(args.repeats):
        for method in methods[r % len(methods):] + methods[:r % len(methods)]:
            use = models if method in VITLAB_LAYOUT else plain
            if method.startswith("torch-cka"):  # it never removes its hooks: give it copies, keep the originals clean
                use = [dataclasses.replace(m, model=copy.deepcopy(m.model)) for m in use]
            cache = args.cache if method == "vitlab-warm" else None
            run = RUNNERS[method]
            _, wall, cpu = timed(lambda r=run, u=use, c=cache: r(u, source, indices, taps, args, c), args.device)
            times[method].append((wall, cpu))
    return {m: {"wall": min(w for w, _ in t), "cpu": min(c for _, c in t), "walls": [w for w, _ in t]}
            for m, t in times.items()}


def configure(args) -> None:
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)


# ---------------------------------------------------------------- parent: spawn, collect, print

def spawn(method: str, models: str, n: int, args, cache: str | None) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        result_file = f.name
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", method, "--models", models,
           "--images", str(n), "--batch-size", str(args.batch_size), "--data", args.data, "--device", args.device,
           "--result-file", result_file, "--threads", str(args.threads), "--repeats", str(args.repeats),
           "--methods", ",".join(args.methods)]
    cmd += ["--cache", cache] if cache else []
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, check=False)
    try:
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            return {"method": method, "images": n, "error": " | ".join(tail)}
        return json.loads(Path(result_file).read_text())
    finally:
        os.unlink(result_file)


def run_scenario(scenario: str, args) -> list[dict]:
    """Per N: each method once in its own process (result, peak memory), then all of them timed interleaved."""
    models, _, counts = scenario.partition("=")
    rows = []
    for n in [int(v) for v in counts.split(",")] if counts else args.images:
        cache = tempfile.mkdtemp(prefix="cka-bench-cache-")
        try:
            at_n = []
            for method in args.methods:
                if method == "vitlab-warm":
                    spawn("vitlab-fill", models, n, args, cache)
                at_n.append(spawn(method, models, n, args, cache if method == "vitlab-warm" else None))
                print(f"  done: {method} N={n}", file=sys.stderr, flush=True)
            shutil.rmtree(cache, ignore_errors=True)
            timing = spawn("timing", models, n, args, tempfile.mkdtemp(prefix="cka-bench-cache-"))
            print(f"  done: interleaved timing N={n}", file=sys.stderr, flush=True)
            for r in at_n:
                if "error" not in timing and r["method"] in timing and "error" not in r:
                    r.update(timing[r["method"]], solo=False)
            rows += at_n
        finally:
            shutil.rmtree(cache, ignore_errors=True)
    return rows


def fmt_row(r: dict, fwd: dict | None, ref: dict | None) -> str:
    if "error" in r:
        return f"{r['method']:<12} {r['images']:>5}  FAILED: {r['error'][:200]}"
    f, fc = (fwd["wall"], fwd["cpu"]) if fwd and "wall" in fwd else (float("nan"), float("nan"))
    if r is ref:
        err = "0 (ref)"
    elif r["cka"] is None or ref is None:
        err = "-"
    else:
        a, b = np.array(r["cka"]), np.array(ref["cka"])
        err = f"{np.max(np.abs(a - b)):.1e}" if a.shape == b.shape else f"shape {a.shape}"
    name = r["method"] + ("*" if r.get("solo", True) else "")
    return (f"{name:<12} {r['images']:>5} {r['wall']:>7.2f} {f:>6.2f} {r['wall'] - f:>+7.2f} "
            f"{r['wall'] / f:>6.2f} {r['cpu']:>6.2f} {fc:>6.2f} {r['cpu'] / fc:>6.2f} {r['peak']:>8.0f} "
            f"{r['peak'] - r['base']:>6.0f}  {err}")


def print_table(models: str, rows: list[dict]) -> None:
    print(f"\nmodels: {models}")
    ref = next((r for r in rows if r["method"] == "float64" and "cka" in r), None)
    if ref:
        print("layers (module outputs, hooked identically by every method):",
              " | ".join(", ".join(ls) for ls in ref["layers"]))
        for name, b in zip(models.split(","), ref["bias"]):
            print(f"bias ratio tr(XX')/tr(XcXc') of {name}: max {max(b):.1f} "
                  f"(per layer: {', '.join(f'{v:.1f}' for v in b)})")
    head = (f"{'method':<12} {'N':>5} {'wall s':>7} {'fwd s':>6} {'above':>7} {'ratio':>6} {'cpu s':>6} "
            f"{'fwd':>6} {'ratio':>6} {'peak MiB':>8} {'Δpeak':>6}  max|err| vs float64")
    print("wall: elapsed, fastest of the interleaved runs (* = one run alone in its own process); fwd: the forward "
          "floor's; above: wall - fwd; cpu: process CPU time;\npeak: the method's own process's peak RSS (CUDA: max "
          "allocated); Δpeak: its growth after the models were loaded")
    print(head)
    print("-" * len(head))
    for n in sorted({r["images"] for r in rows}):
        at_n = [r for r in rows if r["images"] == n]
        fwd = next((r for r in at_n if r["method"] == "forward" and "wall" in r), None)
        ref_n = next((r for r in at_n if r["method"] == "float64" and "cka" in r), None)
        for r in at_n:
            print(fmt_row(r, fwd, ref_n))
        timed_rows = [r for r in at_n if "walls" in r]
        if timed_rows:
            print(f"rounds at N={n} (wall s of each interleaved round; round r starts at method r): "
                  + "; ".join(f"{r['method']} " + " ".join(f"{w:.2f}" for w in r["walls"]) for r in timed_rows))
            ours = next((r for r in timed_rows if r["method"] == "vitlab"), None)
            for peer in (r for r in timed_rows if ours and r["method"].startswith(("pytorch-cka", "torch-cka"))):
                ratios = [a / b for a, b in zip(ours["walls"], peer["walls"])]  # the same round's walls
                print(f"  vitlab faster than {peer['method']} (wall ratio < 1): {verdict(ratios, 1.0, True)} "
                      f"({interval_text(ratios)})")


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models", action="append",
                   help="comma-separated pair of vitlab model specs, optionally '=N1,N2' (its own image counts); "
                        "repeat for several pairs "
                        f"(default: {' and '.join(DEFAULT_SCENARIOS)})")
    p.add_argument("--images", default="64,256", help="image counts, comma-separated (default 64,256)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--data", default="fashion-mnist:test")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads per subprocess (default 1: stable timings on a shared machine; "
                        "0: torch's default)")
    p.add_argument("--repeats", type=int, default=3,
                   help="runs per subprocess, the fastest reported (default 3; the float64 reference runs once)")
    p.add_argument("--methods", default=",".join(METHODS), help=f"subset of {','.join(METHODS + EXTRA)}")
    p.add_argument("--timeout", type=float, default=900, help="seconds per subprocess")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--result-file", help=argparse.SUPPRESS)
    p.add_argument("--cache", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv=None) -> None:
    args = parse(argv)
    if args.worker:
        args.models = args.models[0]
        args.images = int(args.images)
        args.methods = args.methods.split(",")
        configure(args)
        try:
            out = timing_worker(args) if args.worker == "timing" else worker(args)
        finally:
            if args.worker == "timing":
                shutil.rmtree(args.cache, ignore_errors=True)
        Path(args.result_file).write_text(json.dumps(out))
        return
    args.images = [int(v) for v in args.images.split(",")]
    args.methods = args.methods.split(",")
    bad = [m for m in args.methods if m not in METHODS + EXTRA]
    if bad:
        raise SystemExit(f"unknown method(s) {bad}: choose from {','.join(METHODS + EXTRA)}")
    if any(n % args.batch_size for n in args.images):
        print("note: N not a multiple of the batch size; torch-cka weighs batches equally, the others by their "
              "own normalisation, so its error includes that difference", file=sys.stderr)
    import platform

    import torch

    cpu = platform.processor() or platform.machine()
    print(f"cka_bench {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {cpu}"
          f", {os.cpu_count()} CPUs, load avg {os.getloadavg()[0]:.1f}; torch {torch.__version__}, device {args.device}"
          f", {args.threads or torch.get_num_threads()} torch thread(s) per run, batch {args.batch_size}, "
          f"data {args.data}, fastest of {args.repeats} run(s)")
    print(NOTES)
    for scenario in args.models or DEFAULT_SCENARIOS:
        print_table(scenario.partition("=")[0], run_scenario(scenario, args))


if __name__ == "__main__":
    main()
