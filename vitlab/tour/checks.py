"""The paper's claims as checks that can fail (the pure part of ``vitlab.tour``): claims, checks, options, report.

Every claim gets two answers (issue 28). **pattern**: do these models show what the paper describes, against the
claim's own null (chance, uniform attention, zero, the other model)? "shown", "not shown" or "can't tell"
(:func:`vitlab.stats.evidence.verdict`: shown only when the statistic's interval clears the null's). **learned**: is it
more than the same architectures show untrained (the twins, ``NAME@random``)? "yes", "no", "can't tell", or "n.a."
where the comparison is between two trained models (Figs 8, 10, 12). The pure check functions below take estimates
(value and interval) and plain arrays; :func:`run_tour` measures them on models (``vitlab/tour/measure.py``).

    report = tour.run_tour([vit, cnn], source, TourOptions(), Run(store=Store(), bootstrap=200, seed=0))
    report.to_frame()      # tour.csv: figure, claim, pattern, statistic, lo, hi, control, learned, twin, ...
    report.charts[figure]  # Altair: statistic and control with their 95 % intervals

Shapes: B resamples, L layers, H heads.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..engine.context import RunInfo
from ..errors import VitlabError
from ..options import DataOptions, option
from ..stats.evidence import Estimate, verdict


@dataclass(frozen=True)
class Claim:
    figure: str
    title: str
    claim: str


# Only what the paper says (issue 33): the app's own controls (untrained twins, nulls, the other-seed model) are
# named on their own line, Check.control_note, never inside the paper's words.
CLAIMS: dict[str, Claim] = {
    "cka": Claim("Figs 1-2", "Representation structure",
                 "ViTs have a more uniform representation structure than ResNets: their layers are more similar "
                 "to each other, while ResNet similarity falls off in stages."),
    "distance": Claim("Figs 3-4", "Local and global attention",
                      "Lower ViT layers have both local and global heads; higher layers attend globally."),
    "heads": Claim("Fig 5", "Local heads resemble convolutions",
                   "The more local a lower-layer ViT head, the more similar it is to the ResNet's lower layers."),
    "receptive": Claim("Fig 6", "Receptive fields",
                       "ViT receptive fields are larger than ResNet ones from the lowest layers on: attention "
                       "widens the field more than a convolutional block does."),
    "skips": Claim("Fig 7", "Strong skip connections",
                   "ViT skip connections are much more influential than ResNet ones: the norm of the skip "
                   "dominates the norm of the branch."),
    "removal": Claim("Fig 8", "Skip removal",
                     "A ViT trained without one block's skip connection has dissimilar representations before and "
                     "after that block."),
    "localization": Claim("Fig 9", "Spatial localization",
                          "ViT tokens in higher layers keep their own position's information better than ResNet "
                          "positions."),
    "gap": Claim("Fig 10", "CLS vs GAP localization",
                 "Training with global average pooling instead of a CLS token weakens localization."),
    "probes": Claim("Fig 11", "Linear probes",
                    "In a CLS-trained ViT the CLS token becomes a good representation only in the higher layers, "
                    "while the mean of the spatial tokens is better in the lower ones."),
    "scale": Claim("Fig 12", "Data scale",
                   "With less training data, the higher layers' representations differ most from the full-data "
                   "model's."),
}

# The statistic of each check in words (Check.statistic_label), one level of parentheses at most.
STATISTICS: dict[str, str] = {
    "cka": "ViT minus ResNet mean CKA between different layers of the same model",
    "distance": "locality of the most local first-block head: 1 − its mean attention distance / uniform attention's",
    "heads": "−Spearman ρ between a lower-layer head's attention distance and its CKA with the ResNet's lower layers",
    "receptive": "growth of the 50 % receptive-field radius across the ViT's first attention sublayer and its "
                 "residual, as a fraction of the input side",
    "skips": "median ratio ‖z‖ / ‖f(z)‖ of skip to branch norm in the ViT, over sublayers and tokens",
    "removal": "mean CKA between the layers before and after the block retrained without its skips",
    "localization": "chance-corrected localization of the ViT's last layer: (rate − chance) / (1 − chance), the rate "
                    "being the share of tokens best matched at their own position and chance 1 / positions",
    "gap": "chance-corrected localization of the CLS-trained ViT's last layer",
    "probes": "probe margin: the smaller of GAP minus CLS accuracy at the first layer and the CLS token's gain from "
              "the first to the last layer",
    "scale": "how much more the less-data model's CKA with the full-data model falls from the lower to the upper "
             "half of the layers than another seed's does",
}

# What each check's control is and why it matters (Check.control_note), when the measurement adds no numbers.
CONTROL_NOTES: dict[str, str] = {
    "cka": "Control, the app's own and not the paper's: the untrained twins. Untrained layers can look alike, so "
           "the learned answer asks whether the trained gap exceeds the untrained twins' gap.",
    "distance": "Control: uniform attention in the same distance convention; the app's own control, the untrained "
                "twin, says whether local heads come from training or from the patch geometry alone.",
    "heads": "Control: a head-label permutation null, what ρ reaches when distances and similarities are unrelated; "
             "the app's own control, the untrained twins, says whether the link is learned.",
    "receptive": "Control: the CNN's first block, the convolutional growth the paper compares with; the app's own "
                 "control, the untrained twins, separates training from architecture.",
    "skips": "Control: the CNN's ratio, as in the paper; the app's own control, the untrained twins, says whether "
             "the dominance is learned or present at initialisation.",
    "removal": "Control: the same recipe trained with its skips. Both models are trained, so untrained twins do not "
               "apply.",
    "localization": "Control: the CNN, and chance at 1 / positions; the app's own control, the untrained twins, says "
                    "whether localization is learned or inherited from the patch embedding.",
    "gap": "Control: the same ViT trained with global average pooling. Both are trained, so untrained twins do not "
           "apply.",
    "probes": "Control: no margin, 0; the app's own control, the untrained twin, says whether the CLS and GAP "
              "pattern is learned.",
    "scale": "Control, the app's own and not the paper's: the same recipe on the same data with another seed. Any two "
             "separately trained ViTs drift apart in their upper layers, so less data must differ more than "
             "another seed does.",
}

# timm's global_pool="avg" also moves the final LayerNorm after pooling (norm=Identity, fc_norm=LayerNorm): stated
# wherever the CLS-vs-GAP comparison is shown (timm 1.0's VisionTransformer; the zoo models are not retrained for it).
GAP_CAVEAT = ("the GAP model also differs in where its final LayerNorm sits (timm's global_pool='avg': norm=Identity, "
              "fc_norm=LayerNorm after pooling), not in pooling alone")


LEARNED = ("yes", "no", "can't tell", "n.a.")
# Claims whose comparison is between two trained models (a retrained control, another pooling, another data scale):
# an untrained twin does not answer whether training made the difference, so "learned" does not apply.
NOT_LEARNED = {
    "removal": "n.a.: both models are trained; the control is the same recipe retrained with the skip",
    "gap": "n.a.: both models are trained; the question is the pooling they were trained with",
    "scale": "n.a.: every model is trained; the question is how much data it was trained on",
}


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
        why, an interval too few units wide says "too few batches for an interval"."""
        from ..stats.evidence import format_estimate

        if self.statistic != self.statistic:  # NaN: the check could not be measured
            pattern = f"not measured: {self.evidence}" if self.evidence else "not measured"
            learned = self.learned_label.removeprefix("n.a.: ")
        else:
            stat = format_estimate(self.statistic, self.lo, self.hi, self.interval_unit, self.interval_units)
            if self.control == 0 or not (self.control_lo == self.control_lo and self.control_lo < self.control_hi):
                control = "0" if self.control == 0 else f"{self.control:.3f}"  # a fixed reference: no interval
            else:
                control = format_estimate(self.control, self.control_lo, self.control_hi, self.interval_unit,
                                          self.interval_units)
            pattern = f"{stat} against {self.control_label}, {control}"
            if self.learned == "n.a.":
                learned = self.learned_label.removeprefix("n.a.: ")
            elif self.effect != self.effect or self.twin != self.twin:
                learned = (f"the trained value or the {self.learned_label} could not be formed, see the evidence"
                           if self.learned_label.startswith("untrained") else self.learned_label)
            else:
                eff = format_estimate(self.effect, self.effect_lo, self.effect_hi, self.interval_unit,
                                      self.interval_units)
                twin = format_estimate(self.twin, self.twin_lo, self.twin_hi, self.interval_unit,
                                       self.interval_units)
                learned = f"trained {eff} against the {self.learned_label} {twin}"
                learned += f"; intervals {self.effect_note}" if self.effect_note else ""
        return {"paper": self.claim, "statistic": self.statistic_label, "control_note": self.control_note,
                "pattern_text": f"{self.pattern}: {pattern}", "learned_text": f"{self.learned}: {learned}",
                "pattern_numbers": pattern, "learned_numbers": learned,
                "interval_text": f"95 % interval: {self.interval}",
                "models": self.models, "data": self.data_text}


