"""Activations of small image sets, cached per image and tap (float16 npz in the Store).

The interactive views (one image's per-head attention maps, a few uploaded images, a probe's few-shot set) need
the activations themselves, not per-batch sums. They are cached per (model fingerprint, image key, tap), so
switching head, token, layer or view never reruns the model, and adding an image to the set runs only that image.
float16 keeps a ViT-B/16 image's twelve attention maps at ~11 MiB; values are returned as float32.

    source, indices ─activations─► ActivationSet(ids, arrays {tap: (n, ...)})
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import VitlabError
from ..inputs import taps as taps_mod
from ..inputs.cache import Store, make_key
from ..inputs.data import FilesSource, ImageSource, to_tensor
from ..inputs.models import LoadedModel

VERSION = 1  # bump when the stored layout changes


@dataclass
class ActivationSet:
    """Activations of ``n`` images: ``arrays[tap]`` is (n, ...) float32, rows in the order of ``ids``."""

    ids: list[str]
    arrays: dict[str, np.ndarray]
    computed: int = 0  # images that needed a forward pass (the rest came from the cache)

    def __len__(self) -> int:
        return len(self.ids)

    def image(self, i: int) -> dict[str, np.ndarray]:
        """The activations of image ``i`` (no batch axis)."""
        return {t: a[i] for t, a in self.arrays.items()}


def as_source(images) -> ImageSource:
    """An ImageSource, a list of PIL images, or a list of (name, bytes) uploads, as a source."""
    if isinstance(images, ImageSource):
        return images
    items = list(images)
    if not items:
        raise VitlabError("no images given")
    if all(isinstance(it, tuple) for it in items):
        return FilesSource(items, name="uploads")
    return _PILSource(items)


class _PILSource(ImageSource):
    """In-memory PIL images; the key hashes the pixels, so an edited image never hits a stale entry."""

    def __init__(self, images: list):
        self.images = images
        self.name = "images"

    def __len__(self) -> int:
        return len(self.images)

    def item_id(self, i: int) -> str:
        return f"image#{i}"

    def item_key(self, i: int) -> str:
        import hashlib

        img = self.images[i]
        return f"pil:{img.mode}:{img.size}:{hashlib.sha1(img.tobytes()).hexdigest()}"

    def load(self, i: int, min_side: int | None = None):
        return self.images[i]


def _key(loaded: LoadedModel, item_key: str, tap: str) -> str:
    return make_key("activations", VERSION, loaded.fingerprint, item_key, tap, *loaded.layout_key)


def activations(loaded: LoadedModel, images, taps: Sequence[str], store: Store | None = None,
                indices: Sequence[int] | None = None, batch_size: int = 8,
                progress: Callable[[int, int, str], None] | None = None) -> ActivationSet:
    """Activations at ``taps`` of the images ``indices`` of ``images`` (a source, PIL images or uploads).

    Only images with a tap missing from ``store`` run through the model (once, batched, all missing taps at
    once). Unreadable images raise VitlabError naming the image. Intended for small sets (tens of images).
    """
    source = as_source(images)
    taps_mod.check_taps(loaded.model, list(taps))
    idx = list(range(len(source))) if indices is None else [int(i) for i in indices]
    if not idx:
        raise VitlabError("no images selected")
    store = store or Store(None)
    keys = [source.item_key(i) for i in idx]
    found = {(k, t): store.get(_key(loaded, k, t), {"a": None}) for k in keys for t in taps}
    todo = [j for j, k in enumerate(keys) if any(found[(k, t)] is None for t in taps)]
    for start in range(0, len(todo), batch_size):
        if progress:
            progress(start, len(todo), f"image {start + 1}/{len(todo)}")
        chunk = todo[start:start + batch_size]
        acts = _forward([source.load(idx[j]) for j in chunk], loaded, list(taps))
        for r, j in enumerate(chunk):
            for t in taps:
                value = acts[t][r].astype(np.float16)
                store.put(_key(loaded, keys[j], t), {"a": value})
                found[(keys[j], t)] = {"a": value}
    if progress:
        progress(len(todo), len(todo), "done")
    arrays = {t: np.stack([found[(k, t)]["a"] for k in keys]).astype(np.float32) for t in taps}
    return ActivationSet([source.item_id(i) for i in idx], arrays, computed=len(todo))


def _forward(images: list, loaded: LoadedModel, tap_names: list[str]) -> dict[str, np.ndarray]:
    import torch

    x = to_tensor(images, loaded)
    with taps_mod.capture(loaded.model, tap_names) as acts, torch.inference_mode():
        loaded.model(x)
    return {t: acts[t].float().cpu().numpy() for t in tap_names}


def model_view(loaded: LoadedModel, image) -> np.ndarray:
    """The image as the model sees it (resized, cropped; normalisation undone): (H, W, 3) uint8.

    Attention maps and receptive fields live on this frame, not on the original photograph.
    """
    mode = "L" if loaded.in_chans == 1 else "RGB"
    x = loaded.transform(image if image.mode == mode else image.convert(mode)).float().numpy()
    mean = np.asarray(loaded.data_config.get("mean", (0.0,) * x.shape[0]), dtype=np.float32)[:, None, None]
    std = np.asarray(loaded.data_config.get("std", (1.0,) * x.shape[0]), dtype=np.float32)[:, None, None]
    x = np.clip((x * std + mean) * 255.0, 0, 255).round().astype(np.uint8).transpose(1, 2, 0)
    return np.repeat(x, 3, axis=2) if x.shape[2] == 1 else x
