"""The bookkeeping commands beside the table's rows: ``taps`` (a model's representation points), ``cache`` (show or
clear the disk cache) and ``zoo`` (vitlab's own reference models, whose parser is :mod:`vitlab.zoo.cli`'s). They run
in one process, with no process group and no input pipeline (``vitlab.cli.main``)."""

from __future__ import annotations

from pathlib import Path

from .flags import DEVICE_HELP, HELP, MODEL_HELP


def add_taps(sub) -> None:
    p = sub.add_parser("taps", help=HELP["taps"])
    p.add_argument("--model", "-m", required=True, help=MODEL_HELP)
    p.add_argument("--device", default="auto", help=DEVICE_HELP)
    p.set_defaults(func=run_taps)


def run_taps(args) -> int:
    from ..inputs import taps
    from ..inputs.models import load

    m = load(args.model, args.device)
    print(f"{m.label}: family {m.family}, input {tuple(m.data_config['input_size'])}, layout {m.memory_format}, "
          f"fingerprint {m.fingerprint}")
    default = set(taps.default_taps(m.model))
    for name, point in taps.tap_table(m.model).items():
        print(f"  {name:32s} {point.shape:14s} {'(default CKA tap)' if name in default else ''}")
    return 0


def add_cache(sub) -> None:
    p = sub.add_parser("cache", help=HELP["cache"])
    p.add_argument("action", choices=("info", "clear"))
    p.add_argument("--cache-dir", default=None)
    p.set_defaults(func=run_cache)


def run_cache(args) -> int:
    from ..inputs.cache import Store, clear, default_dir, holds_cache, size_budget_gb

    directory = Path(args.cache_dir or default_dir()).expanduser()
    if args.action == "clear":  # without opening a Store: clearing must work on a damaged database too
        n, what = clear(directory)
        print(f"removed {n} {what} from {directory}")
        return 0
    size_budget_gb()  # a bad VITLAB_CACHE_GB is named even when there is no cache yet
    if not (directory.is_dir() and holds_cache(directory)):  # info never makes a cache where there is none
        print(f"{directory}: no cache yet")
        return 0
    store = Store(directory)
    info = store.info()
    if not info["enabled"]:
        print(f"{directory}: the cache cannot be read ({info.get('error') or 'see the warning above'})")
        return 0
    print(f"{info['directory']}: {info['entries']} entries, {info['bytes'] / 2**20:.1f} MiB "
          f"of {info['size_limit'] / 2**30:.1f} GiB" + (" (read-only here)" if info["mode"] == "ro" else ""))
    store.close()
    return 0


def add_zoo(sub) -> None:
    from .. import zoo

    zoo.add_cli(sub)

