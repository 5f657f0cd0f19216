"""The shipped zoo: every checkpoint loads, reproduces its recorded accuracy, and is a plain timm model."""

import dataclasses

import numpy as np
import pytest
import timm.data
import torch
from PIL import Image
from timm.models.mlp_mixer import MlpMixer
from timm.models.resnet import ResNet
from timm.models.vision_transformer import Block, VisionTransformer

from vitlab import zoo
from vitlab.errors import VitlabError
from vitlab.inputs import fmnist

CLASS = {"vit": VisionTransformer, "resnet": ResNet, "mixer": MlpMixer}


@pytest.fixture(scope="module")
def test_slice():
    x, y = fmnist.load("test", fmnist.bundled_dir())
    return x[: zoo.SLICE_N], y[: zoo.SLICE_N]


def test_registry_has_the_papers_controls():
    required = {
        "vit-cls",
        "vit-gap",
        "resnet",
        "mixer",
        "vit-cls-3pct",
        "vit-cls-10pct",
        "resnet-3pct",
        "vit-cls-noskip",
    }
    assert required <= set(zoo.names())
    for r in zoo.RECIPES.values():
        if r.arch == "vit":  # the 196-token pair is shallower to fit its hour of training (recipes.py says why)
            assert r.kwargs["depth"] >= (4 if r.kwargs["patch_size"] == 2 else 6)
        if r.noskip_block is not None:
            assert r.arch == "vit" and 0 <= r.noskip_block < r.kwargs["depth"]
    assert zoo.RECIPES["vit-gap"].kwargs["global_pool"] == "avg"
    assert zoo.RECIPES["vit-cls"].kwargs.get("global_pool", "token") == "token"


def test_seed_control_is_vit_cls_with_another_seed_only():
    # Fig 12's null (issue 33): the same recipe and training indices, only initialisation and batch order differ
    import dataclasses

    a, b = zoo.RECIPES["vit-cls"], zoo.RECIPES["vit-cls-seed1"]
    fa, fb = dataclasses.asdict(a), dataclasses.asdict(b)
    assert {k for k in fa if fa[k] != fb[k]} == {"name", "purpose", "seed"} and b.seed != a.seed
    ca, cb = zoo.card("vit-cls"), zoo.card("vit-cls-seed1")
    assert cb["seed"] == b.seed and cb["data"]["indices_sha256"] == ca["data"]["indices_sha256"]
    assert cb["checkpoint_sha256"] != ca["checkpoint_sha256"]


@pytest.mark.parametrize("name", zoo.names())
def test_shipped_checkpoint_loads_and_reproduces(name, test_slice):
    r = zoo.RECIPES[name]
    card = zoo.card(name)
    model = zoo.build(name)
    assert type(model) is CLASS[r.arch] and not model.training
    assert card["name"] == name and card["kwargs"] == r.kwargs and card["data"]["fraction"] == r.fraction
    assert card["noskip_block"] == r.noskip_block
    assert zoo.checkpoint_path(name).stat().st_size < 4 * 2**20  # a few MB at most
    assert zoo.fingerprint(name) == card["checkpoint_sha256"]
    acc = zoo.accuracy(model, *test_slice)
    assert abs(acc - card["slice_accuracy"]) <= card["slice_tolerance"], (name, acc, card["slice_accuracy"])
    assert model.pretrained_cfg["zoo"] == name and model.pretrained_cfg["input_size"] == zoo.INPUT_SIZE


def test_accuracy_targets_of_the_full_data_models():
    # targets of issue 3 on the full 10k test set, as recorded when trained; the time budget is CPU seconds of the
    # one training thread: 10 minutes; the 196-token pair needed 10000 steps for issue 26's 0.87 (6000 gave 0.8695 /
    # 0.8559), about 4300 CPU seconds each on one thread, over the issue's ~60 minutes (docs/zoo.md says so): 75 min.
    targets = {"vit-cls": (0.87, 600), "vit-cls-seed1": (0.87, 600), "vit-gap": (0.87, 600), "resnet": (0.90, 600), "mixer": (0.86, 600),
               "vit-cls-14": (0.87, 4500), "vit-gap-14": (0.87, 4500)}
    for name, (target, budget) in targets.items():
        card = zoo.card(name)
        assert card["test_images"] == 10000 and card["test_accuracy"] >= target, (name, card["test_accuracy"])
        assert card["train_cpu_seconds"] <= budget, (name, card["train_cpu_seconds"])


