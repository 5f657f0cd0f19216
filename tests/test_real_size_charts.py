"""Charts at real size (issue 51): ViT-B/16's 12 blocks x 12 heads, ViT-L/16's 24 x 16, ResNet-50's 16 blocks and
their names fit the page at 1280 px, whole; an empty chart is said in words; a line that cannot be drawn is not in the
legend, and the chart says why; warnings of one kind are one line.

Sizes are read from what Vega draws (vl-convert's SVG of the chart as the page draws it, axes and legends included),
not from the spec's declared plot size; the browser test (tests/test_browser_real_size.py) measures the page itself.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import vl_convert as vlc

from vitlab.charts import attention as att
from vitlab.charts import causal, similarity
from vitlab.charts import skips as skip_charts
from vitlab.charts.common import HALF_WIDTH, PAGE_WIDTH
from vitlab.charts.words import group_warnings, wrap_name
from vitlab.errors import VitlabError

VIT_B, RESNET = "vit_base_patch16_224@random:0", "resnet50@random:0"
LONG = "hf-hub:timm/vit_base_patch16_clip_224.openai_ft_in12k_in1k@random:0"
RESNET50_BLOCKS = [f"layer{s}.{b}" for s, n in ((1, 3), (2, 4), (3, 6), (4, 3)) for b in range(n)]


def drawn(chart) -> tuple[float, float, list[str]]:
    """Width and height of the SVG Vega draws for ``chart`` (autosize 'pad', as lab.chart draws it) and its texts,
    each a label's lines joined with '|'."""
    svg = vlc.vegalite_to_svg(chart.to_json())
    w, h = re.search(r'<svg[^>]*width="([\d.]+)"[^>]*height="([\d.]+)"', svg).groups()
    texts = [("|".join(re.findall(r"<tspan[^>]*>([^<]*)</tspan>", t)) if "<tspan" in t else t).replace("&amp;", "&")
             for t in re.findall(r"<text[^>]*>(.*?)</text>", svg)]
    return float(w), float(h), texts


def distances(blocks: int, heads: int, model: str = VIT_B) -> pd.DataFrame:
    rng = np.random.default_rng(blocks * heads)
    d = 60 + 50 * rng.random((blocks, heads))
    return pd.DataFrame([{"model": model, "layer": b, "head": h, "distance_px": d[b, h], "std_px": 3.0, "images": 32,
                          "distance_lo": d[b, h] - 2, "distance_hi": d[b, h] + 2, "uniform_px": 115.9,
                          "distance_frac": d[b, h] / 224, "std_frac": 0.01, "uniform_frac": 115.9 / 224}
                         for b in range(blocks) for h in range(heads)])


@pytest.mark.parametrize("blocks,heads", [(12, 12), (24, 16), (4, 4)])
def test_attention_distance_chart_fits_the_page_with_every_block_drawn(blocks, heads):
    """ViT-B/16's chart was 2,522 px wide (16 px a head): blocks 5-11 ran past a 1280-px page's right edge."""
    frame = distances(blocks, heads)
    width, _, texts = drawn(att.attention_distance_chart(frame, selected=(1, 2)))
    assert width <= PAGE_WIDTH, width
    assert [str(b) for b in range(blocks)] == [t for t in texts if t.isdigit() and int(t) < blocks][:blocks]
    two = pd.concat([frame, distances(blocks, heads, RESNET.replace("resnet50", "vit_small_patch16_224"))])
    assert drawn(att.attention_distance_chart(two))[0] <= PAGE_WIDTH  # two models stacked, not side by side
    # every head of every block is a dot in the chart's data, and a head's colour is its own up to 20 heads
    spec = att.attention_distance_chart(frame).to_dict()
    assert len(spec["datasets"][spec["data"]["name"]]) == blocks * heads
    if heads > 10:
        assert spec["layer"][0]["encoding"]["color"]["scale"] == {"scheme": "tableau20"}


