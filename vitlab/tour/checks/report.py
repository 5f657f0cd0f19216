"""The tour's options and its report (tour.csv, the table a person reads, the headline)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...engine.context import RunInfo
from ...errors import VitlabError
from ...options import DataOptions, option
from .base import Check
from .words import CLAIMS, LEARNED

# One tour default for the app's Paper tour page, the slides and `vitlab tour` / `vitlab report` (issue 33: the page used
# the sidebar's 64 images, 4 batches with a t on 3 df, the report 256): N images in batches of M give T = N / M
# >= 8 jackknife units. 256 in batches of 32 is 8 batches; the cold tour on the zoo default (models and their
# untrained twins, the Fig 8/10/12 controls) measured in docs/evidence.md.
TOUR_IMAGES, TOUR_BATCH, TOUR_BOOTSTRAP, TOUR_SEED = 256, 32, 200, 0

# A zoo ViT's pooling-only twin (same recipe, global average pooling, fc_norm=False keeps the final LayerNorm in
# place): Fig 10 follows the tour's ViT when it has one, so a 196-token model A is not compared on 16-token models.
POOLING_TWINS = {"zoo:vit-cls-14": "zoo:vit-gap-14"}
GAP_PAIR = ("zoo:vit-cls", "zoo:vit-gap")  # no pooling-only twin of the tour's ViT: the 16-token zoo pair


@dataclass(frozen=True)
class TourOptions(DataOptions):
    """Options of the paper tour (``vitlab tour``, ``vitlab report``, the Paper tour page and the slides)."""

    images: int | None = option(TOUR_IMAGES, "number of images (first N, or shuffled)", short="-n")
    batch_size: int = option(TOUR_BATCH, "images per batch: the intervals resample batches", short="-b")
    control: str = option("random", "random: untrained twins (NAME@random) as controls where a claim depends on "
                          "training; none", choices=("random", "none"))
    permutations: int = option(200, "permutations of the Fig 5 head-label null")
    local_margin: float = option(0.25, "a head is local when it attends at least this fraction closer than "
                                 "uniform attention (Figs 3-4)")
    rf_images: int = option(32, "images for the receptive fields (a backward pass each)")
    probe_draws: int = option(5, "few-shot draws for the Fig 11 interval")
    probe_shots: int = option(10, "training images per class in each draw")
    probe_test: int = option(200, "test images per draw")
    noskip: tuple[str, ...] = option(("zoo:vit-cls", "zoo:vit-cls-noskip"), "Fig 8: MODEL,THE-SAME-RETRAINED-"
                                     "WITHOUT-A-SKIP", kind="strs")
    noskip_block: int = option(3, "Fig 8: the block trained without its skips")
    gap_pair: tuple[str, ...] | None = option(None, "Fig 10: CLS-MODEL,GAP-MODEL (default: the tour's ViT and its "
                                              "pooling-only zoo twin, e.g. zoo:vit-cls-14,zoo:vit-gap-14; else "
                                              "zoo:vit-cls,zoo:vit-gap)", kind="strs")
    scale_pairs: tuple[str, ...] = option(("zoo:vit-cls-3pct vs zoo:vit-cls", "zoo:vit-cls-10pct vs zoo:vit-cls"),
                                          "Fig 12: comma-separated 'SMALLER-DATA vs FULL-DATA' model pairs",
                                          kind="strs")
    seed_pair: str = option("zoo:vit-cls-seed1 vs zoo:vit-cls", "Fig 12's null: 'OTHER-SEED vs FULL-DATA', the same "
                            "recipe and data with another seed")
    only: tuple[str, ...] | None = option(None, "comma-separated checks to run (default: all): "
                                          + ", ".join(CLAIMS), kind="strs")

    def pairs(self) -> list[tuple[str, str]]:
        """``scale_pairs`` as (smaller-data, full-data) spec tuples."""
        return [_pair(text, "scale pair", "SMALLER-DATA vs FULL-DATA", "zoo:vit-cls-3pct vs zoo:vit-cls")
                for text in self.scale_pairs]

    def seed_control(self) -> tuple[str, str]:
        """``seed_pair`` as (other-seed, full-data) spec tuple."""
        return _pair(self.seed_pair, "seed pair", "OTHER-SEED vs FULL-DATA", "zoo:vit-cls-seed1 vs zoo:vit-cls")

    def gap_models(self, vit_label: str | None) -> tuple[tuple[str, str], bool]:
        """Fig 10's (CLS, GAP) specs and whether they follow the tour's ViT: ``gap_pair`` when given, else the
        ViT's pooling-only zoo twin (:data:`POOLING_TWINS`), else :data:`GAP_PAIR`."""
        if self.gap_pair:
            if len(self.gap_pair) != 2:
                raise VitlabError(f"--gap-pair takes two models (CLS, GAP), not {len(self.gap_pair)}")
            return (self.gap_pair[0], self.gap_pair[1]), vit_label == self.gap_pair[0]
        if vit_label in POOLING_TWINS:
            return (vit_label, POOLING_TWINS[vit_label]), True
        return GAP_PAIR, vit_label == GAP_PAIR[0]