def test_196_token_pair_differs_only_in_pooling():
    cls, gap = zoo.build("vit-cls-14"), zoo.build("vit-gap-14")
    assert cls.patch_embed.num_patches == gap.patch_embed.num_patches == 196
    assert (cls.num_prefix_tokens, gap.num_prefix_tokens) == (1, 0)
    assert (cls.global_pool, gap.global_pool) == ("token", "avg")
    # the final LayerNorm sits before pooling in both (timm's default for avg pooling moves it to fc_norm, after)
    for m in (cls, gap):
        assert isinstance(m.norm, torch.nn.LayerNorm) and type(m.fc_norm) is torch.nn.Identity
    a, b = cls.state_dict(), gap.state_dict()
    assert set(a) - set(b) == {"cls_token"} and set(b) <= set(a)
    assert all(a[k].shape == b[k].shape for k in b if k != "pos_embed")
    assert (a["pos_embed"].shape[1], b["pos_embed"].shape[1]) == (197, 196)
    x = zoo.to_input(fmnist.load("test", fmnist.bundled_dir())[0][:4])  # (4, 1, 28, 28)
    with torch.no_grad():
        for m, pooled in ((cls, lambda t: t[:, 0]), (gap, lambda t: t.mean(1))):
            tokens = m.blocks(m._pos_embed(m.patch_embed(x)))  # (4, N, 64)
            torch.testing.assert_close(m(x), m.head(pooled(m.norm(tokens))), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["vit-cls-14", "vit-gap-14"])
def test_196_token_models_card_accuracy_through_timms_transform(name):
    # independent of zoo.to_input: the PIL images through timm's own eval transform, as the app feeds them
    model = zoo.build(name)
    card = zoo.card(name)
    transform = timm.data.create_transform(**timm.data.resolve_model_data_config(model))
    x, y = fmnist.load("test", fmnist.bundled_dir())
    x, y = x[: zoo.SLICE_N], y[: zoo.SLICE_N]
    batch = torch.stack([transform(Image.fromarray(img, mode="L")) for img in x])  # (500, 1, 28, 28)
    with torch.no_grad():
        acc = float((model(batch).argmax(-1).numpy() == y).mean())
    assert abs(acc - card["slice_accuracy"]) <= card["slice_tolerance"], (acc, card["slice_accuracy"])


def test_timm_transform_gives_the_training_input(test_slice):
    model = zoo.build("vit-cls")
    cfg = timm.data.resolve_model_data_config(model)
    assert cfg["input_size"] == (1, 28, 28) and cfg["crop_pct"] == 1.0
    transform = timm.data.create_transform(**cfg)
    x, _ = test_slice
    got = torch.stack([transform(Image.fromarray(img, mode="L")) for img in x[:8]])  # (8, 1, 28, 28)
    torch.testing.assert_close(got, zoo.to_input(x[:8]), atol=1e-6, rtol=0)


def test_noskip_block_has_no_residual():
    model = zoo.build("vit-cls-noskip")
    i = zoo.card("vit-cls-noskip")["noskip_block"]
    assert isinstance(model, VisionTransformer)
    blk = model.blocks[i]
    assert type(blk) is zoo.NoSkipBlock and isinstance(blk, Block)
    assert all(type(b) is Block for j, b in enumerate(model.blocks) if j != i)
    x = torch.randn(2, 50, model.embed_dim)  # (B, N, D)
    with torch.no_grad():
        y = blk(x)
        a = blk.ls1(blk.attn(blk.norm1(x)))
        expected = blk.ls2(blk.mlp(blk.norm2(a)))
        with_skip = Block.forward(blk, x)
    torch.testing.assert_close(y, expected)
    assert (y - with_skip).abs().max() > 1e-2
    assert "NoSkipBlock" in zoo.card("vit-cls-noskip")["surgery"][0]


def test_errors_name_the_models_and_the_fix(tmp_path):
    with pytest.raises(VitlabError, match="known zoo models: vit-cls, "):
        zoo.build("vit-huge")
    with pytest.raises(VitlabError, match="vitlab zoo train resnet"):
        zoo.build("resnet", root=tmp_path)
    (tmp_path / "resnet.safetensors").write_bytes(b"garbage")
    with pytest.raises(VitlabError, match="unreadable"):
        zoo.build("resnet", root=tmp_path)


def test_train_indices_are_stratified_and_seeded():
    y = np.repeat(np.arange(10), 600)
    a = zoo.train_indices(y, 0.03, 0)
    assert len(a) == 180 and np.bincount(y[a]).tolist() == [18] * 10
    np.testing.assert_array_equal(a, zoo.train_indices(y, 0.03, 0))
    assert not np.array_equal(a, zoo.train_indices(y, 0.03, 1))
    assert len(zoo.train_indices(y, 1.0, 0)) == 6000


