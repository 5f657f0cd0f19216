"""The ``vitlab zoo {list,train,eval}`` command (also ``python -m vitlab.zoo``). ``--help`` and ``list`` import
neither torch nor timm: they read the registry and the cards."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vitlab.errors import VitlabError

from .registry import RECIPES, ZOO_DIR, card


def listing(root: str | Path | None = None) -> list[dict]:
    """One row per recipe: name, arch, params, fraction, test accuracy, checkpoint MB (None when untrained)."""
    rows = []
    for name, r in RECIPES.items():
        try:
            c = card(name, root)
        except VitlabError:
            c = {}
        rows.append(
            {
                "name": name,
                "arch": r.arch,
                "params": c.get("params"),
                "fraction": r.fraction,
                "test_accuracy": c.get("test_accuracy"),
                "train_seconds": c.get("train_seconds"),
                "mb": round(c["checkpoint_bytes"] / 2**20, 2) if "checkpoint_bytes" in c else None,
            }
        )
    return rows


def _cmd_list(args: argparse.Namespace) -> int:
    print(f"{'name':<16} {'arch':<7} {'params':>8} {'data':>5} {'test acc':>8} {'MB':>5}  purpose")
    for row in listing(args.root):
        acc = f"{row['test_accuracy']:.4f}" if row["test_accuracy"] is not None else "-"
        params = f"{row['params'] / 1e3:.0f}k" if row["params"] else "-"
        mb = f"{row['mb']:.1f}" if row["mb"] is not None else "-"
        print(
            f"{row['name']:<16} {row['arch']:<7} {params:>8} {row['fraction']:>5.0%} {acc:>8} {mb:>5}  "
            f"{RECIPES[row['name']].purpose}"
        )
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    from .training import train  # torch and timm: only for the commands that run a model

    c = train(
        args.name,
        out=args.out,
        device=args.device,
        max_steps=args.max_steps,
        threads=args.threads,
        log_every=args.log_every,
    )
    print(
        f"{c['name']}: test accuracy {c['test_accuracy']:.4f} on {c['test_images']} images, "
        f"{c['train_seconds']:.0f} s on {c['device']}; wrote {Path(args.out or ZOO_DIR) / c['name']}.safetensors"
    )
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    from .training import evaluate

    res = evaluate(args.name, images=args.images, root=args.root, path=args.data)
    print(f"{res['name']}: test accuracy {res['accuracy']:.4f} on {res['images']} images ({res['data']})")
    return 0


def add_cli(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add `zoo {list,train,eval}` to a CLI; each leaf sets `func(args) -> exit code`."""
    p = subparsers.add_parser("zoo", help="vitlab's own Fashion-MNIST reference models")
    sub = p.add_subparsers(dest="zoo_command", required=True)
    pl = sub.add_parser("list", help="the zoo's models with their test accuracy")
    pl.add_argument("--root", default=None, help="folder of checkpoints and cards (default assets/zoo)")
    pl.set_defaults(func=_cmd_list)
    pt = sub.add_parser("train", help="train one zoo model from scratch (seeded)")
    pt.add_argument("name", help=f"one of: {', '.join(RECIPES)}")
    pt.add_argument("--out", default=None, help="output folder (default assets/zoo)")
    pt.add_argument("--device", default="auto", help="auto (GPU when present), cpu, cuda, cuda:1, ...")
    pt.add_argument("--max-steps", type=int, default=None, help="stop early (smoke tests)")
    pt.add_argument("--threads", type=int, default=1, help="CPU threads (default 1, as the shipped models)")
    pt.add_argument("--log-every", type=int, default=0, help="print accuracy on the bundled slice every N steps")
    pt.set_defaults(func=_cmd_train)
    pe = sub.add_parser("eval", help="test accuracy of a shipped zoo model")
    pe.add_argument("name", help=f"one of: {', '.join(RECIPES)}")
    pe.add_argument("--images", type=int, default=None, help="first N test images (default all)")
    pe.add_argument("--root", default=None, help="folder of checkpoints and cards (default assets/zoo)")
    pe.add_argument("--data", default=None, help="folder of the Fashion-MNIST IDX files")
    pe.set_defaults(func=_cmd_eval)
    return p


def main(argv: list[str] | None = None) -> int:
    """`python -m vitlab.zoo ...` without the `zoo` word: list | train NAME | eval NAME."""
    parser = argparse.ArgumentParser(prog="vitlab")
    add_cli(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["zoo", *(sys.argv[1:] if argv is None else argv)])
    try:
        return args.func(args)
    except VitlabError as e:
        print(f"vitlab: {e}", file=sys.stderr)
        return 1
