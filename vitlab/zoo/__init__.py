"""vitlab's own small reference models on Fashion-MNIST: recipes, training, checkpoints, cards, CLI.

- :mod:`vitlab.zoo.recipes`: the recipes (pure parameters), the timm models they build, checkpoints and cards;
- :mod:`vitlab.zoo.training`: training from scratch, the model card, evaluation;
- :mod:`vitlab.zoo.cli`: ``vitlab zoo list | train NAME | eval NAME``.

Controls of the paper: CLS vs GAP ViT, data scale 3 % / 10 % / 100 % (Fig 12-13), no skip (Fig 8).
"""

from .cli import add_cli, listing, main
from .recipes import (INPUT_SIZE, MEAN, RECIPES, SLICE_N, SLICE_TOL, STD, ZOO_DIR, NoSkipBlock, Recipe, build, card,
                      card_path, checkpoint_path, create, fingerprint, names, pretrained_cfg, recipe, to_input)
from .training import accuracy, evaluate, train, train_indices

__all__ = ["INPUT_SIZE", "MEAN", "RECIPES", "SLICE_N", "SLICE_TOL", "STD", "ZOO_DIR", "NoSkipBlock", "Recipe",
           "accuracy", "add_cli", "build", "card", "card_path", "checkpoint_path", "create", "evaluate",
           "fingerprint", "listing", "main", "names", "pretrained_cfg", "recipe", "to_input", "train",
           "train_indices"]
