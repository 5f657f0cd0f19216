"""Benchmark: images/s of vitlab's input pipeline and of `vitlab cka`, against plain timm forwards; peak memory.

Over the same JPEGs (made from assets/samples: 500x375 crops, quality 90, like a folder of photographs), per model:

    pipeline        vitlab.pipeline alone: decode + the model's transform in W worker threads, no forward
    forward-serial  decode + transform on the main thread, then the forward, no hooks (cka_bench's floor today)
    forward-loader  a plain timm forward fed by torch.utils.data.DataLoader(num_workers=W): the floor a user writes
    forward-cl      forward-loader on the model as vitlab.load gives it (CNNs channels-last; the others as timm's)
    forward-kept    forward-loader inside vitlab.hostmem.keep_freed (VITLAB_KEEP_FREED=1: freed activation memory
                    reused instead of faulted in afresh)
    vitlab          vitlab.run.cka([model]) with every default CKA tap, no cache, W input workers (the default)
    vitlab-kept     vitlab with VITLAB_KEEP_FREED=1 (opt-in: faster on CPU, ~2x the forward's memory growth)
    vitlab-proc     vitlab with --worker-kind processes (opt-in: for many cores feeding a GPU; its start, ~5 s on 2
                    cores, is in the time, and its workers' CPU is not in cpu s, as for the DataLoader's)

The forward-* floors (all but forward-cl) run the model in timm's own layout; vitlab runs CNNs (ResNet, BiT)
channels-last, as it does for its users (vitlab.models.wants_channels_last; VITLAB_CHANNELS_LAST=0 turns that off).

Timing: every run of every method is a fresh process (the model loaded before the clock starts), so no method
inherits another's heap, thread pools or allocator settings; --repeats rounds, interleaved (round r starts at
method r). Reported: the fastest run of each method, and per round the ratio to forward-loader of the same
round: its median and the sign test's interval for the median (order statistics, >= 90 % coverage, no normality
assumed; 5 rounds give min..max at 94 %). On a shared machine the load moves more than the methods differ, so a
verdict is "met" or "not met" only when the whole interval is on one side of the target, else "can't tell".

Peak memory: each of forward-loader, vitlab and vitlab-held (the previous path: every tap of a batch held, then
the Grams) runs alone in a fresh subprocess at two batch sizes (--memory-batches, two batches of images each);
the growth per image is (Δpeak(large) - Δpeak(small)) / (large - small), Δpeak = peak RSS (CUDA: max allocated)
minus the RSS after the model was loaded. DataLoader workers are separate processes: only the batches they hand
over count in the main process.

Scaling: the pipeline alone on a decode-bound case (--scaling-model, default test_vit@random: a 160 px input,
so decoding a 500x375 JPEG dominates), 1 and 2 worker threads (and 0: the main thread), 1 and 2 worker processes
(``--worker-kind processes``, timed after they started: their start is reported apart), and the same work per
image (vitlab's decode, data.transform_image) in a DataLoader's 1 and 2 worker processes, --scaling-rounds rounds
interleaved. Reported: the fastest round of each, and the 2-vs-1-worker speed-up per round (median, interval).

    nice python bench/throughput_bench.py                           # defaults: ~25 min on 2 CPU cores (estimated)
    python bench/throughput_bench.py --models vit_base_patch16_224@random --images 256 --device cuda --amp
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from verdicts import interval_text, median_interval, verdict

TIMED = ("pipeline", "forward-serial", "forward-loader", "forward-cl", "forward-kept", "vitlab", "vitlab-kept",
         "vitlab-proc")
MEMORY = ("forward-loader", "forward-cl", "forward-kept", "vitlab", "vitlab-kept", "vitlab-held")
DEFAULT_MODELS = "vit_base_patch16_224@random,resnet50@random"


# ---------------------------------------------------------------- images

def make_jpegs(folder: Path, n: int) -> None:
    """``n`` 500x375 JPEGs: seeded crops of the bundled samples, resized (deterministic)."""
    import numpy as np
    from PIL import Image

    from vitlab.inputs.data import ASSETS

    files = sorted((ASSETS / "samples").glob("*.jpg"))
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)
    for k in range(n):
        img = Image.open(files[k % len(files)]).convert("RGB")
        w, h = img.size
        cw, ch = int(w * rng.uniform(0.6, 1.0)), int(h * rng.uniform(0.6, 1.0))
        x0, y0 = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
        img.crop((x0, y0, x0 + cw, y0 + ch)).resize((500, 375), Image.BICUBIC).save(folder / f"{k:04d}.jpg",
                                                                                    quality=90)


# ---------------------------------------------------------------- methods (worker side)

class _Images:
    """DataLoader dataset: item i -> the model's transformed image i (decoded in the loader's worker)."""

    def __init__(self, source, indices, loaded):
        self.source, self.indices, self.loaded = source, indices, loaded

    def __len__(self):
        return len(self.indices)

    def __getitem__(self, i):
        return timm_input(self.source.load(self.indices[i]), self.loaded)


def timm_input(img, loaded):
    """The model's own timm transform, as a user's loop calls it (vitlab's runner makes the same tensor, bit for
    bit, with less Python: vitlab.evaltransform)."""
    mode = "L" if loaded.in_chans == 1 else "RGB"
    return loaded.transform(img if img.mode == mode else img.convert(mode))


def _cpu(loaded):
    from vitlab.engine.pipeline import _Input

    return _Input(loaded.in_chans, loaded.transform)


def run_pipeline(m, source, indices, args, kind="threads"):
    with prefetcher(m, source, args, kind) as pf:
        drain(m, source, indices, args, pf)


def prefetcher(m, source, args, kind):
    from vitlab import pipeline
    from vitlab.inputs.images import needed_side

    # as run.stream makes it: JPEGs decoded at the smallest DCT scale that still covers the model's input
    return pipeline.Prefetcher(source, args.workers, keep_images=False, min_side=needed_side(m.data_config),
                               kind=kind)


def drain(m, source, indices, args, pf):
    from vitlab import pipeline
    from vitlab.inputs.data import plan_batches

    batches = plan_batches(source, indices, args.batch_size)
    plan = (lambda b: (None, [m]))
    # drain it: the prepared batches themselves are not needed
    collections.deque(pipeline.prefetched(batches, plan, pf, depth=1 if args.device == "cpu" else 2), maxlen=0)


def run_forward_serial(m, source, indices, args):
    import torch

    with torch.inference_mode(), _autocast(args):
        for k in range(0, len(indices), args.batch_size):
            x = torch.stack([timm_input(source.load(i), m) for i in indices[k:k + args.batch_size]])
            m.model(x.to(m.device))


def run_forward_loader(m, source, indices, args):
    import torch
    from torch.utils.data import DataLoader

    cuda = args.device.startswith("cuda")
    loader = DataLoader(_Images(source, indices, m), batch_size=args.batch_size, num_workers=args.workers,
                        pin_memory=cuda)
    with torch.inference_mode(), _autocast(args):
        for x in loader:
            m.model(x.to(m.device, non_blocking=cuda))


def run_forward_kept(m, source, indices, args):
    from vitlab.engine import hostmem

    os.environ["VITLAB_KEEP_FREED"] = "1"  # this process runs this one method
    with hostmem.keep_freed(args.device == "cpu"):
        run_forward_loader(m, source, indices, args)


def run_vitlab(m, source, indices, args):
    import vitlab

    vitlab.run.cka([m], source, vitlab.CKAOptions(images=len(indices), batch_size=args.batch_size),
                   vitlab.Run(amp=args.amp, workers=args.workers))


def run_vitlab_processes(m, source, indices, args):
    import vitlab

    vitlab.run.cka([m], source, vitlab.CKAOptions(images=len(indices), batch_size=args.batch_size),
                   vitlab.Run(amp=args.amp, workers=args.workers, worker_kind="processes"))


def run_vitlab_kept(m, source, indices, args):
    os.environ["VITLAB_KEEP_FREED"] = "1"  # this process runs this one method
    run_vitlab(m, source, indices, args)


def run_vitlab_held(m, source, indices, args):
    """The path before in-capture statistics: hold every tap of the batch, then form the Grams."""
    import vitlab

    vitlab.run.GramStatistic.streams = False
    try:
        run_vitlab(m, source, indices, args)
    finally:
        vitlab.run.GramStatistic.streams = True


def _autocast(args):
    import torch

    return torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.amp and args.device.startswith("cuda"))


RUNNERS = {"pipeline": run_pipeline, "forward-serial": run_forward_serial, "forward-loader": run_forward_loader,
           "forward-cl": run_forward_loader,
           "forward-kept": run_forward_kept, "vitlab": run_vitlab, "vitlab-kept": run_vitlab_kept,
           "vitlab-proc": run_vitlab_processes,
           "vitlab-held": run_vitlab_held}


# ---------------------------------------------------------------- workers: one subprocess each

def rss_mib(device: str) -> float:
    import torch

    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed(fn, device: str) -> tuple[float, float]:
    import torch

    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - t0, time.process_time() - c0


def setup(args):
    import torch

    import vitlab

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)
    method = args.methods if args.worker == "timing" else args.worker
    if method.startswith("forward") and method != "forward-cl":  # floors: the model as timm makes it
        os.environ["VITLAB_CHANNELS_LAST"] = "0"
    m = vitlab.load(args.model, args.device)
    source = vitlab.open_source(args.data)
    return m, source, vitlab.select(source, args.images)


def memory_worker(args) -> dict:
    import torch

    m, source, indices = setup(args)
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    base = rss_mib(args.device)
    wall, cpu = timed(lambda: RUNNERS[args.worker](m, source, indices, args), args.device)
    return {"base": base, "peak": rss_mib(args.device), "wall": wall, "cpu": cpu}


def timing_worker(args) -> dict:
    """One run of one method (``--methods``) in this fresh process."""
    m, source, indices = setup(args)
    RUNNERS["pipeline"](m, source, indices[: args.batch_size], args)  # warm: file cache, thread start
    wall, cpu = timed(lambda: RUNNERS[args.methods](m, source, indices, args), args.device)
    return {"wall": wall, "cpu": cpu}


class _Prepared(_Images):
    """DataLoader dataset doing exactly the pipeline's work per image: vitlab's decode at the model's needed side
    (JPEGs DCT-scaled) and data.transform_image."""

    def __getitem__(self, i):
        from vitlab.inputs.data import transform_image
        from vitlab.inputs.images import needed_side

        return transform_image(self.source.load(self.indices[i], needed_side(self.loaded.data_config)),
                               _cpu(self.loaded))


def run_loader_pipeline(m, source, indices, args):
    """The pipeline's work in DataLoader worker processes (started afresh, as one run of a user's would)."""
    from torch.utils.data import DataLoader

    loader = DataLoader(_Prepared(source, indices, m), batch_size=args.batch_size, num_workers=args.workers)
    collections.deque(loader, maxlen=0)


def run_started_processes(m, source, indices, args, starts):
    """The pipeline with worker processes, timed once they have started (a run of minutes on a GPU machine pays
    the start once); the start itself (spawn, import torch, the first batch) goes into ``starts``."""
    import time

    with prefetcher(m, source, args, "processes") as pf:
        t0 = time.perf_counter()
        drain(m, source, indices[: args.batch_size], args, pf)
        starts.append(time.perf_counter() - t0)
        return timed(lambda: drain(m, source, indices, args, pf), args.device)[0]


def scaling_worker(args) -> dict:
    """Per round, every variant in turn (rotated): "0", "1", "2" pipeline worker threads, "P1", "P2" worker
    processes (timed after their start), "L1", "L2" DataLoader workers."""
    m, source, indices = setup(args)
    variants = args.methods.split(",")
    out: dict[str, list] = {v: [] for v in variants}
    starts: dict[str, list] = {v: [] for v in variants if v.startswith("P")}
    run_pipeline(m, source, indices[: args.batch_size], args)
    for r in range(args.repeats):
        for v in variants[r % len(variants):] + variants[:r % len(variants)]:
            args.workers = int(v.lstrip("LP"))
            if v.startswith("P"):
                out[v].append(run_started_processes(m, source, indices, args, starts[v]))
                continue
            fn = run_loader_pipeline if v.startswith("L") else run_pipeline
            out[v].append(timed(lambda fn=fn: fn(m, source, indices, args), args.device)[0])
    return {"images": len(indices), "walls": out, "starts": starts}


# ---------------------------------------------------------------- parent

def spawn(kind: str, model: str, args, images: int, batch: int, methods: str = "", workers: int | None = None,
          repeats: int | None = None):
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        result = f.name
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", kind, "--model", model, "--data", args.data,
           "--images", str(images), "--batch-size", str(batch), "--device", args.device,
           "--repeats", str(args.repeats if repeats is None else repeats), "--threads", str(args.threads),
           "--workers", str(args.workers if workers is None else workers),
           "--methods", methods, "--result-file", result] + (["--amp"] if args.amp else [])
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, check=False, env=env)
        if proc.returncode != 0:
            return {"error": " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])}
        return json.loads(Path(result).read_text())
    finally:
        os.unlink(result)


def timing_rounds(model: str, args) -> dict:
    """{method: [(wall, cpu) per round]}: every run its own process, round r starting at method r."""
    timed_ = args.timed
    runs: dict[str, list] = {k: [] for k in timed_}
    for r in range(args.repeats):
        for k in timed_[r % len(timed_):] + timed_[:r % len(timed_)]:
            t = spawn("timing", model, args, args.images, args.batch_size, k)
            if "error" in t:
                raise RuntimeError(f"{k}: {t['error']}")
            runs[k].append((t["wall"], t["cpu"]))
            print(f"  done: round {r + 1} {k} {t['wall']:.2f} s", file=sys.stderr, flush=True)
    return runs


def report_model(model: str, args) -> None:
    n = args.images
    print(f"\nmodel {model}: {n} JPEGs, batch {args.batch_size}, {args.workers} input worker(s), "
          f"{args.repeats} round(s)")
    runs = None
    try:
        runs = None if "timing" in args.skip_parts else timing_rounds(model, args)
    except RuntimeError as e:
        print(f"  timing FAILED: {e}")
    if runs:
        best = {k: min(w for w, _ in v) for k, v in runs.items()}
        loader = runs["forward-loader"]
        print(f"  {'method':<16}{'images/s':>9}{'wall s':>8}{'cpu s':>8}{'/loader':>9}{'round /loader':>22}"
              "   walls of the rounds (round /loader: median [interval])")
        per_round = {}
        for k in args.timed:
            ratios = [w / lw for (w, _), (lw, _) in zip(runs[k], loader)]
            per_round[k] = ratios
            lo, hi, _ = median_interval(ratios)
            cpu = min(c for _, c in runs[k])
            print(f"  {k:<16}{n / best[k]:>9.1f}{best[k]:>8.2f}{cpu:>8.2f}{best[k] / best['forward-loader']:>9.3f}"
                  f"{statistics.median(ratios):>10.3f} [{lo:.3f}, {hi:.3f}]   "
                  + " ".join(f"{w:.2f}" for w, _ in runs[k]))
        if "vitlab" in runs and "forward-serial" in runs:
            vs_serial = [w / s for (w, _), (s, _) in zip(runs["vitlab"], runs["forward-serial"])]
            print(f"  vitlab <= 1.05x forward-loader: {verdict(per_round['vitlab'], 1.05)} "
                  f"({interval_text(per_round['vitlab'])}; fastest runs "
                  f"{best['vitlab'] / best['forward-loader']:.3f})")
            print(f"  vitlab < forward-serial: {verdict(vs_serial, 1.0, True)} ({interval_text(vs_serial)}; "
                  f"fastest runs {best['vitlab'] / best['forward-serial']:.3f})")
        if all(k in runs for k in ("vitlab-kept", "forward-serial", "forward-kept")):
            kept = [w / s for (w, _), (s, _) in zip(runs["vitlab-kept"], runs["forward-serial"])]
            print(f"  with VITLAB_KEEP_FREED=1: vitlab-kept <= 1.05x forward-loader: "
                  f"{verdict(per_round['vitlab-kept'], 1.05)} ({interval_text(per_round['vitlab-kept'])}); "
                  f"vitlab-kept < forward-serial: {verdict(kept, 1.0, True)} ({interval_text(kept)}); "
                  f"vitlab-kept over forward-kept (same allocator), fastest runs: "
                  f"{best['vitlab-kept'] / best['forward-kept']:.3f}")
    if "memory" in args.skip_parts:
        return
    small, large = args.memory_batches
    rows = {}
    for k in args.memory:
        rows[k] = [spawn(k, model, args, 2 * b, b) for b in (small, large)]
        print(f"  done: memory {k}", file=sys.stderr, flush=True)
    print(f"  peak memory: Δpeak MiB over the loaded model at batch {small} / {large} (2 batches each), "
          "growth per image")
    plain = None
    for k, (a, b) in rows.items():
        if "error" in a or "error" in b:
            print(f"  {k:<16}FAILED: {a.get('error') or b.get('error')}")
            continue
        da, db = a["peak"] - a["base"], b["peak"] - b["base"]
        per = (db - da) / (large - small)
        plain = per if k == "forward-loader" else plain
        ratio = f"{per / plain:.2f}x the plain forward's" if plain else ""
        print(f"  {k:<16}{da:>8.0f} /{db:>7.0f}   {per:6.2f} MiB per image   {ratio}")


def report_scaling(args) -> None:
    r = spawn("scaling", args.scaling_model, args, args.scaling_images, args.batch_size, "0,1,2,P1,P2,L1,L2",
              repeats=args.scaling_rounds)
    if "error" in r:
        print(f"\npipeline scaling: {args.scaling_model}: FAILED: {r['error']}")
        return
    n, walls = r["images"], r["walls"]
    print(f"\npipeline scaling: {args.scaling_model}, {n} JPEGs, batch {args.batch_size}, {args.scaling_rounds} "
          "interleaved rounds; fastest round, and per round the 2-worker speed-up over 1 worker of that round")
    for label, one, two, names in (("vitlab threads", "1", "2", ("0", "1", "2")),
                                   ("vitlab processes (--worker-kind processes, timed once started)", "P1", "P2",
                                    ("P1", "P2")),
                                   ("DataLoader processes (started per run)", "L1", "L2", ("L1", "L2"))):
        print(f"  {label}:")
        for v in names:
            start = (f"; start and first batch {statistics.median(r['starts'][v]):.2f} s (median)"
                     if v in r.get("starts", {}) else "")
            print(f"    {v.lstrip('LP')} worker(s): {n / min(walls[v]):7.1f} images/s   ({min(walls[v]):.2f} s{start})")
        per_round = [a / b for a, b in zip(walls[one], walls[two])]
        lo, hi, cover = median_interval(per_round)
        print(f"    2 vs 1 worker: {min(walls[one]) / min(walls[two]):.2f}x on the fastest rounds; per round median "
              f"{statistics.median(per_round):.2f}x, {100 * cover:.0f} % interval [{lo:.2f}, {hi:.2f}]; >= 1.7x: "
              f"{verdict([1 / r for r in per_round], 1 / 1.7)}")


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models", default=DEFAULT_MODELS, help=f"comma-separated model specs (default {DEFAULT_MODELS})")
    p.add_argument("--images", type=int, default=64, help="JPEGs timed per model (default 64)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--workers", type=int, default=2, help="input workers of the pipeline and the DataLoader")
    p.add_argument("--memory-batches", default="16,64", help="the two batch sizes of the memory growth")
    p.add_argument("--scaling-model", default="test_vit@random")
    p.add_argument("--scaling-images", type=int, default=1024,
                   help="JPEGs of the scaling part (default 1024: a run of ~1 s is within this machine's noise)")
    p.add_argument("--scaling-rounds", type=int, default=5, help="interleaved rounds of the scaling part (default 5)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--amp", action="store_true", help="bf16 autocast (CUDA)")
    p.add_argument("--threads", type=int, default=0, help="torch threads of the main thread (0: torch's default)")
    p.add_argument("--repeats", type=int, default=5,
                   help="timing rounds (default 5: the fewest that give a 90 %% interval for the median ratio)")
    p.add_argument("--timeout", type=float, default=1200)
    p.add_argument("--data", default=None, help="image folder (default: JPEGs made in a temporary folder)")
    p.add_argument("--timed", default=",".join(TIMED),
                   help=f"timed methods, comma-separated (default all: {','.join(TIMED)}); forward-loader is "
                        "always timed: the rounds' ratios are to it")
    p.add_argument("--memory", default=",".join(MEMORY),
                   help=f"methods of the memory part (default all: {','.join(MEMORY)}); forward-loader always")
    p.add_argument("--skip", default="", help="comma-separated parts to skip: scaling, models, timing, memory")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--methods", default="", help=argparse.SUPPRESS)
    p.add_argument("--result-file", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv=None) -> None:
    args = parse(argv)
    if args.worker:
        fn = {"timing": timing_worker, "scaling": scaling_worker}.get(args.worker, memory_worker)
        Path(args.result_file).write_text(json.dumps(fn(args)))
        return
    import platform

    import torch

    args.memory_batches = [int(v) for v in args.memory_batches.split(",")]
    for name, table in (("timed", TIMED), ("memory", MEMORY)):
        chosen = {v.strip() for v in getattr(args, name).split(",") if v.strip()} | {"forward-loader"}
        if chosen - set(table):
            raise SystemExit(f"--{name}: unknown method(s) {', '.join(sorted(chosen - set(table)))}; "
                             f"choose from {', '.join(table)}")
        setattr(args, name, tuple(k for k in table if k in chosen))
    with tempfile.TemporaryDirectory(prefix="throughput-bench-") as tmp:
        if args.data is None:
            args.data = str(Path(tmp) / "jpegs")
            make_jpegs(Path(args.data), max(args.images, args.scaling_images, 2 * max(args.memory_batches)))
        print(f"throughput_bench {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
              f"{platform.machine()}, {os.cpu_count()} CPUs, load avg {os.getloadavg()[0]:.1f}; torch "
              f"{torch.__version__}, device {args.device}{' (bf16 autocast)' if args.amp else ''}, "
              f"{args.threads or torch.get_num_threads()} torch thread(s) on the main thread, fastest of "
              f"{args.repeats} interleaved run(s)", flush=True)
        skip = args.skip_parts = set(args.skip.split(","))
        if "scaling" not in skip:
            report_scaling(args)
        if "models" not in skip:
            for model in args.models.split(","):
                report_model(model, args)
        print(f"load avg at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
