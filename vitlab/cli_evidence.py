"""``vitlab tour``: the paper's claims checked on models, each with its control and 95 % interval.

Writes ``tour.csv`` (figure, claim, verdict, statistic, lo, hi, control, evidence), ``tour_intervals.csv`` (every
estimate drawn in the charts), one chart per figure (PNG/SVG) and ``run.json``.
"""

from __future__ import annotations

import time
from dataclasses import fields
from pathlib import Path

from .cli import add_data_options, add_model_options, add_out_option, load_models, open_store, relabel, write_run_json


def add_evidence_options(p) -> None:
    """``--bootstrap B`` and ``--seed``: the resampling behind every interval (see docs/evidence.md)."""
    p.add_argument("--bootstrap", type=int, default=200, metavar="B",
                   help="bootstrap resamples for each 95 %% interval (over batches, images or few-shot draws)")
    p.add_argument("--seed", type=int, default=0, help="seed of the resampling and of the permutation nulls")


def add_tour(sub) -> None:
    from .tour import TourOptions

    defaults = {f.name: f.default for f in fields(TourOptions)}
    p = sub.add_parser("tour", help="check the paper's claims on models, with controls and 95 %% intervals "
                                    "(Figs 1-12)")
    add_model_options(p)
    add_data_options(p, images=defaults["images"], batch_size=defaults["batch_size"])
    p.set_defaults(data="fashion-mnist:test")
    p.add_argument("--control", choices=("random", "none"), default=defaults["control"],
                   help="random: untrained twins (NAME@random) as controls where a claim depends on training")
    p.add_argument("--only", default=None, help="comma-separated checks: cka, distance, heads, receptive, skips, "
                                                "removal, localization, gap, probes, scale")
    p.add_argument("--permutations", type=int, default=defaults["permutations"],
                   help="permutations of the Fig 5 null")
    p.add_argument("--probe-draws", type=int, default=defaults["probe_draws"], help="few-shot draws for Fig 11")
    add_evidence_options(p)
    add_out_option(p, "results/tour")
    p.set_defaults(func=run_tour_command)


def run_tour_command(args) -> int:
    from .charts import save
    from .context import Run
    from .data import open_source
    from .progress import tqdm_progress
    from .tour import TourOptions, run_tour

    t0 = time.perf_counter()
    source = open_source(args.data)
    models = load_models(args.model, args.device)
    relabel(models, args.model)
    only = tuple(k.strip() for k in args.only.split(",") if k.strip()) if args.only else ()
    opts = TourOptions(images=args.images, shuffle=args.shuffle, batch_size=args.batch_size, control=args.control,
                       only=only, permutations=args.permutations, probe_draws=args.probe_draws)
    progress = tqdm_progress("tour")
    try:
        report = run_tour(models, source, opts, Run(store=open_store(args), progress=progress, seed=args.seed,
                                                    bootstrap=args.bootstrap))
    finally:
        progress.close()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report.to_frame().to_csv(out / "tour.csv", index=False)
    frames = [f for f in report.frames.values() if len(f)]
    if frames:
        import pandas as pd

        pd.concat(frames, ignore_index=True).to_csv(out / "tour_intervals.csv", index=False)
    for figure, chart in report.charts.items():
        if len(report.frames.get(figure, ())):
            save(chart, out, "tour_" + figure.lower().replace(" ", "").replace("-", "_"))
    write_run_json(out, "tour", models, args, report.info, t0, control=args.control, bootstrap=args.bootstrap,
                   seed=args.seed, verdicts=report.summary(), checks=[r.figure for r in report.rows])
    for r in report.rows:
        print(f"{r.figure:9s} {r.verdict:10s} {r.statistic:8.3f} [{r.lo:.3f}, {r.hi:.3f}] vs {r.control:.3f} "
              f"({r.control_label})")
    print(f"tour: {out / 'tour.csv'}")
    return 0


EVIDENCE_COMMANDS = [add_tour]
