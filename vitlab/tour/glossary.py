"""The lecture's student layer (issue 47): a glossary the Lecture page and its summary share, models in words, and each
step's answers in sentences for someone who has not read the paper.

A term is explained once, at the first step of a lecture's path that uses it (:func:`first_terms`): the question's
terms before the reveal, the answer's (interval, untrained twin) with the first answer. A step's answers come as
:class:`StudentStep`: one plain sentence for the pattern answer and one for the learned answer, and "How we know"
(the statistic, its numbers against the reference, the interval's method, the images): the statistician's detail,
folded on the page. Models are named in words ("the trained ViT", "the ViT's untrained twin", "the ViT trained on
3 % of the data"), never by spec; tap names and config internals stay in the lecturer's detail and the CSV.

    Lecture ─first_terms─► {claim: (question terms, answer terms)}
    Check, settings ─student─► StudentStep(meaning, learned, how)       the page and the summary
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ..stats.evidence import MIN_UNITS, format_estimate
from .checks.words import (
    NOT_LEARNED,
    STUDENT_CONTROL,
    STUDENT_CONTROL_WHY,
    STUDENT_LEARNED_WHAT,
    STUDENT_MEANING,
    STUDENT_NOT_LEARNED,
)


@dataclass(frozen=True)
class Term:
    name: str
    sentence: str  # one plain sentence


TERMS: dict[str, Term] = {
    "models": Term("ViT and ResNet", "A ViT (Vision Transformer) cuts the image into patches that all look at one "
                   "another, while a ResNet is a convolutional network (a CNN) that widens its view layer by layer."),
    "layers": Term("layers and blocks", "A model processes an image in a stack of layers, grouped into blocks, from "
                   "the lower layers near the image to the higher layers near the answer."),
    "cka": Term("CKA", "CKA (centred kernel alignment) scores how alike two layers' representations of the same "
                "images are, from 0 (unrelated) to 1 (the same up to rotation and scale)."),
    "distance": Term("attention head and distance", "An attention head is one of a ViT block's ways of letting each "
                     "patch gather from other patches; its attention distance is how far away those patches lie on "
                     "average."),
    "receptive": Term("receptive field", "A layer's receptive field is the part of the image that can change what "
                      "it computes at one position; its size here is the radius holding half that influence."),
    "skips": Term("skip and branch", "A block adds what its branch computes, f(z), to its input z, which the skip "
                  "carries past unchanged; a large ratio ‖z‖ / ‖f(z)‖ means the skip dominates."),
    "token": Term("token", "A token is a model's representation of one image patch (for a ResNet, of one position "
                  "of its feature map) as it passes through the layers."),
    "localization": Term("localization", "Localization asks whether each last-layer token is still most like its "
                         "own position's input rather than another position's, scaled so that 0 is chance and 1 is "
                         "every token."),
    "cls": Term("CLS token and GAP", "A ViT classifies either from an extra CLS token that gathers the whole image's "
                "information, or by global average pooling (GAP), the mean of all the patch tokens."),
    "probe": Term("linear probe", "A linear probe is a simple straight-line classifier trained on one layer's "
                  "representation: the better it tells the classes apart, the more that layer already holds the "
                  "class."),
    "depth": Term("normalised depth", "Normalised depth places a layer by how far up its model it sits, from near 0 "
                  "at the image to 1 at the last layer, so that models of different depths line up."),
    "seed": Term("seed", "A seed fixes training's random start: the same recipe on the same data with another seed "
                 "gives a model that differs only by chance."),
    "answers": Term("pattern and learned", "Each step has two answers: the pattern (shown, not shown or can't tell) "
                    "says whether these models do what the paper found, and learned says whether training made it."),
    "interval": Term("interval", "A 95 % interval is the range a value plausibly lies in, given how it varies from "
                     "one group of images to another; where two intervals overlap, we cannot tell them apart."),
    "twin": Term("untrained twin", "An untrained twin is the same model with random weights, never trained: what it "
                 "shows too comes from the architecture, not from learning."),
}

# The terms a step's question uses, in the order a student meets them.
ASK_TERMS: dict[str, tuple[str, ...]] = {
    "cka": ("models", "layers", "cka"),
    "distance": ("models", "distance"),
    "heads": ("models", "layers", "distance", "cka"),
    "receptive": ("models", "receptive"),
    "skips": ("models", "skips"),
    "removal": ("models", "skips", "cka"),
    "localization": ("models", "token", "localization"),
    "gap": ("models", "cls", "token", "localization"),
    "probes": ("models", "cls", "probe", "depth"),
    "scale": ("models", "layers", "cka", "seed", "depth"),
}


def answer_terms(key: str) -> tuple[str, ...]:
    """The terms a step's answer uses: the two answers, the interval, and the untrained twin where learned applies."""
    return ("answers", "interval") + (() if key in NOT_LEARNED else ("twin",))


