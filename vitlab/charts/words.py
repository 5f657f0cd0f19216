"""Names in a person's words for captions, chart labels and notes: "Fashion-MNIST test set" for the internal source
'fashion-mnist:test', "block 0" for the tap 'blocks.0.resid_post' (issue 38). Blocks and stages keep the numbers
of the model's own layer names (timm counts blocks from 0, as do the paper's figures, the CLI's `--blocks` and the
tour), so the words and the CSV's names never disagree by one. The internal name stays where a
program reads it (the CSV, a tooltip). Pure: strings in, strings out; no model, no I/O."""

from __future__ import annotations

import re
from pathlib import PurePath

DATASETS = {"fashion-mnist": "Fashion-MNIST", "cifar10": "CIFAR-10", "cifar100": "CIFAR-100"}

# the part of a ViT / Mixer block a tap reads (vitlab.inputs.taps); the block output reads as the block itself
_PARTS = {"resid_post": "", "resid_pre": " input", "resid_mid": " after attention", "attn_probs": " attention",
          "attn_out": " attention branch", "mlp_out": " MLP branch", "sum": " before ReLU",
          "attn": " attention sublayer", "mlp": " MLP sublayer"}  # the last two: a skip's sublayer (Fig 7)


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


def layer_in_words(tap: str, family: str | None = None) -> str:
    """A tap or block for people, numbered as the model names it: 'blocks.0.resid_post' and 'blocks.0' -> "block 0",
    'blocks.3.resid_mid' -> "block 3 after attention" ("after token mixing" for ``family`` 'mixer'), 'layer2.1'
    (ResNet, stages named from 1) -> "stage 2 block 1", 'stages.0.blocks.1' (ResNetV2) -> "stage 0 block 1"; a
    name of another form is returned as it is."""
    m = re.fullmatch(r"(?:stages\.(\d+)\.blocks|layer(\d+)|blocks)\.?(\d+)?(?:\.(\w+))?", tap)
    if m is None or m.group(3) is None:
        return tap
    v2, stage, block, part = m.groups()
    if part is not None and part not in _PARTS:
        return tap
    where = f"block {int(block)}"
    if v2 is not None or stage is not None:
        where = f"stage {int(v2 if v2 is not None else stage)} {where}"
    if part == "resid_mid" and family == "mixer":
        return where + " after token mixing"
    return where + _PARTS.get(part or "", "")


def layer_words(layers, family: str | None = None) -> dict[str, str]:
    """{tap: words} for a chart's axis (``axis_words``) or a picker's ``format_func``, in the layers' order."""
    return {str(t): layer_in_words(str(t), family) for t in layers}


def labels_in_words(layers, family: str | None = None) -> str:
    """The ``labelExpr`` of an axis or a facet header over these layers: each in words (``layer_words``)."""
    return axis_words(layer_words(layers, family))


def axis_words(words: dict[str, str]) -> str:
    """A Vega ``labelExpr`` that shows each axis value in words (``layer_words``) while the field, the selection, the
    tooltip and the CSV keep the internal name; a value not in ``words`` is shown as it is."""
    import json

    return f"({json.dumps(words)})[datum.value] || datum.value"
