"""Localization for uploads (vitlab.token_localization): the reference-set CKA map and its bootstrap interval
against a float64 transcription of Song's HSIC_1 and a numpy bootstrap written here; the too-few-images rule; the
per-token view (gradient, attention) on uploaded photos."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import vitlab
from tests.reference import fieller_jackknife, hsic1_song, linear_gram64
from vitlab import VitlabError
from vitlab import token_localization as TL
from vitlab.engine.context import Run
from vitlab.inputs.data import to_tensor


def _uploads(names=("astronaut.jpg", "chelsea.jpg")):
    return [(n, (vitlab.data.ASSETS / "samples" / n).read_bytes()) for n in names]


def test_reference_plan_says_when_the_images_given_are_too_few():
    src, note = TL.reference_plan(2, "uploads", TL.ReferenceOptions())
    assert src == TL.DEFAULT_REFERENCE and "2 image(s) given: too few" in note and str(TL.MIN_IMAGES) in note
    src, note = TL.reference_plan(2, "uploads", TL.ReferenceOptions(source="given"))
    assert src == TL.DEFAULT_REFERENCE and "instead" in note
    src, note = TL.reference_plan(TL.MIN_IMAGES, "uploads", TL.ReferenceOptions(source="given"))
    assert (src, note) == ("uploads", None)
    assert TL.reference_plan(500, "x", TL.ReferenceOptions(source="samples")) == ("samples", None)


def test_reference_set_too_small_is_refused_in_words(tiny_vit):
    with pytest.raises(VitlabError, match=r"samples' gives 11 images.*at least 64"):
        TL.reference_localization(tiny_vit, vitlab.open_source("samples"), "blocks.0.resid_post",
                                  TL.ReferenceOptions(source="samples"), Run())


def _tokens_block0(model, x):
    """Block 0's output tokens, written out without hooks: (B, N, D)."""
    with torch.no_grad():
        return model.blocks[0](model.norm_pre(model._pos_embed(model.patch_embed(x)))).double().numpy()


def test_reference_cka_and_interval_match_a_float64_jackknife_over_batches():
    vit = vitlab.load("zoo:vit-cls", "cpu")
    src = vitlab.open_source("fashion-mnist:test")
    run = Run(bootstrap=300, seed=7)
    ref = TL.reference_localization(vit, src, "blocks.0.resid_post", TL.ReferenceOptions(images=64, batch_size=32),
                                    run)
    assert (ref.grid, ref.prefix, ref.images, ref.batches) == ((4, 4), 1, 64, 4)  # batches of 64 // 4 = 16
    row, col = 1, 2
    token = 1 + row * 4 + col
    terms = []
    for b in range(4):
        x = to_tensor([src.load(i) for i in range(16 * b, 16 * b + 16)], vit)
        tok = _tokens_block0(vit.model, x)[:, token]
        patch = x[:, :, 7 * row:7 * row + 7, 7 * col:7 * col + 7].double().numpy()
        K, L = linear_gram64(tok), linear_gram64(patch)
        terms.append((hsic1_song(K, L), hsic1_song(K, K), hsic1_song(L, L)))
    terms = np.array(terms)  # (T, 3)

    def cka(t):
        return t[..., 0] / np.sqrt(t[..., 1] * t[..., 2])

    value, lo, hi = ref.own(row, col)
    assert value == pytest.approx(cka(terms.sum(0)), abs=2e-4)
    want = fieller_jackknife(terms[:, 0], terms[:, 1], terms[:, 2])  # the CKA cell's interval (issue 40)
    assert lo == pytest.approx(max(want[0], 0.0), abs=2e-4)
    assert hi == pytest.approx(min(want[1], 1.0), abs=2e-4)
    assert lo < value < hi
    frame = ref.to_frame()
    assert len(frame) == 17 * 16 and {"cka_lo", "cka_hi"} <= set(frame.columns)
    summary = ref.summary()
    assert len(summary) == 16 and (summary["own_lo"] <= summary["own_hi"]).all()


def test_token_view_on_two_uploads_uses_the_reference_set(tiny_vit):
    ups = _uploads()
    run = Run(bootstrap=50)
    view = TL.token_view(tiny_vit, ups, 1, "blocks.1", 3, 4, TL.ReferenceOptions(images=64), run)
    assert "2 image(s) given" in view.note and view.reference.source.startswith("fashion-mnist:test")
    assert view.reference.layer == "blocks.1.resid_post" and view.reference.images == 64
    assert view.gradient.image == "chelsea.jpg" and (view.gradient.row, view.gradient.col) == (3, 4)
    direct = vitlab.token_gradient.token_gradient(
        tiny_vit, ups, vitlab.token_gradient.TokenGradientOptions(1, "blocks.1", 3, 4), Run())
    np.testing.assert_array_equal(view.gradient.map, direct.map)
    amap = vitlab.attention.attention_map(tiny_vit, ups, 1, 1, "mean", (3, 4))
    np.testing.assert_allclose(view.attention.grid, amap.grid)
    assert view.cka_grid().shape == (10, 10)
    assert view.cka_grid()[3, 4] == pytest.approx(view.summary()["own_cka"])
    with pytest.raises(VitlabError, match="outside blocks.1's 10x10 grid"):
        TL.token_view(tiny_vit, ups, 0, "blocks.1", 10, 0, TL.ReferenceOptions(images=64), run)
    with pytest.raises(VitlabError, match="unknown block"):
        TL.token_view(tiny_vit, ups, 0, "blocks.1.attn", 0, 0, TL.ReferenceOptions(images=64), run)