def test_training_smoke_is_reproducible(tmp_path, monkeypatch):
    tiny = dataclasses.replace(
        zoo.RECIPES["vit-cls"],
        name="tiny",
        kwargs=dict(zoo.RECIPES["vit-cls"].kwargs, embed_dim=16, depth=1, num_heads=2),
        batch_size=16,
        steps=3,
        warmup_steps=1,
    )
    monkeypatch.setitem(zoo.RECIPES, "tiny", tiny)
    x, y = fmnist.load("test", fmnist.bundled_dir())
    data = {"train_data": (x[:200], y[:200]), "test_data": (x[200:300], y[200:300]), "progress": False}
    card = zoo.train("tiny", out=tmp_path / "a", **data)
    zoo.train("tiny", out=tmp_path / "b", **data)
    assert card["steps"] == 3 and card["data"]["n_train"] == 200 and card["test_images"] == 100
    # seeded: the same initialisation and data order. The weights agree to float32 round-off, not always bit for
    # bit: CPU kernels may sum in another order from one call to the next (seen: 1 run in 4 differs in the last bits)
    a, b = zoo.build("tiny", root=tmp_path / "a"), zoo.build("tiny", root=tmp_path / "b")
    for (name, pa), pb in zip(a.state_dict().items(), b.state_dict().values()):
        torch.testing.assert_close(pa, pb, rtol=1e-5, atol=1e-6, msg=name)
    other = zoo.train(dataclasses.replace(tiny, seed=tiny.seed + 1), out=tmp_path / "c", **data)
    c = zoo.build("tiny", root=tmp_path / "c")
    assert other["checkpoint_sha256"] != card["checkpoint_sha256"]
    assert not torch.allclose(c.state_dict()["head.weight"], a.state_dict()["head.weight"], atol=1e-3)
    model = zoo.build("tiny", root=tmp_path / "a")
    assert zoo.accuracy(model, x[200:300], y[200:300]) == card["test_accuracy"]


def test_cli(capsys):
    assert zoo.main(["list"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in zoo.names())
    assert zoo.main(["eval", "resnet", "--images", "100"]) == 0
    assert "resnet: test accuracy" in capsys.readouterr().out
    assert zoo.main(["eval", "nope"]) == 1
    assert "known zoo models" in capsys.readouterr().err


def _table_rows(doc: str, heading: str) -> dict[str, list[str]]:
    """The table of ``doc`` (relative to the repository) that follows ``heading``: figure -> its cells."""
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / doc).read_text()
    rows = {}
    for line in text[text.index(heading):].splitlines()[1:]:
        if line.startswith("| Fig"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[0]] = cells
        elif rows and not line.startswith("|"):
            break
    return rows


def test_docs_tables_of_the_196_token_pair_are_what_the_tour_says(tmp_path):
    # the tour's cheap checks on README's settings (256 test images in batches of 32, seed 0): verdicts and numbers
    import pandas as pd

    from vitlab.cli import main

    out = tmp_path / "tour"
    assert main(["tour", "-m", "zoo:vit-cls-14", "-m", "zoo:resnet", "--control", "random", "--gap-pair",
                 "zoo:vit-cls-14,zoo:vit-gap-14", "--only", "distance,localization,gap", "--data",
                 "fashion-mnist:test", "-n", "256", "-b", "32", "--seed", "0", "--no-cache", "-o", str(out)]) == 0
    frame = pd.read_csv(out / "tour.csv").set_index("figure")
    zoo_doc = _table_rows("docs/zoo.md", "`vitlab tour -m zoo:vit-cls-14")
    readme = _table_rows("README.md", "## What the zoo shows")
    assert set(frame.index) == {"Figs 3-4", "Fig 9", "Fig 10"} <= set(zoo_doc)
    for fig, r in frame.iterrows():
        cells = zoo_doc[fig]
        assert cells[1] == r["pattern"] and cells[3] == r["learned"], (fig, cells, r["pattern"], r["learned"])
        assert readme[fig][-1] == f"{r['pattern']}, {r['learned']}", (fig, readme[fig][-1])
        digits = 3 if fig == "Figs 3-4" else 2
        shown = f"{r['statistic']:.{digits}f} [{r['lo']:.{digits}f}, {r['hi']:.{digits}f}]".replace("-", "−")
        assert shown in cells[2], (fig, shown, cells[2])
    assert "pooling only" in frame.loc["Fig 10", "evidence"]