def _triple(e: Estimate | None) -> tuple[float, float, float]:
    nan = float("nan")
    return (nan, nan, nan) if e is None else (e.value, e.lo, e.hi)


def make_check(key: str, stat: Estimate, control: Estimate, control_label: str, evidence: str,
               direction: str = "greater", floor: float | None = None, force: str | None = None,
               learned: Learned | None = None, note: str | None = None) -> Check:
    """The :class:`Check` of claim ``key``: the pattern by :func:`vitlab.stats.evidence.verdict` (unless ``force``), the
    learned answer from ``learned`` (n.a. for the claims in :data:`NOT_LEARNED`); ``note``: the control's line
    (default :data:`CONTROL_NOTES`)."""
    from ..stats.evidence import interval_columns

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
                 control_hi=control.hi)


def too_few(stat: Estimate) -> str:
    """Why ``stat`` cannot answer a claim ("too few batches for an interval: 2 < 4"), or "" when it can: a resampled
    statistic over fewer than :data:`~vitlab.stats.evidence.MIN_UNITS` units states no direction (issue 37)."""
    from ..stats.evidence import MIN_UNITS

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


# ---------------------------------------------------------------- statistics, vectorised over resamples


def off_diagonal_mean(m: np.ndarray) -> np.ndarray:
    """(..., L, L) self-CKA -> (...) mean over pairs of different layers (non-finite cells left out)."""
    m = np.asarray(m, dtype=np.float64)
    if m.shape[-1] < 2:
        raise VitlabError("a self-CKA map needs at least two layers")
    mask = ~np.eye(m.shape[-1], dtype=bool) & np.isfinite(m)
    with np.errstate(invalid="ignore"):
        return np.where(mask, m, 0).sum((-2, -1)) / mask.sum((-2, -1))