def _pair(text: str, what: str, form: str, example: str) -> tuple[str, str]:
    parts = [t.strip() for t in text.split(" vs ")]
    if len(parts) != 2 or not all(parts):
        raise VitlabError(f"{what} '{text}' must read '{form}', e.g. '{example}'")
    return parts[0], parts[1]


@dataclass
class TourReport:
    rows: list[Check]
    charts: dict  # figure -> Altair chart of the statistic and control with their intervals
    models: list[str]
    info: RunInfo
    frames: dict = field(default_factory=dict)  # figure -> the interval chart's data (CSV export)
    figures: dict = field(default_factory=dict)  # figure -> the paper-style figure's data (frames), from this run
    paper_charts: dict = field(default_factory=dict)  # figure -> Altair: the paper-style figure
    passes: list = field(default_factory=list)  # the planned passes (vitlab.tour.plan): one per model set and images

    COLUMNS = ("figure", "claim", "pattern", "statistic_label", "statistic", "lo", "hi", "control", "control_label",
               "learned", "effect", "effect_lo", "effect_hi", "twin", "twin_lo", "twin_hi", "learned_label",
               "interval_unit", "interval_units", "interval_method", "interval_note", "control_note", "models",
               "images", "batches", "batch_size", "evidence")

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame([{k: getattr(r, k) for k in self.COLUMNS} for r in self.rows], columns=self.COLUMNS)

    def table(self):
        """The table a person reads (the Paper tour page): one row per check, every number in words with its 95 %
        interval (``format_estimate``), no empty or "None" cell: figure, pattern, statistic, on these models
        (statistic against its control), learned, trained vs untrained, interval, models, data."""
        import pandas as pd

        rows = []
        for r in self.rows:
            w = r.lines()
            rows.append({"figure": r.figure, "pattern": r.pattern, "statistic": w["statistic"],
                         "on these models": w["pattern_numbers"], "learned": r.learned,
                         "trained vs untrained": w["learned_numbers"], "interval": r.interval,
                         "models": r.models or "none", "data": w["data"]})
        return pd.DataFrame(rows, columns=["figure", "pattern", "statistic", "on these models", "learned",
                                           "trained vs untrained", "interval", "models", "data"])

    def markdown(self) -> str:
        """:meth:`table` as a Markdown table (docs/evidence.md and the README's tour table are made by it), with the
        evidence in words; ``|`` in a cell escaped."""
        frame = self.table().assign(evidence=[r.evidence for r in self.rows])
        cells = [list(frame.columns)] + frame.astype(str).values.tolist()
        lines = ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in cells]
        return "\n".join(lines[:1] + ["|" + "---|" * len(frame.columns)] + lines[1:])

    def summary(self) -> dict[str, int]:
        """Counts of the pattern answers."""
        return {v: sum(r.pattern == v for r in self.rows) for v in ("shown", "not shown", "can't tell")}

    def learned_summary(self) -> dict[str, int]:
        """Counts of the learned answers."""
        return {v: sum(r.learned == v for r in self.rows) for v in LEARNED}

    def intervals_frame(self):
        """Every estimate drawn in the charts (figure, label, role, value, lo, hi): ``tour_intervals.csv``."""
        import pandas as pd

        frames = [f for f in self.frames.values() if len(f)]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
            columns=["figure", "label", "role", "value", "lo", "hi", "unit", "units", "interval"])

    @staticmethod
    def stem(figure: str) -> str:
        """File stem of a figure's exports: 'Figs 1-2' -> 'tour_figs1_2'."""
        return "tour_" + figure.lower().replace(" ", "").replace("-", "_")

    def paper_frame(self, figure: str):
        """The data the paper-style figure of ``figure`` is drawn from, as one table (a ``part`` column names each
        of its frames, e.g. 'cka', 'distance'): the CSV beside its PNG/SVG."""
        import pandas as pd

        parts = [f.assign(part=name) for name, f in (self.figures.get(figure) or {}).items()
                 if isinstance(f, pd.DataFrame)]
        return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["part"])

    def paper_tables(self) -> dict:
        """File stem -> the paper-style figure's data, for each figure drawn (tour_figs1_2_paper.csv)."""
        return {self.stem(f) + "_paper": self.paper_frame(f) for f in self.paper_charts}

    def chart_files(self) -> dict:
        """File stem -> chart, for the figures that were measured: the interval chart (tour_figs1_2) and the
        paper-style figure (tour_figs1_2_paper)."""
        out = {self.stem(f): c for f, c in self.charts.items() if len(self.frames.get(f, ()))}
        out.update({self.stem(f) + "_paper": c for f, c in self.paper_charts.items()})
        return out

    def headline(self) -> list[str]:
        """One line per check (its pattern and learned answers in words, never "nan") and the counts."""
        return [f"{r.figure:9s} pattern {r.lines()['pattern_text']}; learned {r.learned}" for r in self.rows] + [
            "tour: pattern " + ", ".join(f"{n} {v}" for v, n in self.summary().items()) + "; learned "
            + ", ".join(f"{n} {v}" for v, n in self.learned_summary().items())]
