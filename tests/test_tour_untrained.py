"""A tour on untrained models (``NAME@random``) says its learned answers do not apply (issue 51: the pages compared
each model with itself, "trained 0.014 against the untrained twin's 0.014"), and its progress names each step."""

from __future__ import annotations

import math

import vitlab
from vitlab import tour
from vitlab.engine.context import Run


def test_untrained_models_have_no_learned_answer_and_progress_says_check_model_and_batch(fmnist_source):
    vit, cnn = vitlab.load("zoo:vit-cls@random:0", "cpu"), vitlab.load("zoo:resnet", "cpu")
    said = []
    run = Run(progress=lambda done, total, text: said.append(text))
    rep = tour.run_tour([vit, cnn], fmnist_source, tour.TourOptions(images=16, batch_size=4,
                                                                    only=("distance", "cka")), run)
    rows = {r.figure: r for r in rep.rows}
    for figure in ("Figs 3-4", "Figs 1-2"):  # both use the untrained ViT
        r = rows[figure]
        assert r.learned == "n.a.", figure
        assert all(math.isnan(x) for x in (r.effect, r.twin, r.effect_lo, r.twin_hi)), figure
        assert r.lines()["learned_text"] == ("n.a.: zoo:vit-cls@random:0 is untrained itself: its untrained twin is "
                                             "the same model, nothing to compare")
    assert "untrained twin" not in rows["Figs 3-4"].lines()["pattern_text"]
    # the pattern answers are still measured
    assert not math.isnan(rows["Figs 3-4"].statistic) and not math.isnan(rows["Figs 1-2"].statistic)
    # every step in words: which pass or check, which models, how far
    assert any(t.startswith("pass 1 of ") and "zoo:vit-cls@random:0" in t and t.endswith("batch 4 of 4")
               for t in said), said
    assert any(t.startswith("Figs 3-4 (check 1 of 2): zoo:vit-cls@random:0") and "batch" in t for t in said), said


def test_a_trained_pair_keeps_its_learned_answer(fmnist_source):
    vit, cnn = vitlab.load("zoo:vit-cls", "cpu"), vitlab.load("zoo:resnet", "cpu")
    rep = tour.run_tour([vit, cnn], fmnist_source, tour.TourOptions(images=16, batch_size=4, only=("distance",)),
                        Run())
    assert rep.rows[0].learned in ("yes", "no", "can't tell")
    assert "untrained itself" not in rep.rows[0].lines()["learned_text"]