def cross_block_mean(m: np.ndarray, block_of_layer: list[int], block: int) -> np.ndarray:
    """(..., L, L) self-CKA -> (...) mean CKA between layers before ``block`` and layers after it (Fig 8)."""
    b = np.asarray(block_of_layer)
    before, after = np.flatnonzero(b < block), np.flatnonzero(b > block)
    if not before.size or not after.size:
        raise VitlabError(f"block {block} needs layers on both sides to compare before with after")
    return np.nanmean(np.asarray(m, dtype=np.float64)[..., before[:, None], after[None, :]], axis=(-2, -1))


def head_locality(distance: np.ndarray, uniform: float) -> np.ndarray:
    """(..., H) head distances -> (...) 1 − (most local head) / (uniform attention's distance, same convention)."""
    return 1.0 - np.asarray(distance, dtype=np.float64).min(-1) / uniform


def depth_drop(curve: np.ndarray) -> np.ndarray:
    """(..., L) block-by-block CKA -> (...) lower-half mean minus upper-half mean (> 0: the top diverges more)."""
    c = np.asarray(curve, dtype=np.float64)
    half = max(1, c.shape[-1] // 2)
    return np.nanmean(c[..., :half], -1) - np.nanmean(c[..., half:], -1)


def finite_median(x: np.ndarray) -> np.ndarray:
    """(..., S, N) -> (...) median over the last two axes, infinite ratios (zero branches) left out."""
    import warnings

    x = np.asarray(x, dtype=np.float64)
    flat = x.reshape(x.shape[:-2] + (-1,))
    with warnings.catch_warnings():  # all ratios infinite (zero-initialised branches): NaN, reported as can't tell
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmedian(np.where(np.isfinite(flat), flat, np.nan), axis=-1)


# ---------------------------------------------------------------- the checks


def check_uniformity(gap: Estimate, twin_gap: Estimate | None, detail: str, note: str | None = None) -> Check:
    """Figs 1-2: pattern: (ViT − ResNet) mean off-diagonal self-CKA > 0 (the ResNet is the null); learned: the gap
    beyond the untrained twins' gap."""
    extra = f"; untrained twins: {twin_gap.text()}" if twin_gap is not None else ""
    return make_check("cka", gap, Estimate.exact(0.0), "no gap, the ResNet as uniform as the ViT", detail + extra,
                      learned=Learned(gap, twin_gap, "untrained twins' gap") if twin_gap is not None else None,
                      note=note)


def check_locality(locality: Estimate, twin: Estimate | None, margin: float, detail: str,
                   note: str | None = None) -> Check:
    """Figs 3-4: pattern: the most local first-block head attends closer than uniform attention (same convention,
    locality 0) by at least ``margin`` (a fraction of the uniform distance), beyond its interval; learned: more
    local than the untrained twin's most local head."""
    return make_check("distance", locality, Estimate.exact(0.0), f"uniform attention at 0, local from {margin:.2f}",
                      f"{detail}; a head counts as local when it attends ≥ {margin:.0%} closer than uniform",
                      floor=margin, learned=Learned(locality, twin, "untrained twin's most local head")
                      if twin is not None else None, note=note)


def check_head_rank(neg_rho: Estimate, p_value: float, null_hi: float, detail: str, twin: Estimate | None = None,
                    alpha: float = 0.05, note: str | None = None) -> Check:
    """Fig 5: pattern: −Spearman(head distance, CKA with the other model's lower layers) > 0 with a head-label
    permutation p < alpha; learned: beyond the untrained twins' −ρ."""
    text = f"{detail}; permutation p = {p_value:.3g}"
    force = "can't tell" if (p_value >= alpha and neg_rho.value > 0) else None
    return make_check("heads", neg_rho, Estimate.exact(null_hi), "the head-label permutation null's 97.5 % point",
                      text, floor=0.0, force=force,
                      learned=Learned(neg_rho, twin, "untrained twins' −ρ") if twin is not None else None, note=note)


def check_growth(vit_growth: Estimate, cnn_growth: Estimate, detail: str, effect: Estimate | None = None,
                 twin: Estimate | None = None, note: str | None = None) -> Check:
    """Fig 6: pattern: the first block's attention widens the field (50 % radius, fraction of the input side) more
    than the CNN's first block widens its own input's field; learned: that difference (``effect``) beyond the
    untrained twins'."""
    return make_check("receptive", vit_growth, cnn_growth, "CNN first block's growth", detail,
                      learned=_learned(effect, twin, "untrained twins' ViT − CNN growth"), note=note)


def _learned(effect: Estimate | None, twin: Estimate | None, label: str) -> Learned | None:
    return Learned(effect, twin, label) if twin is not None else None


def check_skips(vit: Estimate, cnn: Estimate, detail: str, effect: Estimate | None = None,
                twin: Estimate | None = None, note: str | None = None) -> Check:
    """Fig 7: pattern: the ViT's median ‖z‖/‖f(z)‖ above the CNN's; learned: the difference beyond the twins'."""
    return make_check("skips", vit, cnn, "CNN median ratio", detail,
                      learned=_learned(effect, twin, "untrained twins' ViT − CNN median ratio"), note=note)


def check_removal(noskip: Estimate, normal: Estimate, block: int, detail: str, note: str | None = None) -> Check:
    """Fig 8: mean self-CKA across block ``block`` lower in the model retrained without its skip."""
    return make_check("removal", noskip, normal, "the same model with its skips", detail, direction="less",
                      note=note)


def check_localization(vit: Estimate, cnn: Estimate, detail: str, effect: Estimate | None = None,
                       twin: Estimate | None = None, note: str | None = None) -> Check:
    """Fig 9: pattern: chance-corrected localization of the ViT's last layer above the CNN's (and above chance);
    learned: the difference beyond the untrained twins'."""
    return make_check("localization", vit, cnn, "CNN chance-corrected rate", detail, floor=0.0,
                      learned=_learned(effect, twin, "untrained twins' ViT − CNN chance-corrected rate"), note=note)


def check_gap(cls: Estimate, gap: Estimate, detail: str, norm_moved: bool = True, note: str | None = None) -> Check:
    """Fig 10: chance-corrected localization of the CLS model above the GAP model's. ``norm_moved``: the GAP model's
    final LayerNorm sits after pooling (timm's default), so the pair differs in more than pooling (GAP_CAVEAT)."""
    caveat = f"; note: {GAP_CAVEAT}" if norm_moved else "; the two differ in pooling only, final LayerNorm in place"
    return make_check("gap", cls, gap, "GAP model's chance-corrected rate", f"{detail}{caveat}", note=note)


def check_probes(margin: Estimate, twin: Estimate | None, detail: str, note: str | None = None) -> Check:
    """Fig 11: pattern: min(GAP − CLS at the first layer, CLS last − CLS first) > 0; learned: beyond the untrained
    twin's margin."""
    return make_check("probes", margin, Estimate.exact(0.0), "no margin", detail,
                      learned=_learned(margin, twin, "untrained twin's margin"), note=note)


def check_scale(excess: Estimate, detail: str, note: str | None = None) -> Check:
    """Fig 12: the smaller-data model's block-by-block CKA with the full model falls from the lower to the upper
    half more than the other-seed model's does (the smallest such excess over the less-data pairs), beyond its
    paired interval: two separately trained ViTs diverge at the top anyway, so a drop alone cannot isolate data."""
    return make_check("scale", excess, Estimate.exact(0.0), "no more than another seed", detail, note=note)


# ---------------------------------------------------------------- the report


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