def test_the_attention_chart_stays_clickable_on_a_head():
    """The page reads a clicked dot's (block, head) through lab.clickable's selection; it must compile to Vega."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "app"))
    from lab.show import clickable

    chart = clickable(att.attention_distance_chart(distances(12, 12)), "head", ["layer", "head"], nearest=True)
    vega = vlc.vegalite_to_vega(chart.to_json())
    signals = {s["name"] for s in vega.get("signals", [])}
    assert "head" in signals or "head_tuple" in signals, signals
    params = [p for p in chart.to_dict().get("params", []) if p["name"] == "head"]
    assert params and params[0]["select"]["fields"] == ["layer", "head"]


def receptive(grid: int, layers: int, model: str = VIT_B) -> pd.DataFrame:
    r, c = np.meshgrid(np.arange(grid), np.arange(grid), indexing="ij")
    return pd.concat([pd.DataFrame({"layer": f"blocks.{i}", "order": i, "row": r.ravel(), "col": c.ravel(),
                                    "value": np.exp(-((r - grid / 2) ** 2 + (c - grid / 2) ** 2) / (2 + i) ** 2).ravel(),
                                    "model": model, "residual": "post"}) for i in range(layers)])


@pytest.mark.parametrize("grid,layers", [(64, 12), (64, 16), (64, 24), (28, 4), (7, 12)])
def test_receptive_field_tiles_are_large_enough_to_see_and_fit_the_page(grid, layers):
    """ViT-B/16's 64 x 64 fields were 64-px tiles six a row (a dot each); now 150 px or more, as many a row as fit."""
    chart = att.receptive_field_chart(receptive(grid, layers))
    spec = chart.to_dict()
    tile = spec["spec"]["width"]
    assert tile >= 150 and tile % grid == 0 and spec["spec"]["height"] == tile  # whole-pixel cells
    width, _, texts = drawn(chart)
    assert width <= PAGE_WIDTH, width
    assert [t for t in texts if t.startswith("block ")] == [f"block {i}" for i in range(layers)]
    # as many a row as fit: one more would not
    assert (spec["columns"] + 1) * (tile + spec["spacing"]) > PAGE_WIDTH - 90 or spec["columns"] == layers


def test_model_names_are_whole_in_the_many_models_charts_and_each_fits_half_the_page():
    """"vit_base_patch16_224@r…" was cut on both axes and the heatmap ran over the MDS map beside it."""
    names = [VIT_B, RESNET, "zoo:vit-cls", "zoo:resnet", LONG]
    frame = pd.DataFrame([{"measure": "cka", "depth": 0.5, "model_a": a, "model_b": b, "tap_a": "t", "tap_b": "t",
                           "value": 0.5} for a in names for b in names])
    coords = pd.DataFrame([{"depth": 0.5, "explained": 0.9, "model": n, "tap": "t", "x": np.cos(i), "y": np.sin(i)}
                           for i, n in enumerate(names)])
    for chart, size in ((similarity.models_heatmap(frame, size=200), 200), (similarity.mds_scatter(coords, size=280),
                                                                             280)):
        width, _, texts = drawn(chart)
        assert width <= HALF_WIDTH, width
        assert not [t for t in texts if "…" in t], texts
        whole = [t.replace("|", "") for t in texts]
        assert all(n in whole for n in names), (names, texts)
        assert chart.to_dict().get("width", size) == size


@pytest.mark.parametrize("name", [VIT_B, RESNET, LONG, "zoo:vit-cls", "vit_large_patch16_224.augreg_in21k",
                                  "a" * 47, "x@random:0", "resnetv2_152x2_bit.goog_in21k_ft_in1k@random:12"])
def test_a_wrapped_name_is_the_name_on_short_lines(name):
    lines = wrap_name(name, 20)
    assert "".join(lines) == name and all(0 < len(line) <= 20 for line in lines)
    assert len(lines) == 1 if len(name) <= 20 else len(lines) >= 2


def token_flags(taps: int, flagged: dict[int, int]) -> pd.DataFrame:
    tokens = np.array([flagged.get(i, 0) for i in range(taps)])
    return pd.DataFrame({"model": VIT_B, "tap": [f"blocks.{i // 2}.{('resid_mid', 'resid_post')[i % 2]}"
                                                 for i in range(taps)],
                         "threshold": 60.0, "median": 40.0, "mad": 2.0, "k": 5.0, "flagged_tokens": tokens,
                         "flagged_share": tokens / (32 * 196), "images_with_flags": np.minimum(tokens, 32),
                         "energy_share": tokens / 500, "images": 32})


def test_no_flagged_token_is_said_in_words_not_drawn_as_an_empty_chart():
    """The empty chart had one y tick, "0.000000"."""
    empty = token_flags(24, {})
    words = causal.no_flags_words(empty)
    assert words.startswith("no token flagged: ") and "24 layers" in words and "32 images" in words
    assert "median + 5 · 1.4826 · MAD" in words
    _, _, texts = drawn(causal.flag_summary_chart(empty))
    assert " ".join(texts[:-1]).replace("|", " ").split() == words.split()  # the export says it too
    assert not [t for t in texts if re.fullmatch(r"[\d.%]+", t)]  # no axis at all
    some = token_flags(48, {3: 4, 40: 900})
    assert causal.no_flags_words(some) is None
    width, _, texts = drawn(causal.flag_summary_chart(some))
    assert width <= PAGE_WIDTH, width  # ViT-L/16's 48 taps
    ticks = [t for t in texts if re.fullmatch(r"[\d.]+%", t)]
    assert ticks and "0%" in ticks and not [t for t in texts if "0.000000" in t]


