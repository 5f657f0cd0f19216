"""Model specs, checkpoint loading, offline errors, taps and their identities."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time

import pytest
import timm
import torch

import vitlab
from vitlab import VitlabError, taps
from vitlab.inputs.models import parse_spec


def test_spec_parsing():
    assert parse_spec("vit_base_patch16_224.augreg_in21k") == vitlab.ModelSpec("vit_base_patch16_224.augreg_in21k")
    assert parse_spec("test_vit@random").weights == "random:0"
    assert parse_spec("test_vit@random:7").weights == "random:7"
    assert parse_spec("zoo:vit-cls") == vitlab.ModelSpec("vit-cls", "zoo")
    assert parse_spec("ViT-B/32").name == "vit_base_patch32_224.augreg_in21k"
    for bad, msg in [("test_vit@random:x", "seed"), ("test_vit@weights.txt", "checkpoint file"), ("", "empty")]:
        with pytest.raises(VitlabError, match=msg):
            parse_spec(bad)


def test_random_weights_are_exactly_manual_seed_then_create_model():
    torch.manual_seed(3)
    ref = timm.create_model("test_vit", pretrained=False)
    got = vitlab.load("test_vit@random:3", "cpu")
    for (k, a), b in zip(ref.state_dict().items(), got.model.state_dict().values()):
        assert torch.equal(a, b), k
    assert got.fingerprint != vitlab.load("test_vit@random:4", "cpu").fingerprint


def test_unknown_model_is_a_clear_error():
    with pytest.raises(VitlabError, match="unknown model 'not_a_model_xyz'"):
        vitlab.load("not_a_model_xyz@random", "cpu")


def test_checkpoint_files_load_safely(tmp_path, tiny_vit):
    from safetensors.torch import save_file

    state = {k: v.clone() for k, v in tiny_vit.model.state_dict().items()}
    save_file(state, tmp_path / "w.safetensors")
    torch.save({"state_dict": state}, tmp_path / "w.pth")
    a = vitlab.load(f"test_vit@{tmp_path / 'w.safetensors'}", "cpu")
    b = vitlab.load(f"test_vit@{tmp_path / 'w.pth'}", "cpu")
    assert all(torch.equal(x, y) for x, y in zip(a.model.state_dict().values(), state.values()))
    assert all(torch.equal(x, y) for x, y in zip(b.model.state_dict().values(), state.values()))
    # the fingerprint follows the file bytes
    state["head.bias"] += 1
    save_file(state, tmp_path / "w2.safetensors")
    assert vitlab.load(f"test_vit@{tmp_path / 'w2.safetensors'}", "cpu").fingerprint != a.fingerprint


@pytest.mark.filterwarnings("ignore:Detected pickle protocol:UserWarning")  # torch's weights_only loader, as expected
def test_pickled_objects_are_never_unpickled(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'pwned'}",))

    with open(tmp_path / "evil.pth", "wb") as f:
        pickle.dump({"state_dict": Evil()}, f)
    with pytest.raises(VitlabError, match="cannot be read safely"):
        vitlab.load(f"test_vit@{tmp_path / 'evil.pth'}", "cpu")
    assert not (tmp_path / "pwned").exists()


def test_wrong_checkpoint_names_the_mismatch(tmp_path, tiny_resnet):
    torch.save(tiny_resnet.model.state_dict(), tmp_path / "resnet.pth")
    with pytest.raises(VitlabError, match="does not fit 'test_vit'"):
        vitlab.load(f"test_vit@{tmp_path / 'resnet.pth'}", "cpu")


def test_offline_pretrained_is_a_fast_clear_error(tmp_path):
    code = ("import vitlab, sys\n"
            "try:\n    vitlab.load('test_vit.r160_in1k', 'cpu')\n"
            "except vitlab.VitlabError as e:\n    print('ERR', e); sys.exit(3)\n")
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"))
    t0 = time.time()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 3, out.stderr[-2000:]
    assert "not in the local Hugging Face cache" in out.stdout and "checkpoint" in out.stdout
    assert time.time() - t0 < 60


@pytest.mark.parametrize("name", ["test_vit", "mixer_s32_224", "test_resnet", "resnetv2_50x1_bit"])
def test_families_and_default_taps(name):
    m = vitlab.load(f"{name}@random", "cpu")
    fam = taps.family(m.model)
    default = taps.default_taps(m.model)
    n_blocks = len(getattr(m.model, "blocks", []))
    expected = {"test_vit": ("vit", 2 * n_blocks), "mixer_s32_224": ("mixer", 2 * n_blocks),
                "test_resnet": ("resnet", 4), "resnetv2_50x1_bit": ("resnetv2", 16)}[name]
    assert (fam, len(default)) == expected


def test_unsupported_family_names_the_supported_ones():
    with pytest.raises(VitlabError, match="VisionTransformer.*MLP-Mixer.*ResNet"):
        taps.family(torch.nn.Linear(3, 3))


def test_vit_residual_identities_and_forward_intermediates(tiny_vit, fmnist_source):
    from vitlab.inputs.data import to_tensor

    model = tiny_vit.model
    x = to_tensor([fmnist_source.load(i) for i in range(4)], tiny_vit)
    names = list(taps.tap_table(model))
    with taps.capture(model, names) as acts, torch.no_grad():
        logits = model(x)
    with torch.no_grad():
        ref_logits = model(x)
        inter = model.forward_intermediates(x, return_prefix_tokens=True, intermediates_only=True,
                                            output_fmt="NLC")
    torch.testing.assert_close(logits, ref_logits, rtol=1e-5, atol=1e-5)  # fused vs unfused attention
    for i in range(len(model.blocks)):
        b = f"blocks.{i}"
        torch.testing.assert_close(acts[f"{b}.resid_mid"], acts[f"{b}.resid_pre"] + acts[f"{b}.attn_out"])
        torch.testing.assert_close(acts[f"{b}.resid_post"], acts[f"{b}.resid_mid"] + acts[f"{b}.mlp_out"])
        spatial, prefix = inter[i]
        torch.testing.assert_close(acts[f"{b}.resid_post"], torch.cat([prefix, spatial], 1), rtol=1e-5, atol=1e-5)
        p = acts[f"{b}.attn_probs"]
        assert p.shape[-1] == p.shape[-2] == acts[f"{b}.resid_post"].shape[1]
        torch.testing.assert_close(p.sum(-1), torch.ones_like(p.sum(-1)))
    assert all(blk.attn.fused_attn == timm.layers.use_fused_attn() for blk in model.blocks)


def test_hooks_and_fused_attention_restored_when_forward_raises(tiny_vit):
    model = tiny_vit.model
    fused_before = [blk.attn.fused_attn for blk in model.blocks]
    with pytest.raises((RuntimeError, ValueError)):
        with taps.capture(model, ["blocks.0.attn_probs", "blocks.1.resid_mid"]):
            model(torch.zeros(1, 5))  # wrong shape
    assert [blk.attn.fused_attn for blk in model.blocks] == fused_before
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


def test_unknown_tap_is_a_clear_error(tiny_vit):
    with pytest.raises(VitlabError, match="unknown tap"):
        with taps.capture(tiny_vit.model, ["blocks.99.resid_mid"]):
            pass


def test_token_modes(tiny_vit, tiny_resnet):
    x = torch.randn(2, 5, 8)
    prefix = taps.num_prefix_tokens(tiny_vit.model)
    assert torch.equal(taps.features(x, tiny_vit.model, "cls"), x[:, 0])
    assert torch.allclose(taps.features(x, tiny_vit.model, "gap"), x[:, prefix:].mean(1))
    assert taps.features(x, tiny_vit.model, "all").shape == (2, 40)
    with pytest.raises(VitlabError, match="no CLS token"):
        taps.features(torch.randn(2, 3, 4, 4), tiny_resnet.model, "cls")