def first_terms(steps: list[str]) -> dict[str, tuple[list[Term], list[Term]]]:
    """Each step's terms not met at an earlier step of ``steps`` (the lecture's path): (question's, answer's). The
    path is fixed, so a step explains the same words whichever way a student reached it."""
    seen: set[str] = set()
    out: dict[str, tuple[list[Term], list[Term]]] = {}
    for key in steps:
        parts = []
        for names in (ASK_TERMS.get(key, ()), answer_terms(key)):
            new = [n for n in dict.fromkeys(names) if n not in seen]
            seen.update(new)
            parts.append([TERMS[n] for n in new])
        out[key] = (parts[0], parts[1])
    return out


# ---------------------------------------------------------------- models and numbers in words

FAMILY = {"vit": "ViT", "resnet": "ResNet", "mixer": "MLP-Mixer"}


def _family(name: str) -> str:
    n = name.lower()
    for cue, family in (("mixer", "MLP-Mixer"), ("vit", "ViT"), ("deit", "ViT"), ("resnet", "ResNet"),
                        ("bit", "ResNet")):
        if cue in n:
            return family
    return "model"


def _described(spec: str) -> tuple[str, list[tuple[str, str]], bool, bool]:
    """(family, [(how in a sentence, how on a figure's label)], untrained, a zoo recipe) of a model spec."""
    from ..zoo.registry import RECIPES

    base, _, variant = spec.strip().partition("@")
    untrained = variant.startswith("random")
    name = base.removeprefix("zoo:")
    recipe = RECIPES.get(name) if base.startswith("zoo:") else None
    if recipe is None:
        return _family(name.rsplit("/", 1)[-1]), [], untrained, False
    family, kw = FAMILY.get(recipe.arch, "model"), recipe.kwargs
    grid = int(kw.get("img_size", 28)) // int(kw.get("patch_size", 7)) if recipe.arch == "vit" else 0
    if grid and grid != 4:
        family = f"{grid * grid}-patch {family}"
    how = []
    if kw.get("global_pool") == "avg":
        how.append(("with average pooling", "average pooling"))
    if recipe.fraction < 1:
        how.append((f"on {recipe.fraction * 100:g} % of the data", f"{recipe.fraction * 100:g} % of the data"))
    if recipe.seed:
        how.append(("again with another seed", "another seed"))
    if recipe.noskip_block is not None:
        where = f"block {recipe.noskip_block + 1} of {kw.get('depth', '?')}"
        how.append((f"without the skips of {where}", f"no skips in {where}"))
    return family, how, untrained, True


def model_words(spec: str) -> str:
    """A model spec for a student: 'zoo:vit-cls' -> "the trained ViT", 'zoo:vit-cls@random:0' -> "the ViT's
    untrained twin", 'zoo:vit-cls-3pct' -> "the ViT trained on 3 % of the data", 'resnet50@random:0' -> "the
    untrained ResNet"."""
    family, how, untrained, zoo = _described(spec)
    if not zoo:
        return f"the untrained {family}" if untrained else f"the {family}"
    trained = f"the {family} trained {' and '.join(h for h, _ in how)}" if how else f"the trained {family}"
    if untrained:
        return f"the {family}'s untrained twin" if not how else f"the untrained twin of {trained}"
    return trained


def label_words(spec: str) -> str:
    """:func:`model_words` short enough for a figure's label: "trained ViT", "ViT's untrained twin", "ViT, 3 % of the
    data", "ViT, no skips in block 4 of 6", "untrained ResNet"."""
    family, how, untrained, zoo = _described(spec)
    if not zoo:
        return f"untrained {family}" if untrained else family
    trained = f"{family}, {', '.join(h for _, h in how)}" if how else f"trained {family}"
    if untrained:
        return f"{family}'s untrained twin" if not how else f"untrained twin of {trained}"
    return trained


