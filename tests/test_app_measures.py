"""AppTest of the measures on the Representation similarity page (measure choice, sensitivity, agreement view) and
of the Many models page: what they draw equals the engine's numbers, and every chart has its downloads."""

from __future__ import annotations

import pytest

import vitlab
from vitlab.charts.words import layer_in_words

from .test_app import SETTINGS, assert_every_chart_exported, chart_values, charts, start

pytestmark = pytest.mark.usefixtures("app_cache")


def engine_models():
    return [vitlab.load(SETTINGS[k], "cpu") for k in ("lab.model_a", "lab.model_b")]


def test_measure_choice_draws_that_measure():
    at = start("similarity")
    at.selectbox(key="sim.measure").set_value("procrustes").run()
    assert not at.error and not at.exception, [e.value for e in at.error]
    rows = chart_values(charts(at)[0])
    opts = vitlab.similarity.SimilarityOptions(measures=("procrustes",), images=SETTINGS["lab.images"],
                                               batch_size=SETTINGS["lab.batch_size"])
    rep = vitlab.similarity.similarity(engine_models(), vitlab.open_source(SETTINGS["lab.source"]), opts)
    want = rep.pair_frame("procrustes", 0, 1)
    got = {(r["layer_a"], r["layer_b"]): r["value"] for r in rows}
    assert len(got) == len(want)
    for r in want.itertuples():
        assert got[(r.layer_a, r.layer_b)] == pytest.approx(r.value, abs=1e-6)
    # the picked pair's value in words that wrap (an st.metric's label was cut at 1280 px: issue 38)
    line = next(m.value for m in at.markdown if m.value.startswith("angular Procrustes distance of"))
    pair = next(r for r in want.itertuples() if f"{layer_in_words(r.layer_a)} and" in line.replace("\\", ""))
    assert float(line.split("**")[1]) == pytest.approx(pair.value, abs=1e-4), line
    assert_every_chart_exported(at, "similarity")


def test_sensitivity_under_the_clicked_cell():
    at = start("similarity")
    frames = [d.value for d in at.dataframe]
    sens = next(f for f in frames if "check" in f.columns)
    assert {"baseline", "remove top PCs", "leave one batch out", "leave one image out",
            "top-direction energy share"} <= set(sens["check"])
    base = float(sens.loc[sens["check"] == "baseline", "value"].iloc[0])
    line = next(m.value for m in at.markdown if m.value.startswith("CKA of"))  # "... `L`: **0.9513 [lo, hi]**"
    assert base == pytest.approx(float(line.split("**")[1].split()[0]), abs=1e-4)  # the clicked cell's CKA
    assert len(charts(at)) >= 2
    assert_every_chart_exported(at, "similarity")


def test_agreement_view_says_agree_or_disagree_with_numbers():
    at = start("similarity")
    at.toggle(key="sim.agree").set_value(True).run()
    assert not at.error and not at.exception, [e.value for e in at.error]
    text = " ".join(m.value for m in at.markdown)
    assert ("agree" in text or "disagree" in text) and "ρ = " in text and "Fig 1" in text
    claims = next(d.value for d in at.dataframe if "claim" in d.value.columns)
    assert set(claims["measure"]) == set(vitlab.measures.DEFAULT_MEASURES)
    assert_every_chart_exported(at, "similarity")


def test_many_models_page_matches_the_engine():
    at = start("models")
    assert not at.error and not at.exception, [e.value for e in at.error]
    specs = at.multiselect(key="mm.models").value
    rows = chart_values(charts(at)[0])
    depth = rows[0]["depth"]
    models = [vitlab.load(m, "cpu") for m in specs]
    opts = vitlab.manymodels.CompareOptions(images=SETTINGS["lab.images"], batch_size=SETTINGS["lab.batch_size"],
                                            depths=(depth,), measure="cka")
    res = vitlab.manymodels.compare_models(models, vitlab.open_source(SETTINGS["lab.source"]), opts)
    want = res.to_frame()
    got = {(r["model_a"], r["model_b"]): r["value"] for r in rows}
    for r in want.itertuples():
        assert got[(r.model_a, r.model_b)] == pytest.approx(r.value, abs=1e-6)
    assert "forward passes" in " ".join(c.value for c in at.caption)
    assert_every_chart_exported(at, "models")


def test_pwcca_of_all_tokens_says_why_it_is_undefined_on_both_pages():
    """Morcos et al.'s PWCCA of all-token layers wider than the image set: the Many models page shows the reason in
    place (not "constant features") and what to use instead; the Similarity page draws NaN cells under a warning
    with the same reason."""
    at = start("models")
    at.selectbox(key="mm.measure").set_value("pwcca").run()
    assert not at.exception
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and "pwcca is undefined at depth" in errors[0], errors
    assert "use pwcca-svd20, --tokens cls / gap (GAP or CLS features), or more images" in errors[0]
    assert "constant features" not in errors[0]
    at = start("similarity")
    at.selectbox(key="sim.measure").set_value("pwcca").run()
    assert not at.error and not at.exception, [e.value for e in at.error]
    warned = [w.value for w in at.warning]
    assert any("undefined (NaN)" in w and "use pwcca-svd20, --tokens cls / gap" in w for w in warned), warned
