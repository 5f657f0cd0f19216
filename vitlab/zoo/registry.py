"""The zoo's registry: its recipes (pure parameters), where their checkpoints and cards live, and the cards.

Imports neither torch nor timm, so that ``vitlab zoo --help`` and ``vitlab zoo list`` answer at once;
:mod:`vitlab.zoo.recipes` builds the models.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vitlab.errors import VitlabError
from vitlab.resources import assets_dir

ZOO_DIR = assets_dir() / "zoo"  # in the wheel and in an editable checkout alike (vitlab.resources)

# Fashion-MNIST training-set pixel mean and std on [0, 1] (60k images; 0.28604, 0.35302).
MEAN = (0.2860,)
STD = (0.3530,)
INPUT_SIZE = (1, 28, 28)
SLICE_N = 500  # the first 500 test images (inside the bundled 1000): the checked-in accuracy check
SLICE_TOL = 0.01  # 5 of 500 images: room for BLAS differences between machines, far below any real regression



@dataclass(frozen=True)
class Recipe:
    """A named zoo model: architecture, constructor arguments, data and training schedule. Pure parameters."""

    name: str
    arch: str  # 'vit' | 'resnet' | 'mixer'
    kwargs: dict[str, Any] = field(hash=False)  # JSON-able constructor arguments of the timm class
    purpose: str
    fraction: float = 1.0  # of the 60k training images, stratified per class
    data_seed: int = 0  # seeds the permutation that picks the training indices
    seed: int = 0  # seeds initialisation and batch order
    steps: int = 4700  # optimiser steps (5 epochs of 60k at batch 64); fraction controls keep the same steps
    batch_size: int = 64
    lr: float = 2e-3
    weight_decay: float = 0.05
    warmup_steps: int = 200
    # Off for every shipped recipe: at a budget of a few epochs, flips and 2 px shifts cost the ViT 9 points
    # (0.68 vs 0.78 after 300 steps); the data-scale controls see the same (un-augmented) recipe.
    augment: bool = False
    noskip_block: int | None = None  # ViT block whose two skip connections are removed


# Patch 7: a 4x4 grid (+ CLS). Patch 4 (7x7) needed 2.3x the CPU time per image and learned slower per image
# (0.775 vs 0.806 after 300 steps), which put vit-cls >= 0.87 out of the 10-minute budget on 2 shared cores.
_VIT = {
    "img_size": 28,
    "patch_size": 7,
    "in_chans": 1,
    "num_classes": 10,
    "embed_dim": 64,
    "depth": 6,
    "num_heads": 4,
    "mlp_ratio": 2.0,
}
_VIT_GAP = dict(_VIT, class_token=False, global_pool="avg")
# Patch 2: a 14x14 grid (+ CLS), ViT-B/16's 196 tokens at 224 px, so that local and global heads, token maps and
# uploads have room to differ. Same width and heads as _VIT; depth 4 (not 6) to keep a training near the hour on one
# thread: 0.46 s per step of 64 vs 0.77 s at depth 6 (2-core machine, one thread). 196 tokens learn slower per image
# than 16 (0.62 vs ~0.8 on the bundled slice after 300 steps), so these train 10000 steps (10.7 epochs) instead of 4700:
# at 6000 steps the 10k test accuracy was 0.8695 (CLS) and 0.8559 (GAP), under the 0.87 target, and still rising;
# 10000 steps give 0.8795 and 0.8730 in about 72 CPU minutes each (docs/zoo.md).
_VIT14 = dict(_VIT, patch_size=2, depth=4)
# GAP differs from CLS only in pooling: fc_norm=False keeps the final LayerNorm as `norm`, before pooling, where the
# CLS model has it (timm's default for global_pool="avg" moves it after pooling, into `fc_norm`).
_VIT14_GAP = dict(_VIT14, class_token=False, global_pool="avg", fc_norm=False)
_RESNET = {
    "block": "basic",
    "layers": [2, 2, 2, 2],
    "channels": [16, 32, 64, 128],
    "stem_width": 16,
    "in_chans": 1,
    "num_classes": 10,
}
_MIXER = {"img_size": 28, "patch_size": 7, "in_chans": 1, "num_classes": 10, "embed_dim": 64, "num_blocks": 6}
_VIT14_RUN = {"steps": 10000}
_RESNET_RUN = {"steps": 2000, "batch_size": 128, "warmup_steps": 100}  # a ResNet step costs ~2.5x a ViT step


def _vit(name: str, purpose: str, **kw: Any) -> Recipe:
    return Recipe(name=name, arch="vit", kwargs=dict(_VIT), purpose=purpose, **kw)


RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        _vit("vit-cls", "the reference ViT: CLS token, 100 % of the data"),
        Recipe(
            "vit-gap", "vit", dict(_VIT_GAP), "vit-cls with global average pooling instead of a CLS token (CLS vs GAP)"
        ),
        Recipe("resnet", "resnet", dict(_RESNET), "the reference CNN: ResNet of 8 basic blocks", **_RESNET_RUN),
        Recipe("mixer", "mixer", dict(_MIXER), "MLP-Mixer, the attention-free patch model"),
        _vit("vit-cls-3pct", "data-scale control: vit-cls on 3 % of the data (Fig 12-13)", fraction=0.03),
        _vit("vit-cls-10pct", "data-scale control: vit-cls on 10 % of the data (Fig 12-13)", fraction=0.10),
        Recipe(
            "resnet-3pct",
            "resnet",
            dict(_RESNET),
            "data-scale control: resnet on 3 % of the data (Fig 12-13)",
            fraction=0.03,
            **_RESNET_RUN,
        ),
        _vit("vit-cls-noskip", "vit-cls retrained without the skips of middle block 3 (Fig 8)", noskip_block=3),
        Recipe("vit-cls-14", "vit", dict(_VIT14), "the 196-token ViT: CLS token, patch 2 (14x14 grid)", **_VIT14_RUN),
        Recipe("vit-gap-14", "vit", dict(_VIT14_GAP),
               "vit-cls-14 with global average pooling instead of a CLS token, final LayerNorm kept before pooling",
               **_VIT14_RUN),
        _vit("vit-cls-noskip0", "vit-cls retrained without the skips of the first block (Fig 8)", noskip_block=0),
        # Same data (data_seed 0, 100 %), other initialisation and batch order: the null of Fig 12, how far two
        # separately trained ViTs drift apart in their upper layers with no change of data at all.
        _vit("vit-cls-seed1", "seed control: the exact vit-cls recipe with seed 1 (Fig 12's other-seed null)", seed=1),
    )
}


def names() -> list[str]:
    """The zoo's recipe names, in registry order."""
    return list(RECIPES)


def recipe(name: str) -> Recipe:
    """The recipe called `name`; VitlabError naming the known ones otherwise."""
    if name not in RECIPES:
        raise VitlabError(f"unknown zoo model '{name}'; known zoo models: {', '.join(RECIPES)}")
    return RECIPES[name]


def checkpoint_path(name: str, root: str | Path | None = None) -> Path:
    """Where the safetensors checkpoint of `name` lives (assets/zoo/NAME.safetensors unless `root`)."""
    return Path(root or ZOO_DIR) / f"{recipe(name).name}.safetensors"


def card_path(name: str, root: str | Path | None = None) -> Path:
    return Path(root or ZOO_DIR) / f"{recipe(name).name}.json"


def card(name: str, root: str | Path | None = None) -> dict:
    """The model card (JSON) written when `name` was trained; VitlabError if it was not."""
    path = card_path(name, root)
    if not path.is_file():
        raise VitlabError(f"zoo model '{name}' has no card at '{path}'; train it with `vitlab zoo train {name}`")
    return json.loads(path.read_text())