def models_words(specs: list[str] | tuple[str, ...]) -> str:
    """"the trained ViT, the trained ResNet and the ViT's untrained twin"."""
    words = list(dict.fromkeys(model_words(s) for s in specs if s.strip()))
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1] if words else "no model"


def name_models(text: str, specs: list[str] | tuple[str, ...], words=model_words) -> str:
    """``text`` with every spec of ``specs`` in it replaced by its words (the longest first: 'zoo:vit-cls@random:0'
    before 'zoo:vit-cls'), and any other zoo or untrained spec it names too; ``words``: :func:`model_words`, or
    :func:`label_words` on a figure."""
    for spec in sorted({s.strip() for s in specs if s.strip()}, key=len, reverse=True):
        text = re.sub(re.escape(spec) + r"(?![\w@:-])", words(spec), text)
    return re.sub(r"\bzoo:[\w-]+(?:@random(?::\d+)?)?|\b[\w./-]+@random(?::\d+)?", lambda m: words(m[0]), text)


def spec_in_words(spec, specs: list[str] | tuple[str, ...]):
    """A Vega-Lite spec (a chart's ``to_dict()``) with every model spec in every string named in a figure's words
    (:func:`label_words`): titles, facet headers, legend entries and the data values they are drawn from alike, so
    a figure a student reads names the "trained ViT", never 'zoo:vit-cls'. Every string is renamed the same way, so
    a field's values, its sort order and a label expression over them still agree. Keys are left as they are."""
    if isinstance(spec, dict):
        return {k: spec_in_words(v, specs) for k, v in spec.items()}
    if isinstance(spec, list):
        return [spec_in_words(v, specs) for v in spec]
    return name_models(spec, specs, label_words) if isinstance(spec, str) else spec


# A figure a student reads: blocks counted from 1, as the lecture's words count them ("block 4 of 6"), and no text
# cut short. The charts are shared with the pages, the slides and the report, which count blocks from 0 as the taps
# do ('blocks.3'); only the lecture's drawings are renumbered, on their Vega-Lite spec.
TITLE_LINE = 64  # characters of a figure's title line: a longer title is wrapped, never cut with "…"
_BLOCK = re.compile(r"\bblock (\d+)\b(?! of \d)")
_LIMITS = {"labelLimit", "titleLimit", "limit"}  # Vega cuts a text at these widths; 0: never


def _wrapped(text: str, width: int = TITLE_LINE) -> str | list[str]:
    lines: list[str] = []
    for word in text.split(" "):
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return text if len(lines) == 1 else lines


def _counts_blocks(enc) -> bool:
    return isinstance(enc, dict) and (enc.get("field") == "block" or str(enc.get("title", "")).startswith("block"))


def figure_in_words(spec, specs: list[str] | tuple[str, ...]):
    """A lecture's figure (a chart's ``to_dict()``) for a student: models in words (:func:`spec_in_words`); blocks
    counted from 1 in every text ("block 0 input" -> "block 1 input") and on every axis or legend of a block field
    (its labels read ``value + 1``; the data keep the taps' numbers); no label, header or title cut at a width (the
    limits off, a long title wrapped onto lines)."""
    spec = spec_in_words(spec, specs)

    def fix(node, key=None):
        if isinstance(node, dict):
            out = {k: 0 if k in _LIMITS and isinstance(v, (int, float)) else fix(v, k) for k, v in node.items()}
            for channel, enc in (out.get("encoding") or {}).items():
                if not _counts_blocks(enc):
                    continue
                guide = "axis" if channel in ("x", "y", "x2", "y2") else "legend"
                if enc.get(guide, {}) is not None and "labelExpr" not in (enc.get(guide) or {}):
                    enc[guide] = {**(enc.get(guide) or {}), "labelExpr": "toNumber(datum.value) + 1"}
            return out
        if isinstance(node, list):
            return [fix(v, key) for v in node]
        if isinstance(node, str):
            node = _BLOCK.sub(lambda m: f"block {int(m[1]) + 1}", node)
            return _wrapped(node) if key in ("title", "text") and len(node) > TITLE_LINE else node
        return node

    return fix(spec)


def minus(text: str) -> str:
    """One minus sign: a hyphen before a number ("-0.084", "[-1, 1]") becomes "−"; a range ("Figs 1-2") stays."""
    return re.sub(r"(?<![\w.])-(?=\.?\d)", "−", text)


