"""A check and its two answers (pattern, learned), built from estimates: the pure core every claim family uses."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...stats.evidence import Estimate, verdict
from .words import CLAIMS, CONTROL_NOTES, NOT_LEARNED, STATISTICS


@dataclass(frozen=True)
class Learned:
    """The second question of a claim: is the trained models' ``effect`` more than the untrained twins' ``twin``
    (the same statistic, on ``NAME@random``)? ``label`` says what was compared, or why it does not apply."""

    effect: Estimate | None
    twin: Estimate | None
    label: str = "untrained twins"
    applies: bool = True

    def answer(self, direction: str = "greater") -> str:
        if not self.applies:
            return "n.a."
        if self.effect is None or self.twin is None:
            return "can't tell"
        return {"shown": "yes", "not shown": "no"}.get(verdict(self.effect, self.twin, direction), "can't tell")


@dataclass(frozen=True)
class Check:
    """One row of the tour: a claim and its two answers with their intervals.

    pattern (shown / not shown / can't tell): do these models show what the paper describes, against the claim's
    own null (``control``: chance, uniform attention, zero, the other model)? learned (yes / no / can't tell /
    n.a.): is the trained models' ``effect`` more than the untrained twins' (``twin``)? ``claim`` is the paper's
    words only; ``control_note`` names the app's own control and why it matters; ``models`` the models measured;
    ``images`` and ``batches`` the tour's images. :meth:`lines` renders it all as words (never "nan").
    """

    figure: str
    title: str
    claim: str
    pattern: str
    statistic: float
    lo: float
    hi: float
    control: float
    control_label: str
    learned: str
    effect: float
    effect_lo: float
    effect_hi: float
    twin: float
    twin_lo: float
    twin_hi: float
    learned_label: str
    interval_unit: str
    interval_units: int
    interval_method: str
    evidence: str
    statistic_label: str = ""
    control_note: str = ""
    interval_note: str = ""  # how the interval was kept in its range or widened (Estimate.note)
    models: str = ""  # the models this check measured, '; '-separated
    images: int = 0
    batches: int = 0
    batch_size: int = 0
    effect_note: str = ""  # how the learned answer's intervals were kept in range (Estimate.note of the effect)
    data_note: str = ""  # what the counts are when not the tour's images (Fig 6's first images, Fig 11's probe pool)
    control_lo: float = float("nan")  # the control's 95 % interval when it is measured (the CNN's, the other model's)
    control_hi: float = float("nan")
    # the statistic's range (its control's too) and the learned effect's (its twin's), when they have one: an interval
    # that spans it says "uninformative at this size" (NaN: no finite range)
    range_lo: float = float("nan")
    range_hi: float = float("nan")
    effect_range_lo: float = float("nan")
    effect_range_hi: float = float("nan")

    @property
    def verdict(self) -> str:
        """The pattern answer (the tour's verdict before issue 28)."""
        return self.pattern

    @property
    def interval(self) -> str:
        """What the statistic's interval rests on, in words."""
        if not self.interval_unit:
            return "no interval" if self.statistic == self.statistic else "not measured"
        if self.interval_method.startswith("too few"):
            return self.interval_method
        base = f"{self.interval_method} over {self.interval_units} {self.interval_unit}"
        return f"{base}; {self.interval_note}" if self.interval_note else base

    @property
    def data_text(self) -> str:
        """"256 images in 8 batches of 32": the images this check's statistic used (Fig 6 its first 32 images in
        batches of 8, Fig 11 its probe pool), with ``data_note`` when they are not the tour's images."""
        if not self.images:
            return "images not recorded"
        text = (f"{self.images} image{'s' * (self.images != 1)} in {self.batches} batch{'es' * (self.batches != 1)} "
                f"of {self.batch_size}")
        return f"{text} ({self.data_note})" if self.data_note else text

    def lines(self) -> dict[str, str]:
        """The row in words for the app, the slides and the report: paper (the paper's claim only), statistic (its
        name), control_note (the app's control and why it matters), pattern_text and learned_text (the answer and
        its numbers; pattern_numbers and learned_numbers without the answer), interval_text, models and data
        (n images in T batches). No value prints as "nan" or "n/a": an unmeasured check says
        why, an interval too few units wide says "too few batches for an interval", one that spans the statistic's
        whole range "uninformative at this size: raise --images"; a fixed control reads "(fixed at 0)"; negative
        numbers have "−"."""
        from ...stats.evidence import format_estimate

        def say(value: float, lo: float, hi: float, bounds: tuple[float, float]) -> str:
            return format_estimate(value, lo, hi, self.interval_unit, self.interval_units, bounds=bounds)

        rng, effect_rng = (self.range_lo, self.range_hi), (self.effect_range_lo, self.effect_range_hi)
        if self.statistic != self.statistic:  # NaN: the check could not be measured
            pattern = f"not measured: {self.evidence}" if self.evidence else "not measured"
            learned = self.learned_label.removeprefix("n.a.: ")
        else:
            stat = say(self.statistic, self.lo, self.hi, rng)
            if self.control != self.control:  # e.g. a CNN whose branches are all zero (untrained): no ratio at all
                pattern = f"{stat} against {self.control_label}, which could not be measured (see the evidence)"
            elif self.control == 0 or not (self.control_lo == self.control_lo and self.control_lo < self.control_hi):
                pattern = f"{stat} against {fixed_reference(self.control_label, self.control)}"
            else:
                pattern = f"{stat} against {self.control_label}, {say(self.control, self.control_lo, self.control_hi, rng)}"
            if self.learned == "n.a.":
                learned = self.learned_label.removeprefix("n.a.: ")
            elif not self.learned_label.startswith("untrained") and (self.effect != self.effect
                                                                       or self.twin != self.twin):
                learned = self.learned_label  # no twins were run: the label says so and how to run them
            elif self.effect != self.effect:
                learned = (f"neither the trained value nor the {self.learned_label} could be formed, see the evidence"
                           if self.twin != self.twin else "the trained value could not be formed, see the evidence")
            else:
                eff = say(self.effect, self.effect_lo, self.effect_hi, effect_rng)
                if self.twin != self.twin:
                    learned = f"trained {eff}; only the {self.learned_label} could not be formed, see the evidence"
                else:
                    twin = say(self.twin, self.twin_lo, self.twin_hi, effect_rng)
                    learned = f"trained {eff} against the {self.learned_label} {twin}"
                learned += f"; intervals {self.effect_note}" if self.effect_note else ""
        return {"paper": self.claim, "statistic": self.statistic_label, "control_note": self.control_note,
                "pattern_text": f"{self.pattern}: {pattern}", "learned_text": f"{self.learned}: {learned}",
                "pattern_numbers": pattern, "learned_numbers": learned,
                "interval_text": f"95 % interval: {self.interval}",
                "models": self.models, "data": self.data_text}


def fixed_reference(label: str, value: float) -> str:
    """A fixed control (no interval) in words: its label, and its value unless the label already states it
    ("uniform attention at 0, local from 0.25"): "no margin (fixed at 0)", never a bare ", 0" after the label."""
    from ...stats.evidence import number

    v = "0" if value == 0 else number(value)
    return label if f" at {v}" in f" {label}" else f"{label} (fixed at {v})"


def _bounds(*estimates: Estimate | None) -> tuple[float, float]:
    """The first finite range among ``estimates`` (``Estimate.bounds``), or (NaN, NaN)."""
    for e in estimates:
        if e is not None and e.bounds is not None:
            return e.bounds
    return float("nan"), float("nan")


def _triple(e: Estimate | None) -> tuple[float, float, float]:
    nan = float("nan")
    return (nan, nan, nan) if e is None else (e.value, e.lo, e.hi)


def make_check(key: str, stat: Estimate, control: Estimate, control_label: str, evidence: str,
               direction: str = "greater", floor: float | None = None, force: str | None = None,
               learned: Learned | None = None, note: str | None = None) -> Check:
    """The :class:`Check` of claim ``key``: the pattern by :func:`vitlab.stats.evidence.verdict` (unless ``force``), the
    learned answer from ``learned`` (n.a. for the claims in :data:`NOT_LEARNED`); ``note``: the control's line
    (default :data:`CONTROL_NOTES`)."""
    from ...stats.evidence import interval_columns

    c = CLAIMS[key]
    v = force or verdict(stat, control, direction, floor)
    few = too_few(stat)
    if few:  # issue 37: below MIN_UNITS units a run cannot answer, whatever way its point estimate goes
        v, evidence = "can't tell", f"{few}; {evidence}"
    if key in NOT_LEARNED:
        learned = Learned(None, None, NOT_LEARNED[key], applies=False)
    learned = learned or Learned(None, None, "no untrained twins: run with --control random")
    units = interval_columns(stat.unit, stat.units, stat.method) if stat.unit else \
        {"interval_unit": "", "interval_units": 0, "interval_method": ""}
    return Check(c.figure, c.title, c.claim, v, stat.value, stat.lo, stat.hi, control.value, control_label,
                 "can't tell" if few and learned.applies else learned.answer(direction),
                 *_triple(learned.effect), *_triple(learned.twin), learned.label,
                 units["interval_unit"], units["interval_units"], units["interval_method"], evidence,
                 STATISTICS[key], CONTROL_NOTES[key] if note is None else note, stat.note,
                 effect_note=learned.effect.note if learned.effect is not None else "", control_lo=control.lo,
                 control_hi=control.hi, range_lo=_bounds(stat, control)[0], range_hi=_bounds(stat, control)[1],
                 effect_range_lo=_bounds(learned.effect, learned.twin)[0],
                 effect_range_hi=_bounds(learned.effect, learned.twin)[1])


def too_few(stat: Estimate) -> str:
    """Why ``stat`` cannot answer a claim ("too few batches for an interval: 2 < 4"), or "" when it can: a resampled
    statistic over fewer than :data:`~vitlab.stats.evidence.MIN_UNITS` units states no direction (issue 37)."""
    from ...stats.evidence import MIN_UNITS

    if stat.unit and stat.units < MIN_UNITS and stat.value == stat.value:
        return f"too few {stat.unit} for an interval: {stat.units} < {MIN_UNITS}"
    return ""


def cant_tell(key: str, why: str) -> Check:
    """A check that could not be measured (missing model, wrong data): "can't tell" twice, and why."""
    c = CLAIMS[key]
    nan = float("nan")
    learned = "n.a." if key in NOT_LEARNED else "can't tell"
    return Check(c.figure, c.title, c.claim, "can't tell", nan, nan, nan, nan, "none", learned, nan, nan, nan, nan,
                 nan, nan, NOT_LEARNED.get(key, "not measured"), "", 0, "", why, STATISTICS[key], CONTROL_NOTES[key])


def difference(a: Estimate, b: Estimate, reps_a: np.ndarray | None = None,
               reps_b: np.ndarray | None = None) -> Estimate:
    """a − b with the interval of the paired replicates (the same resamples of the same units), or, without them,
    no interval."""
    if reps_a is None or reps_b is None:
        return Estimate(a.value - b.value, np.nan, np.nan, a.unit, a.units, a.method)
    d = np.asarray(reps_a, dtype=np.float64) - np.asarray(reps_b, dtype=np.float64)
    if a.method == "jackknife t":
        return Estimate.jackknife(a.value - b.value, d, a.unit)
    return Estimate.from_samples(a.value - b.value, d, unit=a.unit, units=a.units)


def _learned(effect: Estimate | None, twin: Estimate | None, label: str) -> Learned | None:
    return Learned(effect, twin, label) if twin is not None else None
