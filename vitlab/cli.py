"""The ``vitlab`` command (also ``python -m vitlab``): headless runs and exports.

Every user error ends with one line on stderr and exit status 2; results go to ``--out DIR`` as CSV, JSON and
PNG/SVG charts. Commands are registered in :data:`COMMANDS` (one ``add_*`` function each).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Callable

from .errors import VitlabError


# ---------------------------------------------------------------- shared options and helpers


def add_model_options(p: argparse.ArgumentParser, multiple: bool = True) -> None:
    help_ = ("model spec NAME[@WEIGHTS] or zoo:NAME[@random[:SEED]]; WEIGHTS: pretrained (default), "
             "random[:SEED] (the untrained twin), or a .safetensors/.pth/.bin file" + (" (repeat for several models)" if multiple else ""))
    if multiple:
        p.add_argument("--model", "-m", action="append", required=True, help=help_)
    else:
        p.add_argument("--model", "-m", required=True, help=help_)
    p.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, cuda:N")


def add_data_options(p: argparse.ArgumentParser, images: int | None = 256, batch_size: int = 64) -> None:
    p.add_argument("--data", "-d", default="samples",
                   help="samples | fashion-mnist[:train|test[:FOLDER]] | cifar10[:split] | cifar100[:split] | FOLDER")
    p.add_argument("--images", "-n", type=int, default=images, help="number of images (first N, or shuffled)")
    p.add_argument("--batch-size", "-b", type=int, default=batch_size)
    p.add_argument("--shuffle", type=int, default=None, metavar="SEED", help="take a seeded random subset")
    p.add_argument("--no-cache", action="store_true", help="neither read nor write the disk cache")
    p.add_argument("--cache-dir", default=None, help="cache folder (default: VITLAB_CACHE_DIR or ~/.cache/vitlab)")


def add_out_option(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument("--out", "-o", default=default, help="output folder for CSV, JSON and charts")


def open_store(args):
    from .cache import Store

    if getattr(args, "no_cache", False):
        return Store(None)
    return Store(args.cache_dir or "default")


def tqdm_progress(desc: str):
    """A progress callback drawing a tqdm bar on stderr; call ``.close()`` when done."""
    from tqdm import tqdm

    bar = tqdm(total=0, desc=desc, unit="batch", file=sys.stderr, disable=None)

    def cb(done: int, total: int, text: str) -> None:
        if bar.total != total:
            bar.total = total
            bar.refresh()
        bar.n = done
        bar.set_postfix_str(text, refresh=True)

    cb.close = bar.close  # type: ignore[attr-defined]
    return cb


def load_models(specs: list[str], device: str) -> list:
    from .models import load

    return [load(s, device) for s in specs]


def relabel(loaded: list, given: list[str]) -> None:
    """Name models in outputs exactly as the user wrote them on the command line (deduplicated)."""
    seen: dict[str, int] = {}
    for m, text in zip(loaded, given):
        k = seen.get(text, 0)
        seen[text] = k + 1
        m.display = text if k == 0 else f"{text}#{k + 1}"


def write_json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, default=str))


def write_run_json(out: Path, command: str, models: list, args, info, t0: float, warnings=(),
                   taps: list[list[str]] | None = None, **extra) -> None:
    """``out/run.json``: what ran (models with fingerprints, images, batches computed / from cache, per-model
    forward passes, skipped images, seconds); then skipped images and warnings are reported on stderr."""
    from . import dist

    write_json(out / "run.json", {
        "command": command,
        "models": [{"spec": m.label, "label": m.spec.label, "fingerprint": m.fingerprint,
                    **({"taps": taps[i]} if taps else {})} for i, m in enumerate(models)],
        "data": args.data, "images": getattr(args, "images", None), "batch_size": getattr(args, "batch_size", None),
        "shuffle": getattr(args, "shuffle", None), "device": models[0].device if models else None,
        "batches_computed": info.batches_computed if info else None,
        "batches_from_cache": info.batches_from_cache if info else None,
        "forward_passes": info.forward_passes if info else {},
        "skipped_images": [s[0] for s in info.skipped_images] if info else [],
        "dropped_batches": info.dropped_batches if info else [],
        "warnings": list(warnings), **extra, "seconds": round(time.perf_counter() - t0, 3),
        "processes": dist.context().world,
    })
    if info:
        report_skips(info)
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)


def report_skips(info) -> None:
    if info.skipped_images:
        print(f"skipped {len(info.skipped_images)} unreadable image(s):", file=sys.stderr)
        for name, why in info.skipped_images[:20]:
            print(f"  {why}", file=sys.stderr)
    for d in info.dropped_batches:
        print(f"dropped {d}", file=sys.stderr)


# ---------------------------------------------------------------- cka


def add_cka(sub) -> None:
    p = sub.add_parser("cka", help="CKA between every layer of every model and every other (and itself)")
    add_model_options(p)
    add_data_options(p)
    p.add_argument("--tokens", choices=("all", "cls", "gap"), default="all",
                   help="representation: all tokens flattened, CLS token, or mean of spatial tokens")
    p.add_argument("--kernel", choices=("linear", "rbf"), default="linear")
    p.add_argument("--rbf-threshold", type=float, default=1.0, help="RBF width as a fraction of the median distance")
    p.add_argument("--estimator", choices=("unbiased", "biased"), default="unbiased",
                   help="unbiased minibatch HSIC_1 (Nguyen et al. 2021) or biased HSIC_0 "
                        "(full-batch CKA when --batch-size >= --images)")
    p.add_argument("--taps", default=None, help="comma-separated tap names (default: the family's CKA taps)")
    p.add_argument("--repeats", type=int, default=1, help="average over R reshuffled image subsets")
    p.add_argument("--verify", action="store_true", help="float64 Grams (slower; for checking precision)")
    p.add_argument("--bootstrap", type=int, default=200, metavar="B",
                   help="resamples of batches for each cell's 95 %% interval (cka_lo, cka_hi); 0: none")
    p.add_argument("--permutations", type=int, default=0, metavar="P",
                   help="random pairings of the permutation null (p_null, null_lo, null_hi), e.g. 100; costs P small "
                        "products per batch and model pair (docs/evidence.md); 0: none")
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap and the permutations")
    p.add_argument("--amp", action="store_true", help="bf16 autocast on GPU (Grams stay float32, sums float64)")
    add_out_option(p, "results/cka")
    p.set_defaults(func=run_cka)


def run_cka(args) -> int:
    from . import charts, dist
    from .data import open_source
    from .run import GramStatistic, cka

    t0 = time.perf_counter()
    ctx = dist.context(args)  # torchrun: this rank's device, shard, reductions
    store = open_store(args)
    source = open_source(args.data)
    models = load_models(args.model, args.device)
    relabel(models, args.model)
    taps_ = tuple(t.strip() for t in args.taps.split(",")) if args.taps else None
    stats = [GramStatistic(taps_ if len(models) == 1 or taps_ is None else None, args.tokens, args.kernel,
                           args.rbf_threshold, "float64" if args.verify else "float32") for _ in models]
    if taps_ is not None and len(models) > 1:
        raise VitlabError("--taps applies to a single model; with several models use their default taps")
    progress = ctx.progress("cka")
    try:
        report = cka(models, source, images=args.images, batch_size=args.batch_size, shuffle=args.shuffle,
                     repeats=args.repeats, statistic=stats, estimator=args.estimator, store=store,
                     progress=progress, amp=args.amp, shard=ctx.shard, reduce=ctx.reduce,
                     bootstrap=args.bootstrap if ctx.world == 1 else 0, permutations=args.permutations, seed=args.seed)
    finally:
        progress.close()
    ctx.reduce_info(report.info)
    if not ctx.is_main:
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    frame = report.to_frame()
    frame.to_csv(out / "cka.csv", index=False)
    written = charts.save_all(charts.cka_pair_charts(frame), out)
    info = report.info
    write_run_json(out, "cka", models, args, info, t0, report.warnings, taps=[s.taps(m) for m, s in zip(models, stats)],
                   images=report.images, repeats=report.repeats, tokens=args.tokens, kernel=args.kernel,
                   estimator=args.estimator, bootstrap=args.bootstrap if ctx.world == 1 else 0,
                   permutations=args.permutations, seed=args.seed)
    print(f"CKA over {report.images} images ({info.batches_computed} batches computed, "
          f"{info.batches_from_cache} from cache): {out / 'cka.csv'}, {len(written)} chart files")
    return 0


# ---------------------------------------------------------------- cache


def add_cache(sub) -> None:
    p = sub.add_parser("cache", help="show or clear the disk cache")
    p.add_argument("action", choices=("info", "clear"))
    p.add_argument("--cache-dir", default=None)
    p.set_defaults(func=run_cache)


def run_cache(args) -> int:
    from .cache import Store

    store = Store(args.cache_dir or "default")
    if args.action == "clear":
        print(f"removed {store.clear()} entries from {store.directory}")
    else:
        info = store.info()
        print(f"{info['directory']}: {info['entries']} entries, {info['bytes'] / 2**20:.1f} MiB "
              f"of {info['size_limit'] / 2**30:.1f} GiB")
    return 0


# ---------------------------------------------------------------- registry and entry point


def add_models(sub) -> None:
    p = sub.add_parser("taps", help="list a model's taps (representation points) and its family")
    add_model_options(p, multiple=False)
    p.set_defaults(func=run_taps)


def run_taps(args) -> int:
    from . import taps
    from .models import load

    m = load(args.model, args.device)
    print(f"{m.label}: family {taps.family(m.model)}, input {tuple(m.data_config['input_size'])}, "
          f"fingerprint {m.fingerprint}")
    default = set(taps.default_taps(m.model))
    for name, point in taps.tap_table(m.model).items():
        print(f"  {name:32s} {point.shape:14s} {'(default CKA tap)' if name in default else ''}")
    return 0


def _zoo_cli(sub) -> None:
    from . import zoo

    zoo.add_cli(sub)


from .cli_analyses import ANALYSIS_COMMANDS  # noqa: E402 (it imports the helpers above)

from .cli_attention import ATTENTION_COMMANDS  # noqa: E402
from .cli_evidence import EVIDENCE_COMMANDS  # noqa: E402

from .cli_report import REPORT_COMMANDS  # noqa: E402

COMMANDS: list[Callable] = [add_cka, add_models, add_cache, _zoo_cli, *ANALYSIS_COMMANDS, *ATTENTION_COMMANDS,
                            *EVIDENCE_COMMANDS, *REPORT_COMMANDS]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vitlab", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for add in COMMANDS:
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from . import dist

    try:
        with dist.guard():  # torchrun: a failing rank stops the others, with its rank in the message
            return int(args.func(args) or 0)
    except VitlabError as e:
        print(f"vitlab: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("vitlab: interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        print("vitlab: error: out of memory: lower --batch-size or --images", file=sys.stderr)
        return 2
    except RuntimeError as e:  # torch.cuda.OutOfMemoryError and CPU allocation failures
        if "out of memory" not in str(e).lower() and "can't allocate" not in str(e).lower():
            raise
        print("vitlab: error: out of memory: lower --batch-size (or use --amp on a GPU)", file=sys.stderr)
        return 2