def estimate(value: float, lo: float, hi: float, unit: str = "", units: int = 0) -> str:
    """"0.091 (95 % interval 0.024 to 0.158)", "0.5 (too few batches for an interval: 2 < 4)", "0.083"."""
    text = format_estimate(value, lo, hi, unit, units)
    m = re.fullmatch(r"(\S+) \[(\S+), (\S+)\]", text)
    if m:
        text = f"{m[1]} (95 % interval {m[2]} to {m[3]})"
    return minus(text)


def sentence(text: str) -> str:
    """``text`` as one sentence: a capital first letter and one full stop (none added after '.', '?' or '!')."""
    text = text.strip().rstrip(";,").strip()
    if not text:
        return ""
    text = text[0].upper() + text[1:]
    return text if text.endswith((".", "?", "!")) else text + "."


def settings_words(settings) -> str:
    """A lecture's settings for a student: "the trained ViT and the trained ResNet, Fashion-MNIST test set, first 64
    images, in batches of 16"."""
    data = settings.describe().split(", ", 1)[1] if ", " in settings.describe() else ""
    return f"{models_words(settings.models)}, {data}"


def source_words(name: str) -> str:
    """An image source without the machine's folders: 'fashion-mnist:test:/usr/share/…:10000' -> "Fashion-MNIST test
    set", '/home/x/photos' -> "the folder 'photos'"."""
    from ..charts.words import data_in_words  # here: vitlab.charts loads altair, and the CLI's help must not

    return data_in_words(str(name))


# ---------------------------------------------------------------- a step's answers in sentences


@dataclass(frozen=True)
class StudentStep:
    """A step for a student: ``compared`` (the models, in words), ``learned`` (the learned answer as shown: "n.a."
    where the models are untrained themselves), ``meaning`` and ``learned_text`` (a plain sentence each), ``how``
    (How we know: sentences with the numbers)."""

    compared: str
    meaning: str
    learned: str
    learned_text: str
    how: tuple[str, ...]


def _finite(*xs: float) -> bool:
    return all(isinstance(x, (int, float)) and math.isfinite(x) for x in xs)


def _specs(check) -> list[str]:
    return [s.strip() for s in (check.models or "").split(";") if s.strip()]


def _learned(key: str, check, untrained: bool) -> tuple[str, str]:
    if key in NOT_LEARNED:
        return "n.a.", STUDENT_NOT_LEARNED[key]
    if untrained:
        return "n.a.", ("Does not apply here: these models are untrained themselves, so there is nothing to compare "
                        "them with.")
    if check.learned == "yes":
        return "yes", "Training made it: the trained models show this more than their untrained twins do."
    if check.learned == "no":
        return "no", ("Training is not what made it here: the untrained twins, with random weights, show as much or "
                      "more, so the architecture alone may explain it.")
    if check.learned_label.startswith("no untrained twins"):
        why = "this lecture was prepared without untrained twins"
    elif not _finite(check.twin):
        why = "the untrained twins' value could not be formed on these models"
    elif not _finite(check.effect):
        why = "the trained models' value could not be formed"
    else:
        why = "the trained models and their untrained twins overlap within their intervals"
    return "can't tell", f"We cannot say whether training made it: {why}."


def _images(key: str, check, settings) -> str:
    """The images a step's statistic used, in words: Fig 6's first images (a pass back through the model each) and
    Fig 11's probe pool said as what they are; a last batch smaller than the rest said so."""
    if not check.images:
        return "Images: not recorded."
    n, b, size = check.images, check.batches, check.batch_size
    batches = f"in {b} batch{'es' * (b != 1)} of {size}" + (" (the last one smaller)" if b * size > n else "")
    if key == "receptive":
        return (f"Images: only the first {n}, {batches}, since tracing what each position sees takes a pass back "
                "through the model for every image.")
    if key == "probes":
        tour = settings.tour
        return (f"Images: a pool of {n}, {batches}; each of {tour.probe_draws} random draws trains the probe on "
                f"{tour.probe_shots} images per class and tests it on {tour.probe_test} others.")
    return f"Images: {n} images {batches}."


ZOO_CONTROLS = "These are the 16-token zoo controls"  # vitlab.tour.measure.common._zoo_control_note


