"""A student's words on the Lecture page and in its summary (issue 47): every step reads as sentences (no doubled
punctuation, one minus sign, no "can't tell: … can't tell", no unexplained trailing ", 0") and names no internal
thing (tap names, model specs, config internals); each term of the glossary is explained once, where a path first
meets it. The lecturer's detail (exact models, evidence, provenance) keeps the exact names and is left out of the
reading. The page's own walk is read in tests/test_app_lecture.py with the same :func:`faults`."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from html import unescape

import pytest

from vitlab.stats.evidence import Estimate
from vitlab.tour import CLAIMS, TourOptions, cant_tell, classroom, glossary, lecture, summary
from vitlab.tour.checks import Learned, make_check

INTERNAL = {
    "a tap name": r"\b\w+\.\d+\.\w+",
    "an untrained spec": r"@random",
    "a zoo spec": r"\bzoo:",
    "a config internal": r"global_pool|fc_norm|norm=Identity",
    "a tap": r"resid_(post|pre|mid)",
}
FAULTS = {
    "doubled punctuation": r"(?<!\.)\.\.(?!\.)|\.;|;\.|,\.|\.,|:\.|n\.a\.\.",
    "a trailing ', 0'": r", 0(?:\.0+)?(?=$|[;)]|\.(?!\d))",
    "can't tell twice": r"can't tell:[^.]*can't tell",
    "a 'nan' or 'n/a'": r"\bnan\b|\bn/a\b",
    # a text Vega cut at a width ("both after …", "minus othe…"): a student reads it whole
    "a cut text": r"\S…|…$",
    # the statistician's "0.939 [0.909, 0.960]": a student reads "0.939 (95 % interval 0.909 to 0.960)"
    "a bracketed estimate": r"\d \[[−-]?\.?\d[\d.]*, [−-]?\.?\d",
    # the lecture counts blocks from 1 ("block 4 of 6"); the taps' numbering from 0 stays in the lecturer's detail
    "a block counted from 0": r"\bblocks? 0\b",
}
LONGEST = 35  # words in one sentence a student reads

HYPHEN_MINUS = r"(?<![\w.])-\.?\d[.0-9]*"  # "-0.084", "[-1, 1]"; not a range ("Figs 1-2")


def faults(text: str) -> list[str]:
    """What reads wrong in ``text`` (a student's words): internal names and sentence faults, each as 'what: where'."""
    found = [f"{what}: {m.group(0)!r}" for what, rx in {**INTERNAL, **FAULTS}.items()
             for m in re.finditer(rx, text, flags=re.IGNORECASE)]
    hyphens = re.findall(HYPHEN_MINUS, text)
    if hyphens and "−" in text:
        found.append(f"mixed minus signs: {hyphens[:3]}")
    return found


def long_sentences(text: str, limit: int = LONGEST) -> list[str]:
    """The sentences of ``text`` (one element a student reads: a line, a caption) longer than ``limit`` words (a
    word: a token with a letter; numbers and signs are not counted)."""
    parts = re.split(r"(?<=[.?!])\s+(?=[A-Z\"(−\d*])|\n", re.sub(r"[ \t]+", " ", text))
    return [p for p in parts if len([w for w in p.split() if re.search(r"[A-Za-z]", w)]) > limit]


def model_names() -> list[str]:
    """Every model's words a lecture can say (the zoo's, trained and untrained): a name said on two lines is no
    repeat."""
    from vitlab.zoo.registry import RECIPES

    specs = [f"zoo:{n}{w}" for n in RECIPES for w in ("", "@random:0")] + ["resnet50@random:0", "vit_b@random:0"]
    return sorted({glossary.model_words(s) for s in specs}, key=len, reverse=True)


def repeats(lines: list[str], run: int = 6, names: tuple[str, ...] = ()) -> list[str]:
    """Runs of ``run`` words that two different ``lines`` (one step's sentences) both say: a line that repeats
    another ("on the logit scale of [−1, 1]" after the interval's own line, a control note restating the numbers).
    ``names`` (models' words) are taken out first."""
    def runs(line: str) -> set[str]:
        for name in names:
            line = line.replace(name, "·").replace(name[0].upper() + name[1:], "·")
        w = re.findall(r"[^\s,;:()]+", line.lower())
        return {" ".join(w[i:i + run]) for i in range(len(w) - run + 1)}

    seen: dict[str, int] = {}
    found = []
    for k, line in enumerate(lines):
        for r in runs(line):
            if seen.setdefault(r, k) != k:
                found.append(r)
    return found


def test_faults_finds_what_the_issue_found():
    """The lines issue 47 quoted are each caught, and a plain sentence passes: the check can fail."""
    bad = ["against uniform attention at 0, local from 0.25, 0",
           "Pattern: can't tell: these models cannot tell: can't tell",
           "Learned: n.a.. both models are trained", "Learned: can't tell. the trained value.;",
           "−ρ 0.042 [-0.084, 0.183]", "(blocks.0.resid_post → blocks.5.resid_post)", "zoo:resnet@random:0",
           "timm's global_pool='avg': norm=Identity",
           # found reading a prepared lecture step by step (issue 47's student walk)
           "Fig 6 (as in the paper): mean |gradient| of the centre token, normalised; both after …",
           "ViT, 10 % of the data vs trained ViT minus othe…", "Control: no margin, 0; the app's own control",
           "mean CKA 1.0000 [0.9999, 1.0000] against 0.939 [0.909, 0.960] trained", "trained ViT  block 0 input",
           "12 heads of blocks 0–2"]
    for line in bad:
        assert faults(line), line
    long = ("An attention head is one of a ViT block's ways of letting each patch gather information from other "
            "patches, and its attention distance is how far away, on average, those patches lie, where uniform "
            "attention (every patch alike) is as far as it gets.")
    assert long_sentences(long) == [long] and long_sentences("A short one. " + long[:120] + ".") == []
    assert repeats(["How the interval was formed: jackknife t over 4 batches; on the logit scale of [−1, 1].",
                    "The learned answer's intervals: on the logit scale of [−1, 1]."]) != []
    assert repeats(["On these models it is 0.083 (95 % interval 0.070 to 0.096).", ("The learned answer: 0.083 (95 % "
                    "interval 0.070 to 0.096) in the trained models.")])
    assert repeats(["The pattern is shown.", "Learned compares the same 0.083 in the trained models."]) == []
    assert faults("On these models it is −0.084 (95 % interval −0.217 to 0.056), while no difference would be 0. "
                  "Figs 1-2 and ViT-B/16 stay as written.") == []


SPECS = "zoo:vit-cls; zoo:resnet; zoo:vit-cls@random:0; zoo:resnet@random:0"
EVIDENCE = ("zoo:vit-cls blocks.0.resid_post → blocks.5.resid_post; zoo:resnet layer1.0 input; timm's "
            "global_pool='avg': norm=Identity, fc_norm=LayerNorm after pooling")


def _est(v: float, half: float = 0.05, units: int = 8) -> Estimate:
    return Estimate(v, v - half, v + half, "batches", units, "jackknife t")


def variants(key: str) -> list:
    """Real checks of claim ``key`` for every answer a lecture can show: shown, not shown, can't tell (overlap, too
    few batches, unmeasured), a twin that could not be formed, and models untrained themselves."""
    direction = "less" if key == "removal" else "greater"
    s = -1 if direction == "less" else 1
    control = Estimate(0.5, 0.45, 0.55, "batches", 8, "jackknife t")
    out = []
    for v, twin in ((0.5 + s * 0.3, _est(0.1)), (0.5 - s * 0.3, _est(0.9)), (0.5 + s * 0.02, _est(-0.2)),
                    (0.5 + s * 0.3, Estimate(math.nan, math.nan, math.nan, "batches", 8, "jackknife t"))):
        learned = Learned(_est(v - 0.5), twin, "untrained twins' gap")
        out.append(make_check(key, _est(v), control, "the other model", EVIDENCE, direction, learned=learned))
    out.append(make_check(key, _est(0.9, units=2), control, "the other model", EVIDENCE, direction))
    out.append(cant_tell(key, "no ResNet among the models (zoo:resnet@random:0 failed)"))
    out = [replace(c, models=SPECS, images=64, batches=8, batch_size=8, control_note=CLAIMS[key].claim + " "
                   "Control: zoo:vit-cls-noskip and zoo:vit-cls-seed1, [-1, 1], 0.939 [0.909, 0.960]. These are the "
                   "16-token zoo controls zoo:vit-cls-noskip, not the tour's ViT zoo:vit-cls-14: the zoo retrains "
                   "only them.") for c in out]
    out[1] = replace(out[1], images=500, batches=32, batch_size=16)  # a last batch smaller than the rest
    untrained = replace(out[0], models="vit_base_patch16_224@random:0; resnet50@random:0")
    return out + [untrained]


def student_text(key: str, check, settings) -> str:
    said = glossary.student(key, check, settings)
    return " ".join([said.compared, said.meaning, said.learned_text, *said.how])


@pytest.mark.parametrize("key", list(CLAIMS))
def test_every_answer_of_every_step_reads_as_sentences_without_internal_names(key):
    settings = classroom.settings(tour=TourOptions(images=64, batch_size=8))
    names = tuple(model_names())
    for check in variants(key):
        text = student_text(key, check, settings)
        assert faults(text) == [], (key, check.pattern, check.learned, text)
        said = glossary.student(key, check, settings)
        assert said.meaning in lecture_meanings(key) or "could not be measured" in said.meaning
        lines = [said.compared, said.meaning, said.learned_text, *said.how]
        assert all(line[0].isupper() and line.endswith(".") for line in lines)
        assert [s for line in lines for s in long_sentences(line)] == [], key
        assert repeats(lines, names=names) == [], (key, repeats(lines, names=names), lines)


def test_the_pattern_line_says_the_threshold_the_answer_uses_and_each_number_once():
    """Figs 3-4 is "shown" past the local margin (0.25), not past uniform attention's 0; a measured reference is
    cleared by its whole interval; where learned compares the pattern's own number, it is not written out twice; a
    last batch smaller than the rest is said, Fig 11's pool and Fig 6's first images are said in words."""
    settings = classroom.settings(tour=TourOptions(images=64, batch_size=8))
    how = " ".join(glossary.student("distance", variants("distance")[0], settings).how)
    assert "uniform attention scores 0" in how and 'only when its whole interval lies above 0.25.' in how
    how = " ".join(glossary.student("skips", variants("skips")[0], settings).how)
    assert "lies above the whole interval it is compared with" in how
    check = variants("cka")[0]
    check = replace(check, effect=check.statistic, effect_lo=check.lo, effect_hi=check.hi)
    how = glossary.student("cka", check, settings).how
    assert sum("0.800 (95 % interval" in line for line in how) == 1
    assert "the same 0.800 in the trained models" in " ".join(how)
    probes = glossary.student("probes", variants("probes")[1], settings).how
    assert ("Images: a pool of 500, in 32 batches of 16 (the last one smaller); each of 5 random draws trains the "
            "probe on 10 images per class and tests it on 200 others.") in probes
    assert any(line.startswith("Images: only the first 64") for line in glossary.student(
        "receptive", variants("receptive")[0], settings).how)


def test_every_question_reads_as_sentences():
    """What a student reads before the reveal: the question, what it compares, the three options, the words met
    there first; every term's sentence."""
    for key, q in lecture.QUESTIONS.items():
        for text in (q.ask, q.setup, *q.options):
            assert faults(text) == [] and long_sentences(text) == [], (key, text)
    for t in glossary.TERMS.values():
        assert long_sentences(t.sentence) == [], t.name


def lecture_meanings(key: str) -> set[str]:
    from vitlab.tour.checks.words import STUDENT_MEANING

    return set(STUDENT_MEANING[key].values())


def test_learned_names_what_it_compares_and_never_calls_untrained_models_trained():
    settings = classroom.settings()
    rec = variants("receptive")
    said = glossary.student("receptive", rec[0], settings)
    assert "the ViT's growth minus the ResNet's growth" in " ".join(said.how)  # Fig 6: named apart from the pattern
    twinless = glossary.student("skips", variants("skips")[3], settings)  # Fig 7: the trained difference shown
    assert twinless.learned == "can't tell" and "untrained twins' value could not be formed" in twinless.learned_text
    assert "0.300 (95 % interval 0.250 to 0.350) in the trained models, with nothing from their untrained twins" \
        in " ".join(twinless.how)  # said once, in the learned line; the number in How we know
    untrained = glossary.student("cka", variants("cka")[-1], settings)
    assert untrained.learned == "n.a." and "untrained themselves" in untrained.learned_text
    assert untrained.compared == "Compared here: the untrained ViT and the untrained ResNet."


def test_models_in_words():
    w = glossary.model_words
    assert [w(s) for s in ("zoo:vit-cls", "zoo:vit-cls@random:0", "zoo:resnet", "zoo:vit-cls-3pct",
                           "zoo:vit-cls-noskip0", "zoo:vit-cls-seed1", "zoo:vit-gap", "resnet50@random:0")] == [
        "the trained ViT", "the ViT's untrained twin", "the trained ResNet", "the ViT trained on 3 % of the data",
        "the ViT trained without the skips of block 1 of 6", "the ViT trained again with another seed",
        "the ViT trained with average pooling", "the untrained ResNet"]
    assert glossary.name_models("Control: zoo:vit-cls-noskip, not zoo:vit-cls@random:0.",
                                ["zoo:vit-cls", "zoo:vit-cls-noskip", "zoo:vit-cls@random:0"]) == \
        "Control: the ViT trained without the skips of block 4 of 6, not the ViT's untrained twin."


def test_each_term_is_explained_once_where_the_path_first_meets_it():
    steps = lecture.path()
    terms = glossary.first_terms(steps)
    met = [t.name for key in steps for part in terms[key] for t in part]
    assert len(met) == len(set(met)) and set(met) == {t.name for t in glossary.TERMS.values()}
    assert [t.name for t in terms["cka"][0]] == ["ViT and ResNet", "layers and blocks", "CKA"]
    assert [t.name for t in terms["cka"][1]] == ["pattern and learned", "interval", "untrained twin"]
    assert terms["receptive"][0][0].name == "receptive field" and terms["probes"][0][-1].name == "normalised depth"
    assert terms["scale"] == ([glossary.TERMS["seed"]], [])  # Fig 12 compares with another seed: met there first
    short = glossary.first_terms(["skips", "gap"])  # another path: its own first steps explain
    assert [t.name for t in short["skips"][0]] == ["ViT and ResNet", "skip and branch"]
    for t in glossary.TERMS.values():  # one plain sentence each
        assert t.sentence.count(". ") == 0 and t.sentence.endswith(".") and faults(t.sentence) == [], t.name


def reading(html_text: str) -> str:
    """The summary as a student reads it: no figure, no lecturer's detail, no markup."""
    text = re.sub(r"<svg.*?</svg>", " ", html_text, flags=re.DOTALL)
    text = re.sub(r'<details class="lecturer".*?</details>', " ", text, flags=re.DOTALL)
    text = re.sub(r"<style>.*?</style>|<title>.*?</title>|<[^>]+>", " ", text, flags=re.DOTALL)
    return unescape(re.sub(r"\s+", " ", text))


def test_the_summary_reads_as_sentences_and_keeps_the_exact_names_for_the_lecturer():
    settings = classroom.settings(data="fashion-mnist:test", tour=TourOptions(images=64, batch_size=8))
    rows = [variants(key)[k % 6] for k, key in enumerate(CLAIMS)]
    from tests.test_lecture import fake_lecture

    lec = replace(fake_lecture(settings), tour=replace(fake_lecture().tour, rows=rows), papers={}, intervals={})
    lec.provenance["images"]["source"] = "fashion-mnist:test:/usr/share/datasets/fashion-mnist:10000"
    text = summary.summary_html(lec, {key: 0 for key in CLAIMS})
    assert faults(reading(text)) == [], faults(reading(text))
    assert "/usr/share" not in text and "Fashion-MNIST test set" in text  # no machine path, even for the lecturer
    assert "blocks.0.resid_post" in text and "zoo:vit-cls" in text  # the lecturer's detail keeps them
    for key in CLAIMS:
        assert lecture.QUESTIONS[key].topic in reading(text)
    assert reading(text).count("CKA (centred kernel alignment) scores") == 2  # its step, and the words at the end


def svg_words(svg: str) -> list[str]:
    """Every text an SVG figure draws (titles, axis and legend labels, facet headers), one string per text element."""
    svg = re.sub(r"<text[^>]*/>", "", svg)
    found = re.findall(r"<text[^>]*>(.*?)</text>", svg, re.DOTALL)
    return [unescape(re.sub(r"<[^>]+>", " ", t)).strip() for t in found]


def test_a_figures_models_are_named_in_words_wherever_the_spec_says_them():
    """Titles, facet headers, legend entries and the data values they come from are renamed alike, so a figure's
    lookups still agree; the raw spec the check reads is caught before and gone after."""
    spec = {"title": {"text": "zoo:vit-cls: per token"}, "facet": {"field": "panel", "sort": ["zoo:vit-gap: token 0"],
            "header": {"labelExpr": '({"zoo:vit-cls": 1})[datum.value]'}},
            "datasets": {"d": [{"panel": "zoo:vit-gap: token 0", "model": "zoo:vit-cls@random:0", "v": 0.5},
                               {"panel": "zoo:vit-cls-10pct vs zoo:vit-cls", "model": "resnet50@random:0", "v": -1}]},
            "encoding": {"x": {"title": "depth"}, "zoo:vit-cls": 1}}
    assert any(faults(t) for t in ("zoo:vit-cls: per token", "zoo:vit-cls@random:0"))
    said = glossary.spec_in_words(spec, ["zoo:vit-cls", "zoo:vit-cls@random:0"])
    assert said["title"]["text"] == "trained ViT: per token"
    assert said["facet"]["sort"] == ["ViT, average pooling: token 0"] == [said["datasets"]["d"][0]["panel"]]
    assert said["facet"]["header"]["labelExpr"] == '({"trained ViT": 1})[datum.value]'
    assert [r["model"] for r in said["datasets"]["d"]] == ["ViT's untrained twin", "untrained ResNet"]
    assert said["datasets"]["d"][1]["panel"] == "ViT, 10 % of the data vs trained ViT"
    assert said["encoding"]["zoo:vit-cls"] == 1 and said["datasets"]["d"][1]["v"] == -1  # keys and numbers kept
    import json

    del said["encoding"]["zoo:vit-cls"]
    assert faults(json.dumps(said, ensure_ascii=False)) == []  # no spec left in any value


def test_a_lecture_figure_counts_blocks_from_one_and_cuts_no_text():
    """A real chart drawn as the lecture draws it (vl-convert): before, its long title and label are cut with "…" and
    its blocks start at 0 (the check finds both); after :func:`glossary.figure_in_words`, every text is whole, the
    block axis and legend read 1-3 over the same data, and "block 0 input" reads "block 1 input"."""
    pytest.importorskip("vl_convert")
    import altair as alt
    import pandas as pd

    from vitlab.charts.tour import styled
    from vitlab.tour.report import chart_svg

    frame = pd.DataFrame({"block": [0, 1, 2], "v": [1.0, 2.0, 3.0], "label": [
        "zoo:vit-cls block 0 input", "zoo:vit-cls-3pct vs zoo:vit-cls minus other seed", "zoo:resnet"]})
    chart = styled(alt.Chart(frame).mark_point().encode(
        x=alt.X("block:Q", title="block", axis=alt.Axis(format="d", values=[0, 1, 2])),
        y=alt.Y("label:N", title=None, axis=alt.Axis(labelLimit=160)), color=alt.Color("block:O", title="block"),
    ).properties(title="Fig 6 (as in the paper): mean |gradient| of the centre token, normalised; both after "
                       "their residual, as the paper's figure draws them"))
    specs = ["zoo:vit-cls", "zoo:vit-cls-3pct", "zoo:resnet"]
    before = svg_words(chart_svg(glossary.spec_in_words(chart.to_dict(), specs)))
    kinds = {f.split(":")[0] for t in before for f in faults(t)}
    assert {"a cut text", "a block counted from 0"} <= kinds and "0" in before
    spec = glossary.figure_in_words(chart.to_dict(), specs)
    after = svg_words(chart_svg(spec))
    assert [f for t in after for f in faults(t)] == [], after
    assert "ViT, 3 % of the data vs trained ViT minus other seed" in after and "trained ViT block 1 input" in after
    assert after.count("1") == after.count("3") == 2 and "0" not in after  # axis and legend: 1, 2, 3
    assert [r["block"] for r in next(iter(spec["datasets"].values()))] == [0, 1, 2]  # the data keep the taps' numbers
