"""vitlab's own small reference models on Fashion-MNIST: recipes, training, checkpoints, cards, CLI.

- :mod:`vitlab.zoo.registry`: the recipes (pure parameters), checkpoint and card paths, the cards (no torch);
- :mod:`vitlab.zoo.recipes`: the timm models the recipes build, checkpoints loaded, fingerprints, the input format;
- :mod:`vitlab.zoo.training`: training from scratch, the model card, evaluation;
- :mod:`vitlab.zoo.cli`: ``vitlab zoo list | train NAME | eval NAME``.

Controls of the paper: CLS vs GAP ViT, data scale 3 % / 10 % / 100 % (Fig 12-13), no skip (Fig 8).
The registry's names are imported at once; the others (which need torch and timm) on first use (PEP 562), so that
``vitlab zoo --help`` and ``vitlab zoo list`` import neither.
"""

import importlib

from .cli import add_cli, listing, main
from .registry import (INPUT_SIZE, MEAN, RECIPES, SLICE_N, SLICE_TOL, STD, ZOO_DIR, Recipe, card, card_path,
                       checkpoint_path, names, recipe)

_LAZY = {**dict.fromkeys(("NoSkipBlock", "build", "create", "fingerprint", "pretrained_cfg", "to_input"), "recipes"),
         **dict.fromkeys(("accuracy", "evaluate", "train", "train_indices"), "training")}

__all__ = ["INPUT_SIZE", "MEAN", "RECIPES", "SLICE_N", "SLICE_TOL", "STD", "ZOO_DIR", "NoSkipBlock", "Recipe",
           "accuracy", "add_cli", "build", "card", "card_path", "checkpoint_path", "create", "evaluate",
           "fingerprint", "listing", "main", "names", "pretrained_cfg", "recipe", "to_input", "train",
           "train_indices"]


def __getattr__(name: str):
    """A name of vitlab.zoo.recipes or vitlab.zoo.training, imported on first use."""
    if name not in _LAZY:
        raise AttributeError(f"module 'vitlab.zoo' has no attribute '{name}'")
    value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
