"""Names in a person's words (issue 38): data sets and blocks in captions and chart labels, the internal name kept in
the tooltip and the CSV; the Localization rate chart's layer labels never overlap at its width."""

from __future__ import annotations

import pandas as pd
import pytest

from vitlab.charts import localization as loc_charts
from vitlab.charts.words import data_in_sentence, data_in_words, layer_in_words


@pytest.mark.parametrize("tap, words", [
    ("blocks.0.resid_post", "block 0"), ("blocks.0", "block 0"), ("blocks.11.resid_mid", "block 11 after attention"),
    ("blocks.2.resid_pre", "block 2 input"), ("blocks.2.attn_probs", "block 2 attention"),
    ("layer2.1", "stage 2 block 1"), ("layer4.0.sum", "stage 4 block 0 before ReLU"),
    ("stages.0.blocks.1", "stage 0 block 1"), ("stem", "stem"), ("blocks.1.unknown", "blocks.1.unknown"),
])
def test_layer_in_words(tap, words):
    assert layer_in_words(tap) == words


@pytest.mark.parametrize("name, words", [
    ("fashion-mnist:test", "Fashion-MNIST test set"),
    ("fashion-mnist:test:/usr/share/datasets/fashion-mnist:10000", "Fashion-MNIST test set"),
    ("cifar10:test", "CIFAR-10 test set"), ("uploads", "uploaded images"),
    ("/home/me/vitlab/assets/samples", "vitlab's sample photographs"), ("/data/photos/cats/", "the folder 'cats'"),
])
def test_data_in_words_never_shows_the_machine_path(name, words):
    assert data_in_words(name) == words
    assert "/" not in data_in_words(name)


def test_data_in_sentence():
    assert data_in_sentence("fashion-mnist:test") == "the Fashion-MNIST test set"
    assert data_in_sentence("/data/cats") == "the folder 'cats'"
    assert data_in_sentence("samples") == "vitlab's sample photographs"


def rates(layers: dict[str, list[str]]) -> pd.DataFrame:
    """A ``LocalizationReport.rates()``-shaped frame: every model's layers, chance-corrected rates with intervals."""
    rows = []
    for model, taps in layers.items():
        for k, tap in enumerate(taps):
            rate = 0.2 + 0.1 * k
            rows.append({"model": model, "layer": tap, "localized": rate, "own_cka": 0.5, "rate_lo": rate - 0.1,
                         "rate_hi": rate + 0.1, "chance": 1 / 16, "corrected": rate, "corrected_lo": rate - 0.1,
                         "corrected_hi": rate + 0.1, "interval_unit": "batches", "interval_units": 4,
                         "interval_method": "jackknife t"})
    return pd.DataFrame(rows)


def x_axis(spec: dict) -> tuple[dict, list[str]]:
    """The rate chart's x encoding: its axis and the labels in order (the bars' layer)."""
    x = spec["layer"][0]["encoding"]["x"]
    return x.get("axis", {}), x["sort"]


VIT = ["blocks.0.resid_post", "blocks.3.resid_post", "blocks.7.resid_post"]
RESNET = ["layer1.0", "layer3.1", "layer4.1"]


def test_rate_chart_labels_in_words_and_turned_when_crowded():
    # ViT and ResNet: six layers at 360 px, 60 px a label: level, "stage 4 block 1" overlapped its neighbours
    chart = loc_charts.localization_rate_chart(rates({"zoo:vit-cls": VIT, "zoo:resnet": RESNET}),
                                               bars="bars: 95 % jackknife t over 4 batches of 16 images")
    spec = chart.to_dict()
    axis, labels = x_axis(spec)
    assert labels == ["block 0", "block 3", "block 7", "stage 1 block 0", "stage 3 block 1", "stage 4 block 1"]
    assert axis["labelAngle"] == -35 and axis["labelLimit"] >= max(len(w) for w in labels) * 6.5
    # the tap's own name stays in the tooltip (and the CSV: the page exports the frame it was given)
    assert any(t.get("field") == "layer" for t in spec["layer"][0]["encoding"]["tooltip"])
    assert spec["title"][-1] == "bars: 95 % jackknife t over 4 batches of 16 images"


def test_rate_chart_labels_level_when_they_fit():
    spec = loc_charts.localization_rate_chart(rates({"zoo:vit-cls": VIT, "zoo:vit-gap": VIT})).to_dict()
    axis, labels = x_axis(spec)
    assert labels == ["block 0", "block 3", "block 7"]
    assert axis["labelAngle"] == 0
    assert max(len(w) for w in labels) * loc_charts.LABEL_PX_PER_CHAR < 360 / len(labels)


def test_report_interval_caption_is_the_one_convention(tiny_vit, fmnist_source, store):
    import vitlab
    from vitlab.analyses import localization as loc

    rep = loc.localization([tiny_vit], fmnist_source, loc.LocalizationOptions(images=16, batch_size=4,
                                                                        layers=("blocks.0.resid_post",)),
                           vitlab.Run(store=store))
    assert rep.interval_caption(4) == "bars: 95 % jackknife t over 4 batches of 4 images"
    few = loc.localization([tiny_vit], fmnist_source, loc.LocalizationOptions(images=8, batch_size=4,
                                                                        layers=("blocks.0.resid_post",)),
                           vitlab.Run(store=store))
    assert few.interval_caption(4) == "bars: no interval: too few batches for one (2 < 4)"


def test_logit_lens_counts_blocks_as_its_depth_axis():
    """The logit lens said "block 1/6" for blocks.0 while the tour and the pages said "block 0" (issue 38), then
    "block 0 of 0–5" beside an axis of "normalised block depth" a student could not read (issue 47): its words count
    the k-th of L blocks, which is exactly where the chart draws it (depth k / L), and a CNN's stage stays beside."""
    from vitlab.analyses.logit_lens import block_words

    vit = [f"blocks.{i}.resid_post" for i in range(6)]
    assert block_words(vit, 0) == "block 1 of 6" and block_words(vit, 5) == "block 6 of 6"
    assert block_words(["layer3.1", "layer4.0", "layer4.1"], 1) == "block 2 of 3 (stage 4)"
    assert block_words(["stages.0.blocks.0", "stages.1.blocks.0"], 1) == "block 2 of 2 (stage 1)"