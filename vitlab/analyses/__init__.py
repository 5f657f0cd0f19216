"""Analyses: one module per analysis of the paper (or beyond it), each ``fn(models, source, opts, run) -> result``
built on the engine's pass, with its per-batch statistic, accumulator, options dataclass and result.

The table that lists them for the CLI, the app and the docs is ``vitlab.table`` (one row per analysis); it sits
above this folder and ``vitlab.tour`` because the tour, built on these analyses, is one of its rows.
An analysis knows no front end (CLI, app, table) and no tour (tests/test_layout.py checks it).
"""
