"""Which of a model's head classes each label of a source is: the one place the logit lens, attribution, head
ablation and the skip interventions decide whether an accuracy can be read out, and against which head index.

A source's labels are indices into its own class list (a folder's sub-folders sorted by name, a data set's own
label order), and a head's outputs are indices into the classes it was trained on. The two agree only by
construction (the zoo on Fashion-MNIST) or by name; a count that happens to match proves nothing (the same
Fashion-MNIST images in class-named folders are in another order: the head's 'Trouser' is label 8 there).

:func:`class_match` decides, in this order:

1. no labels: no accuracy ("these images have no labels");
2. the head's class names are known (a zoo model's ``pretrained_cfg['label_names']``, or the ImageNet-1k/22k
   subset timm infers for a head of that size, with its synset ids and descriptions): every source class is
   matched by name, letters and digits only and case ignored (a folder cannot be named "T-shirt/top", so
   "T-shirt_top" or "tshirt top" name it; an ImageNet folder may be its synset id "n01440764" or any of the
   description's comma-separated names, "tench");
3. sub-folders named by the head's class index ("0", "1", ... "K-1"): that index;
4. the head's names unknown, the source a named data set (Fashion-MNIST, CIFAR) in its own label order and as many
   classes as the head: the same index (a head trained on that data set uses its order);
5. anything else: no accuracy, and a reason naming both sets of classes and what to do.

A model with no head (``num_classes == 0``: timm then returns its pooled features) has no readout at all:
:func:`require_head` raises before any forward pass.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import numpy as np

from ..errors import VitlabError
from ..inputs.data import FilesSource, ImageSource, display_name
from ..inputs.models import LoadedModel

SHOWN = 6  # class names listed in a reason before "... (N in all)"


def head_classes(loaded: LoadedModel) -> int:
    """The number of classes the head of ``loaded`` predicts (0: no head)."""
    model = loaded.model
    n = getattr(model, "num_classes", None)
    if n is None:
        head = model.get_classifier() if hasattr(model, "get_classifier") else None
        n = getattr(head, "out_features", 0)
    return int(n or 0)


def require_head(loaded: LoadedModel, what: str) -> int:
    """The head's class count; VitlabError when ``loaded`` has no classification head (nothing to read out)."""
    n = head_classes(loaded)
    if n < 1:
        raise VitlabError(f"{loaded.label} has no classification head (num_classes={n}): its output is its pooled "
                          f"features, not classes, and {what} needs a head; load the model with its head (timm's "
                          "default num_classes) or choose another model")
    return n


@functools.lru_cache(maxsize=4)
def _imagenet_names(subset: str) -> tuple[tuple[str, ...], ...]:
    """Per class of an ImageNet subset: its first name (shown), its description, its synset id and the other
    comma-separated names of the description."""
    from timm.data import ImageNetInfo

    info = ImageNetInfo(subset)
    out = []
    for k in range(info.num_classes()):
        desc = info.index_to_description(k)
        parts = [p.strip() for p in desc.split(",")]
        out.append((parts[0], desc, info.index_to_label_name(k), *parts[1:]))
    return tuple(out)


def head_names(loaded: LoadedModel) -> tuple[tuple[str, ...], ...] | None:
    """Per head class, the names it answers to (the first is the one shown); None when vitlab does not know them."""
    n = head_classes(loaded)
    cfg = getattr(loaded.model, "pretrained_cfg", None) or {}
    names = cfg.get("label_names")
    if names is not None and len(names) == n:
        return tuple((str(x),) for x in names)
    try:
        from timm.data import infer_imagenet_subset

        subset = infer_imagenet_subset(loaded.model)
        if subset:
            found = _imagenet_names(subset)
            return found if len(found) == n else None
    except Exception:  # noqa: BLE001 - an old timm or a missing info file: the names are then unknown
        return None
    return None


def name_key(name: str) -> str:
    """What two class names must share to be one class: letters and digits, case ignored."""
    return "".join(ch for ch in str(name).casefold() if ch.isalnum())


def _listed(names, n: int | None = None) -> str:
    names = [f"'{display_name(str(x))}'" for x in names]
    shown = ", ".join(names[:SHOWN])
    return shown + (f", … ({n or len(names)} in all)" if len(names) > SHOWN else "")