def _how(key: str, check, settings, specs: list[str]) -> list[str]:
    how = [sentence(f"What was measured: {minus(check.statistic_label)}")]
    if not _finite(check.statistic):
        return how + ["No number came out of this step, so there is nothing to set against its reference."]
    fixed = check.control == 0 or not (_finite(check.control_lo, check.control_hi)
                                       and check.control_lo < check.control_hi)
    if fixed:
        control = "0" if check.control == 0 else minus(f"{check.control:.3f}")
    else:
        control = estimate(check.control, check.control_lo, check.control_hi, check.interval_unit,
                           check.interval_units)
    words, side = STUDENT_CONTROL[key]
    margin = f"{getattr(settings.tour, 'local_margin', 0.25):.2f}"
    if check.interval_method.startswith("too few"):  # no interval at all: said once, with what it would take
        value, ref = minus(f"{check.statistic:.3f}"), minus(f"{check.control:.3f}")
        return how + [(f"On these models it is {value}, while {words.format(c=ref, margin=margin)}. With only "
                      f"{check.interval_units} {check.interval_unit} there is no interval (it takes at least "
                      f"{MIN_UNITS}), so no answer can be read from it."), _images(key, check, settings),
                      STUDENT_CONTROL_WHY[key]]
    # where the whole interval must lie: past the threshold a fixed reference sets (Figs 3-4: the local margin, not
    # uniform attention's 0), or past the measured reference's whole interval (vitlab.stats.evidence.verdict)
    past = margin if key == "distance" else control if fixed else "the whole interval it is compared with"
    stat = estimate(check.statistic, check.lo, check.hi, check.interval_unit, check.interval_units)
    how.append(f"On these models it is {stat}, while {words.format(c=control, margin=margin)}. The pattern is "
               f"\"shown\" only when its whole interval lies {side} {past}.")
    if key in STUDENT_LEARNED_WHAT and key not in NOT_LEARNED:
        what = STUDENT_LEARNED_WHAT[key]
        same = (check.effect, check.effect_lo, check.effect_hi) == (check.statistic, check.lo, check.hi)
        eff = estimate(check.effect, check.effect_lo, check.effect_hi, check.interval_unit, check.interval_units)
        # the learned answer often compares the pattern's own number: said once, on the line above
        eff = f"the same {minus(f'{check.effect:.3f}')}" if same else eff
        if _finite(check.effect) and _finite(check.twin):
            twin = estimate(check.twin, check.twin_lo, check.twin_hi, check.interval_unit, check.interval_units)
            how.append(f"Learned compares {what}: {eff} in the trained models against {twin} in their untrained "
                       "twins.")
        elif _finite(check.effect):
            how.append(f"Learned compares {what}: {eff} in the trained models, with nothing from their untrained "
                       "twins to set against it.")
        else:
            how.append(f"Learned compares {what}, which could not be formed on these models.")
    if check.interval_unit:
        how.append(sentence(f"How the interval was formed: {minus(check.interval)}"))
        if check.effect_note and key not in NOT_LEARNED:
            how.append("The learned answer's intervals were formed the same way." if check.effect_note in
                       check.interval else sentence(f"The learned answer's intervals: {minus(check.effect_note)}"))
    how.append(_images(key, check, settings))
    how.append(STUDENT_CONTROL_WHY[key])
    if ZOO_CONTROLS in (check.control_note or ""):
        how.append("The models compared in this step are the zoo's own 16-patch ViTs, not the lecture's ViT: only "
                   "those were retrained for it.")
    if "global_pool" in (check.evidence or ""):
        how.append("The ViT trained with average pooling also has its final normalisation layer after the pooling, "
                   "so the two differ in more than pooling.")
    return how


def student(key: str, check, settings) -> StudentStep:
    """Claim ``key``'s ``check`` (a tour row) on a lecture prepared at ``settings``, for a student."""
    specs = _specs(check) or list(settings.models)
    untrained = "@random" in specs[0]
    if not _finite(check.statistic):
        meaning = "This step could not be measured on these models; the lecturer's detail says why."
    else:
        meaning = STUDENT_MEANING[key].get(check.pattern, STUDENT_MEANING[key]["can't tell"])
    learned, learned_text = _learned(key, check, untrained)
    return StudentStep(sentence(f"Compared here: {models_words(specs)}"), meaning, learned, learned_text,
                       tuple(_how(key, check, settings, specs)))