def test_token_view_of_a_cnn_position_has_no_attention():
    resnet = vitlab.load("zoo:resnet", "cpu")
    view = TL.token_view(resnet, _uploads(("coffee.jpg",)), 0, "layer2.0", 1, 2, TL.ReferenceOptions(images=64),
                         Run(bootstrap=50))
    assert view.attention is None and "no attention" in view.attention_note
    assert view.reference.grid == view.gradient.grid == (7, 7)
    assert view.gradient.shares["own_chance"] == pytest.approx(16 / 784)  # 4x4 px of a 28x28 input


def _ramp(size=(300, 200)):
    """An L image whose value is its column (scaled to 0..255): the model's input then says which columns it kept."""
    from PIL import Image

    W, H = size
    return Image.fromarray(np.tile(np.linspace(0, 255, W), (H, 1)).round().astype(np.uint8), "L")


@pytest.mark.parametrize("spec, size", [("zoo:vit-cls", (300, 200)), ("zoo:vit-cls", (200, 300)),
                                        ("test_vit@random:1", (300, 200))])
def test_model_input_box_matches_what_the_transform_keeps(spec, size):
    """The box said in words is the part of the original the transform keeps: checked against the model's own
    transform run on a column ramp (the first and last kept columns' values)."""
    m = vitlab.load(spec, "cpu")
    img = _ramp(size)
    seen = TL.model_input(m, img)
    assert seen.size == tuple(m.data_config["input_size"][1:][::-1])
    mode = "L" if m.in_chans == 1 else "RGB"
    x = m.transform(img.convert(mode)).double().numpy()[0]
    x = x * m.data_config["std"][0] + m.data_config["mean"][0]  # back to 0..1
    W = size[0]
    left, top, right, bottom = seen.box
    # the outermost input columns average ~(original px / input px) original columns each: compare with the
    # ramp's value at the box edges, within one input pixel's span
    span = (right - left) / x.shape[1]
    assert x[:, 0].mean() * 255 == pytest.approx(255 * (left + span / 2) / (W - 1), abs=255 * span / (W - 1) + 2)
    assert x[:, -1].mean() * 255 == pytest.approx(255 * (right - span / 2) / (W - 1), abs=255 * span / (W - 1) + 2)
    assert 0 <= top < bottom <= size[1]
    words = seen.text
    assert f"{size[0]}×{size[1]}" in words and ("grey" in words) == (m.in_chans == 1)
    if size[0] != size[1]:
        assert "centre-cropped" in words and "aspect kept" in words


def test_model_input_of_a_square_image_cuts_nothing():
    m = vitlab.load("zoo:vit-cls", "cpu")
    seen = TL.model_input(m, _ramp((56, 56)))
    assert seen.box == (0.0, 0.0, 56.0, 56.0) and "nothing cut" in seen.text


def test_centre_token_and_undefined_positions_in_words():
    assert TL.centre_token((4, 4)) == (2, 2) and TL.centre_token((14, 14)) == (7, 7) and TL.centre_token((7, 7)) == (3, 3)
    cka = np.random.default_rng(0).random((197, 196))
    cka[:, 0] = np.nan  # position (0, 0): every token's CKA with it undefined
    cka[5, 20] = np.nan  # one token's NaN is not a dead position
    assert TL.undefined_positions(cka, (14, 14)) == [(0, 0)]
    note = TL.undefined_note([(0, 0)], "every image")
    assert note.startswith("row 0, col 0: a constant patch in every image") and "undefined" in note
    assert TL.undefined_note([]) is None


def test_a_token_change_with_the_measured_reference_runs_no_batch(tiny_vit):
    """The app computes the reference-set CKA once per block; a token change then streams no batch at all."""
    ups = _uploads(("coffee.jpg",))
    opts = TL.ReferenceOptions(images=64)
    run = Run(bootstrap=50)
    measured = TL.reference_for(tiny_vit, ups, "blocks.1", opts, run, 1, "uploads")
    first = TL.token_view(tiny_vit, ups, 0, "blocks.1", 5, 5, opts, run, 1, "uploads", measured=measured)
    again = Run(bootstrap=50, store=run.store)
    view = TL.token_view(tiny_vit, ups, 0, "blocks.1", 2, 7, opts, again, 1, "uploads", measured=measured)
    assert again.info.batches_computed == again.info.batches_from_cache == 0
    assert view.reference is first.reference and view.cka_grid()[2, 7] == pytest.approx(view.summary()["own_cka"])
    direct = TL.token_view(tiny_vit, ups, 0, "blocks.1", 2, 7, opts, Run(bootstrap=50), 1, "uploads")
    np.testing.assert_allclose(view.cka_grid(), direct.cka_grid(), atol=1e-6)
    np.testing.assert_array_equal(view.gradient.map, direct.gradient.map)
