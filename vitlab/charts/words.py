"""Names in a person's words for captions, chart labels and notes: "Fashion-MNIST test set" for the internal source
'fashion-mnist:test', "block 1" for the tap 'blocks.0.resid_post' (issue 38). The internal name stays where a
program reads it (the CSV, a tooltip). Pure: strings in, strings out; no model, no I/O."""

from __future__ import annotations

import re
from pathlib import PurePath

DATASETS = {"fashion-mnist": "Fashion-MNIST", "cifar10": "CIFAR-10", "cifar100": "CIFAR-100"}

# the part of a ViT / Mixer block a tap reads (vitlab.inputs.taps); the block output reads as the block itself
_PARTS = {"resid_post": "", "resid_pre": " input", "resid_mid": " after attention", "attn_probs": " attention",
          "attn_out": " attention branch", "mlp_out": " MLP branch", "sum": " before ReLU"}


def data_in_words(name: str) -> str:
    """A source's name for people: "Fashion-MNIST test set" ('fashion-mnist:test', or its resolved name
    'fashion-mnist:test:/usr/share/datasets/fashion-mnist:10000'), "uploaded images", "vitlab's sample
    photographs", "the folder 'cats'" (a folder by its last part, never the machine's full path)."""
    head, _, rest = name.partition(":")
    if head in DATASETS:
        split = rest.split(":", 1)[0] or "test"
        if not split.isalpha():  # 'fashion-mnist:10000': an image id's prefix, the bundled test slice
            split = "test"
        return f"{DATASETS[head]} {split} set"
    if name in ("uploads", "your uploads"):
        return "uploaded images"
    if PurePath(name).name == "samples":
        return "vitlab's sample photographs"
    return f"the folder '{PurePath(name).name or name}'"


def data_in_sentence(name: str) -> str:
    """:func:`data_in_words` after a preposition: "the Fashion-MNIST test set", "the uploaded images", "vitlab's
    sample photographs"."""
    words = data_in_words(name)
    return words if words.startswith(("the ", "vitlab's ")) else f"the {words}"


def layer_in_words(tap: str) -> str:
    """A tap or block for people, blocks counted from 1: 'blocks.0.resid_post' and 'blocks.0' -> "block 1",
    'blocks.3.resid_mid' -> "block 4 after attention", 'layer2.1' (ResNet) -> "stage 2 block 2",
    'stages.0.blocks.1' (ResNetV2) -> "stage 1 block 2"; a name of another form is returned as it is."""
    m = re.fullmatch(r"(?:stages\.(\d+)\.blocks|layer(\d+)|blocks)\.?(\d+)?(?:\.(\w+))?", tap)
    if m is None or m.group(3) is None:
        return tap
    v2, stage, block, part = m.groups()
    if part is not None and part not in _PARTS:
        return tap
    where = f"block {int(block) + 1}"
    if v2 is not None:
        where = f"stage {int(v2) + 1} {where}"
    elif stage is not None:
        where = f"stage {stage} {where}"
    return where + _PARTS.get(part or "", "")