@dataclass(frozen=True)
class ClassMatch:
    """How one model's head reads one source's labels: ``mapping[label]`` is the head index of a source label,
    or ``mapping`` is None and ``reason`` says why no accuracy can be read out."""

    model: str
    classes: int  # the head's K
    names: tuple[str, ...] | None  # the head's class names shown (None: unknown)
    mapping: np.ndarray | None  # (M,) int64, one head index per source class
    reason: str = ""
    how: str = ""  # 'by name', 'by class index', 'in the data set's own order'

    @property
    def usable(self) -> bool:
        return self.mapping is not None

    def to_head(self, labels) -> np.ndarray:
        """Source labels (n,) as head indices (n,)."""
        if self.mapping is None:
            raise VitlabError(f"{self.model}: {self.reason}")
        return self.mapping[np.asarray(labels, dtype=np.int64)]

    def require(self, what: str, instead: str = "") -> ClassMatch:
        """Self when the labels can be read as head classes; otherwise VitlabError with the reason (and
        ``instead``, what the user can do without labels)."""
        if self.mapping is None:
            raise VitlabError(f"{what} needs labels that are {self.model}'s classes: {self.reason}"
                              + (f"; or {instead}" if instead else ""))
        return self

    def name(self, k: int) -> str:
        """Head class ``k`` in words ('' when the head's names are unknown)."""
        return self.names[k] if self.names and 0 <= k < len(self.names) else ""


def _name_index(heads) -> dict[str, set[int]]:
    """Name key -> the head classes answering to it (more than one: an ambiguous name, ImageNet's two 'crane's)."""
    index: dict[str, set[int]] = {}
    for i, names in enumerate(heads):
        for n in names:
            index.setdefault(name_key(n), set()).add(i)
    return index


def _index_names(classes: list[str], k: int) -> np.ndarray | None:
    """Sub-folders named by class index ("0" .. "K-1", leading zeros allowed), or None."""
    if not all(re.fullmatch(r"[0-9]{1,9}", c) for c in classes):
        return None
    idx = np.array([int(c) for c in classes], dtype=np.int64)
    return idx if len(set(idx.tolist())) == len(idx) and idx.max() < k else None


def class_match(loaded: LoadedModel, source: ImageSource, what: str = "a readout of its classes") -> ClassMatch:
    """Decide how ``source``'s labels map onto the head of ``loaded`` (module docstring); never raises for a
    mismatch (the caller says what it does without an accuracy, or calls :meth:`ClassMatch.require`), only for a
    model with no head (``what``: the analysis that needs one, for the message)."""
    k = require_head(loaded, what)
    heads = head_names(loaded)
    shown = tuple(h[0] for h in heads) if heads else None
    made = functools.partial(ClassMatch, loaded.label, k, shown)
    if not source.has_labels:
        return made(None, "these images have no labels")
    classes = [str(c) for c in source.classes]
    if heads is not None:
        index = _name_index(heads)
        hits = [index.get(name_key(c), set()) for c in classes]
        if all(len(h) == 1 for h in hits):
            mapping = np.array([next(iter(h)) for h in hits], dtype=np.int64)
            if len(set(mapping.tolist())) == len(mapping):
                return made(mapping, how="by name")
    by_index = _index_names(classes, k)
    if by_index is not None:
        return made(by_index, how="by class index")
    if heads is None and getattr(source, "labels_in_dataset_order", False) and len(classes) == k:
        return made(np.arange(k, dtype=np.int64), how="in the data set's own order")
    return made(None, _why(source, classes, k, heads))


def _why(source: ImageSource, classes: list[str], k: int, heads) -> str:
    folder = isinstance(source, FilesSource)
    ours = f"these images' are named {_listed(classes)}"
    if heads is None:
        order = "sorted by folder name" if folder else "in an order vitlab cannot tie to the head"
        todo = (f"name the sub-folders by class index 0..{k - 1}" if folder else
                "use labelled images of the data the head was trained on")
        return (f"the head predicts {k} classes and these images have {len(classes)}: the head's class names are "
                f"unknown and {ours}, {order}, so which label is which head class cannot be told: no accuracy; "
                f"{todo}")
    index = _name_index(heads)
    missing = [c for c in classes if not index.get(name_key(c))]
    ambiguous = [c for c in classes if len(index.get(name_key(c), ())) > 1]
    detail = []
    if missing and len(missing) == len(classes):
        detail.append("none of them names one of the head's classes")
    elif missing:
        detail.append(f"{_listed(missing)} {'names' if len(missing) == 1 else 'name'} none of the head's classes")
    if ambiguous:
        detail.append(f"{_listed(ambiguous)} {'names' if len(ambiguous) == 1 else 'name'} more than one")
    todo = (f"name the sub-folders as the head's classes (or by class index 0..{k - 1})" if folder else
            "use images labelled with the head's classes")
    return (f"the head predicts {k} classes and these images have {len(classes)}: the head's are named "
            f"{_listed([h[0] for h in heads])}; {ours}; {'; '.join(detail) or 'two of them name the same head class'}"
            f": they cannot be matched, so no accuracy; {todo}")
