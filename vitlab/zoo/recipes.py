"""The models the zoo's recipes build (recipes and cards: :mod:`vitlab.zoo.registry`), checkpoints, the input format.

Every zoo model is a plain timm model (VisionTransformer, ResNet, MlpMixer) in a small configuration, so the
analyses treat it exactly like a hub model. All take one input format: greyscale (B, 1, 28, 28), pixels / 255
normalised with the Fashion-MNIST training mean and std. Two post-construction changes, both recorded in the
card and both still plain timm instances:
  - ResNet: `maxpool` is replaced by Identity, so a 28 px image is 14 px after the stem and the last stage
    sees 2x2 (timm's stem would leave 1x1 there).
  - ViT "noskip" models: block i's class is switched to `NoSkipBlock`, a subclass of timm's `Block` with the
    two residual additions removed (Raghu et al. 2021, Sec. 5 / Fig 8: models retrained without one skip).

Shapes: images (N, 28, 28) uint8 as stored; model input (B, 1, 28, 28) float32; logits (B, 10).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import torch
from timm.models.vision_transformer import Block
from torch import nn

from vitlab.errors import VitlabError
from vitlab.inputs import fmnist

# the registry's names, re-exported: vitlab.zoo.recipes stays the one module that has them all
from .registry import (INPUT_SIZE, MEAN, RECIPES, SLICE_N, SLICE_TOL, STD, ZOO_DIR, Recipe,  # noqa: F401
                       card, card_path, checkpoint_path, names, recipe)

# --------------------------------------------------------------------------------------------- models


class NoSkipBlock(Block):
    """timm's ViT block without its two residual additions: x = mlp(norm2(attn(norm1(x)))) (Fig 8).

    A subclass, so the model stays a plain timm VisionTransformer and its state dict keys are unchanged.
    """

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None, is_causal: bool = False):
        x = self.drop_path1(self.ls1(self.attn(self.norm1(x), attn_mask=attn_mask, is_causal=is_causal)))
        return self.drop_path2(self.ls2(self.mlp(self.norm2(x))))


def pretrained_cfg(r: Recipe) -> dict:
    """The timm data config of a zoo model: `timm.data.resolve_model_data_config` reads it."""
    return {
        "input_size": INPUT_SIZE,
        "mean": MEAN,
        "std": STD,
        "interpolation": "bilinear",
        "crop_pct": 1.0,
        "crop_mode": "center",
        "num_classes": 10,
        "classifier": "head" if r.arch != "resnet" else "fc",
        "first_conv": _first_conv(r),
        "label_names": list(fmnist.CLASSES),
        "zoo": r.name,
        "architecture": f"zoo:{r.name}",
    }


def _first_conv(r: Recipe) -> str:
    return {"vit": "patch_embed.proj", "mixer": "stem.proj", "resnet": "conv1"}[r.arch]


def create(r: Recipe) -> nn.Module:
    """The randomly initialised timm model of recipe `r` (seeded by the caller), with the recipe's surgery."""
    kw = dict(r.kwargs)
    if r.arch == "vit":
        from timm.models.vision_transformer import VisionTransformer

        model = VisionTransformer(**kw)
        if r.noskip_block is not None:
            model.blocks[r.noskip_block].__class__ = NoSkipBlock
    elif r.arch == "resnet":
        from timm.models.resnet import BasicBlock, Bottleneck, ResNet

        kw["block"] = {"basic": BasicBlock, "bottleneck": Bottleneck}[kw["block"]]
        kw["layers"], kw["channels"] = tuple(kw["layers"]), tuple(kw["channels"])
        model = ResNet(**kw)
        model.maxpool = nn.Identity()  # 28 px -> 14 after the stem, 2x2 in the last stage
    elif r.arch == "mixer":
        from timm.models.mlp_mixer import MlpMixer

        model = MlpMixer(**kw)
    else:
        raise VitlabError(f"zoo recipe '{r.name}' has unknown architecture '{r.arch}'")
    model.pretrained_cfg = pretrained_cfg(r)
    return model


def build(name: str, root: str | Path | None = None) -> nn.Module:
    """The timm model of zoo recipe `name` with its shipped safetensors weights, in eval mode, on CPU."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    r = recipe(name)
    path = checkpoint_path(name, root)
    if not path.is_file():
        raise VitlabError(f"zoo model '{name}' has no checkpoint at '{path}'; train it with `vitlab zoo train {name}`")
    try:
        state = load_file(str(path))
    except (SafetensorError, OSError) as e:
        raise VitlabError(f"zoo checkpoint '{path}' is unreadable ({e}); retrain it with `vitlab zoo train {name}`")
    model = create(r)
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as e:
        raise VitlabError(
            f"zoo checkpoint '{path}' does not match recipe '{name}' ({str(e).splitlines()[0]}); "
            f"retrain it with `vitlab zoo train {name}`"
        ) from e
    return model.eval()


def fingerprint(name: str, root: str | Path | None = None) -> str:
    """sha256 of the checkpoint file: changes exactly when the weights change."""
    return _sha256(checkpoint_path(name, root).read_bytes())


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --------------------------------------------------------------------------------------------- input


def to_input(images: np.ndarray | torch.Tensor) -> torch.Tensor:
    """uint8 (N, 28, 28) -> normalised float32 (N, 1, 28, 28), the same numbers timm's eval transform gives."""
    x = torch.tensor(images).unsqueeze(1).float().div_(255.0)  # a copy: frombuffer arrays are read-only
    return (x - MEAN[0]) / STD[0]
