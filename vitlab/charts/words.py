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


def group_warnings(warnings: list[str], layers: dict[str, list[str]] | None = None, shown: int = 6) -> list[str]:
    """One line per model and message for warnings of the form '<model> <layer>: <message>' (one per layer, as the
    skip ratios give them), the layers in words: "resnet50@random:0, all 16 blocks (stage 1 block 0 to stage 4
    block 2): <message>" in place of sixteen boxes of the same words (issue 51). ``layers``: each model's layers,
    in order (for "all N" and the order); at most ``shown`` layers are named when not all. A warning of another
    form, or of a model not in ``layers``, is kept as it is."""
    layers = layers or {}
    groups: dict[tuple[str, str], list[str]] = {}
    out: list[str | tuple[str, str]] = []
    for text in warnings:
        key = None
        head, sep, message = text.partition(": ")
        for model in sorted(layers, key=len, reverse=True):  # the longest name first: 'x' is a prefix of 'x v2'
            if sep and head.startswith(model + " ") and head[len(model) + 1:] in layers[model]:
                key = (model, message)
                break
        if key is None:
            out.append(text)
            continue
        if key not in groups:
            groups[key] = []
            out.append(key)
        groups[key].append(head[len(key[0]) + 1:])
    return [item if isinstance(item, str) else _grouped(item, groups[item], layers[item[0]], shown) for item in out]


def _grouped(key: tuple[str, str], named: list[str], every: list[str], shown: int) -> str:
    model, message = key
    named = [t for t in every if t in set(named)]
    words = [layer_in_words(t) for t in named]
    if len(named) == 1:
        return f"{model} {words[0]}: {message}"
    unit = "sublayers" if any(w.endswith("sublayer") for w in words) else "blocks"
    if len(named) == len(every):
        return f"{model}, all {len(named)} {unit} ({words[0]} to {words[-1]}): {message}"
    listed = ", ".join(words[:shown]) + (f" and {len(words) - shown} more" if len(words) > shown else "")
    return f"{model}, {len(named)} {unit} ({listed}): {message}"


def wrap_name(name: str, width: int = 20) -> list[str]:
    """A model's name on lines of at most ``width`` characters, broken after '/', '_', '.', ':' or '-' and before
    '@' where it can be ("vit_base_patch16_224", "@random:0"); a run of ``width`` characters with no break in it is
    cut into pieces of ``width``. Joined, the lines are the name."""
    pieces = [p for p in re.split(r"(?<=[/_.:\-])|(?=@)", name) if p]
    lines: list[str] = []
    for piece in pieces:
        while len(piece) > width:
            lines.append(piece[:width])
            piece = piece[width:]
        if lines and len(lines[-1]) + len(piece) <= width:
            lines[-1] += piece
        elif piece:
            lines.append(piece)
    return lines or [name]


def names_wrapped(names, width: int = 20) -> str:
    """A ``labelExpr`` that writes each name whole on lines of at most ``width`` characters (:func:`wrap_name`),
    where Vega would cut it at a label limit ("vit_base_patch16_224@r…": issue 51)."""
    import json

    return f"({json.dumps({str(n): wrap_name(str(n), width) for n in names})})[datum.value] || datum.value"


def block_words(layers: list[str], i: int) -> str:
    """Block ``i`` of a model's ``layers`` for a person, counted from 1 so that it reads as its depth (the chart's x:
    block k of L sits at depth k / L): "block 2 of 6"; a CNN's stage beside it, "block 7 of 8 (stage 4)". The CSV
    keeps the model's own name (``layer``) and index from 0 (``block_index``)."""
    stage = re.match(r"stage \d+", layer_in_words(layers[i]))
    return f"block {i + 1} of {len(layers)}" + (f" ({stage[0]})" if stage else "")