def skip_summary(resnet: np.ndarray) -> pd.DataFrame:
    rows = [{"model": VIT_B, "layer": f"blocks.{b}.{s}", "block": b, "sublayer": s, "depth": (b + 1) / 12,
             "kind": k, "ratio": 2.0 + b, "cosine": 0.1} for b in range(12) for s in ("attn", "mlp")
            for k in ("cls", "spatial")]
    rows += [{"model": RESNET, "layer": t, "block": t, "sublayer": "block", "depth": (i + 1) / 16, "kind": "spatial",
              "ratio": r, "cosine": np.nan if np.isinf(r) else 0.2} for i, (t, r) in enumerate(zip(RESNET50_BLOCKS,
                                                                                                   resnet))]
    return pd.DataFrame(rows)


def legend_and_subtitle(chart) -> tuple[list, list]:
    spec = chart.to_dict()
    data = pd.DataFrame(spec["datasets"][spec["data"]["name"]])
    title = spec["title"]
    return sorted(set(data["series"])), (title.get("subtitle", []) if isinstance(title, dict) else [])


def test_skip_lines_legend_only_what_is_drawn_and_say_why_the_rest_is_not():
    """An untrained ResNet-50's ratio is infinite in every block (zero-initialised last norm): it was in the legend
    with no point drawn."""
    summary = skip_summary(np.full(16, np.inf))
    for value, what in (("ratio", "‖z‖/‖f(z)‖ is infinite in all 16 blocks (the long branch f(z) is zero)"),
                        ("cosine", "cos(z, f(z)) is undefined in all 16 blocks")):
        series, subtitle = legend_and_subtitle(skip_charts.skip_lines(summary, value))
        assert not [s for s in series if s.startswith(RESNET)] and len(series) == 4
        said = " ".join(subtitle)
        assert said.startswith(f"{RESNET} · spatial · block not drawn: ") and what in said, said
        width, _, texts = drawn(skip_charts.skip_lines(summary, value))
        assert width <= PAGE_WIDTH and not [t for t in texts if "…" in t]
    partly = np.r_[np.inf, np.linspace(2, 5, 15)]
    series, subtitle = legend_and_subtitle(skip_charts.skip_lines(skip_summary(partly), "ratio"))
    assert f"{RESNET} · spatial · block" in series
    assert " ".join(subtitle).startswith(f"{RESNET} · spatial · block drawn without 1 of its 16 blocks")
    assert legend_and_subtitle(skip_charts.skip_lines(skip_summary(np.linspace(2, 5, 16)), "ratio"))[1] == []
    nothing = skip_summary(np.full(16, np.inf))
    nothing = nothing[nothing["model"] == RESNET]
    with pytest.raises(VitlabError, match="no skip statistic can be drawn: .* infinite in all 16 blocks"):
        skip_charts.skip_lines(nothing, "ratio")


MESSAGE = ("the long branch f(z) is zero for some token or image, so ‖z‖/‖f(z)‖ is infinite (e.g. a zero-initialised "
           "last norm in an untrained block)")


def test_warnings_of_one_kind_are_one_line_with_the_blocks_in_words():
    """Sixteen yellow boxes, one per ResNet-50 block, pushed the skip charts screens down."""
    layers = {RESNET: RESNET50_BLOCKS, VIT_B: [f"blocks.{b}.{s}" for b in range(12) for s in ("attn", "mlp")]}
    every = [f"{RESNET} {t}: {MESSAGE}" for t in RESNET50_BLOCKS]
    assert group_warnings(every, layers) == [
        f"{RESNET}, all 16 blocks (stage 1 block 0 to stage 4 block 2): {MESSAGE}"]
    some = [every[5], every[0], "something else: entirely", f"{VIT_B} blocks.3.mlp: {MESSAGE}"] + every[7:15]
    assert group_warnings(some, layers) == [
        (f"{RESNET}, 10 blocks (stage 1 block 0, stage 2 block 2, stage 3 block 0, stage 3 block 1, stage 3 block 2, "
         f"stage 3 block 3 and 4 more): {MESSAGE}"),
        "something else: entirely", f"{VIT_B} block 3 MLP sublayer: {MESSAGE}"]
    # a model whose name begins with another's keeps its own line
    twin = f"{RESNET}-twin"
    both = {RESNET: RESNET50_BLOCKS, twin: RESNET50_BLOCKS}
    lines = group_warnings([f"{twin} layer1.0: {MESSAGE}", f"{RESNET} layer1.0: {MESSAGE}"], both)
    assert lines == [f"{twin} stage 1 block 0: {MESSAGE}", f"{RESNET} stage 1 block 0: {MESSAGE}"]
    assert group_warnings(every) == every  # without the models' layers nothing is guessed
