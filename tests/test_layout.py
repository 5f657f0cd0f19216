"""CNNs run channels-last: faster convolutions, Grams formed from the memory-order map in chunks, own cache keys.

References: float64 Grams of the default (NCHW) layout's activations, flattened in (C, h, w) order, and Song's
three-term HSIC_1 (tests/reference.py), so the layout, the feature order and the chunking are all checked at once.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import vitlab
from vitlab import VitlabError, cka, taps
from vitlab.engine import inflight
from vitlab.inputs.data import decode, plan_batches, select, to_tensor
from vitlab.inputs.models import wants_channels_last
from vitlab.engine.run import GramStatistic, forward_precision

from .reference import hsic1_song, linear_gram64


def _cka64(K, L):
    return hsic1_song(K, L) / np.sqrt(hsic1_song(K, K) * hsic1_song(L, L))


def _conv_weights(model):
    return [m.weight for m in model.modules() if isinstance(m, torch.nn.Conv2d) and m.kernel_size != (1, 1)]


def test_cnns_load_channels_last_and_vits_keep_the_default_layout(tiny_resnet, tiny_vit, monkeypatch):
    assert tiny_resnet.memory_format == "channels_last"
    weights = _conv_weights(tiny_resnet.model)
    assert weights and all(w.is_contiguous(memory_format=torch.channels_last) and not w.is_contiguous()
                           for w in weights)
    assert tiny_vit.memory_format == "contiguous"
    # the layout is in a CNN's cache keys; a ViT's keys are what they were before layouts existed
    assert forward_precision(tiny_resnet, amp=False) == "float32/cpu/channels_last"
    assert forward_precision(tiny_vit, amp=False) == "float32/cpu"
    assert not wants_channels_last(tiny_resnet.model, "mps") and wants_channels_last(tiny_resnet.model, "cuda:1")
    monkeypatch.setenv("VITLAB_CHANNELS_LAST", "0")
    plain = vitlab.load("test_resnet@random:0", "cpu")
    assert plain.memory_format == "contiguous" and all(w.is_contiguous() for w in _conv_weights(plain.model))
    assert forward_precision(plain, amp=False) == "float32/cpu"
    monkeypatch.setenv("VITLAB_CHANNELS_LAST", "sometimes")
    with pytest.raises(VitlabError, match="VITLAB_CHANNELS_LAST must be 1 .* or 0, not 'sometimes'"):
        vitlab.load("test_resnet@random:0", "cpu")


def test_memory_order_features_are_a_view_with_the_same_gram():
    x = torch.randn(5, 7, 6, 4).to(memory_format=torch.channels_last)
    flat = taps.features(x, None, "all", any_order=True)
    assert flat.data_ptr() == x.data_ptr() and flat.shape == (5, 7 * 6 * 4)  # no copy
    canonical = taps.features(x, None, "all")
    assert torch.equal(canonical, x.contiguous().reshape(5, -1))
    np.testing.assert_allclose(flat.double() @ flat.double().T, canonical.double() @ canonical.double().T,
                               rtol=1e-12)
    # a default-layout map is flattened as before, whatever the caller allows
    y = x.contiguous()
    assert torch.equal(taps.features(y, None, "all", any_order=True), y.reshape(5, -1))


def test_channels_last_grams_match_float64_grams_of_the_default_layout(tiny_resnet, fmnist_source, monkeypatch):
    monkeypatch.setattr(cka, "GRAM_CHUNK", 96)  # chunk the small model's maps as a real-size model's are
    source = fmnist_source
    batch = decode(source, plan_batches(source, select(source, 8), 8)[0])
    names = taps.default_taps(tiny_resnet.model)
    got = inflight.forward_statistics(tiny_resnet, to_tensor(batch.images, tiny_resnet), [GramStatistic()],
                                      batch)["gram"]["grams"]
    monkeypatch.setenv("VITLAB_CHANNELS_LAST", "0")
    plain = vitlab.load("test_resnet@random:0", "cpu")
    with taps.capture(plain.model, names) as acts, torch.inference_mode():
        plain.model(to_tensor(batch.images, plain))
    assert all(acts[t].is_contiguous() and acts[t].reshape(8, -1).shape[1] > 96 for t in names)
    ref = np.stack([linear_gram64(acts[t].numpy()) for t in names])
    assert got.shape == ref.shape
    for g, r in zip(got, ref):
        assert np.abs(g - r).max() <= 1e-5 * np.abs(r).max()
    for i in range(len(names)):
        for j in range(len(names)):
            assert _cka64(got[i].astype(np.float64), got[j].astype(np.float64)) == pytest.approx(
                _cka64(ref[i], ref[j]), abs=1e-6)


def test_the_layout_is_reported_in_run_json_and_the_tap_listing(tmp_path, capsys):
    from vitlab import cli

    assert cli.main(["taps", "-m", "test_resnet@random:0", "--device", "cpu"]) == 0
    assert "layout channels_last" in capsys.readouterr().out
    out = tmp_path / "cka"
    assert cli.main(["cka", "-m", "test_resnet@random:0", "-m", "test_vit@random:0", "-d", "fashion-mnist:test",
                     "-n", "8", "-b", "8", "--device", "cpu", "--no-cache", "-o", str(out)]) == 0
    meta = json.loads((out / "run.json").read_text())
    assert [m["memory_format"] for m in meta["models"]] == ["channels_last", "contiguous"]
