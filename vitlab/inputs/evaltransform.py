"""timm's eval transform in fewer Python steps, bit-identical: what the input workers spend their GIL time on.

Every timm model's eval transform with a square input is the same four steps
(``timm.data.create_transform(is_training=False)``)::

    Resize(shorter side -> s, or to (h, w))  CenterCrop(h, w)  (Maybe)ToTensor()  Normalize(mean, std)

torchvision runs them through ~40 Python calls an image (module dispatch, API-usage logging, dimension checks).
The pixel work is in Pillow's resize and in four torch kernels, which release the GIL; the Python around them does
not. With several input workers that Python is what they queue for, so :class:`FastEval` does the same calls
directly: Pillow's ``resize`` with torchvision's output size, the same crop box, then ToTensor's and Normalize's
kernels (``uint8 -> float``, ``/ 255``, ``- mean``, ``/ std``) in the same order and dtype, so the result is the same
tensor, bit for bit (tests/test_evaltransform.py checks it on timm transforms, sizes and aspect ratios).

Anything else (another crop mode, a max_size, a user's own transform, an image smaller than the crop, which
torchvision pads) goes through the transform itself. And each fast transform compares itself with the real one on
the first image it sees; if they differ (a future torchvision rounding differently) it never runs again.
"""

from __future__ import annotations

import weakref

_CACHE: "weakref.WeakKeyDictionary[object, FastEval | None]" = weakref.WeakKeyDictionary()
_UNSEEN = object()


class FastEval:
    """``transform(img)`` for a timm eval transform on an ``L``/``RGB`` PIL image, without torchvision's dispatch.

    It holds the transform's parameters, not the transform (the cache maps the transform to this weakly, so a
    reference back would keep every transform ever loaded alive); calls pass the transform in."""

    def __init__(self, size: int | tuple[int, int], resample: int, crop_hw: tuple[int, int], mean, std):
        import torch

        self.size, self.resample, self.crop_hw = size, resample, crop_hw
        dtype = torch.get_default_dtype()  # ToTensor's output dtype; Normalize casts mean and std to it
        self.mean = torch.as_tensor(mean, dtype=dtype).view(-1, 1, 1)
        self.std = torch.as_tensor(std, dtype=dtype).view(-1, 1, 1)
        self.dtype = dtype
        self.state = "unchecked"  # -> "same" or "differs" after the first image

    def resized_size(self, w: int, h: int) -> tuple[int, int]:
        """torchvision's Resize: ``(h, w)`` as given (timm's crop_mode="squash"), or an int: the shorter side becomes
        ``size``, the longer one ``int(size * long / short)``. Returns (width, height), as Pillow counts."""
        if isinstance(self.size, tuple):
            return self.size[1], self.size[0]
        if w <= h:
            return self.size, int(self.size * h / w)
        return int(self.size * w / h), self.size

    def fast(self, img):
        """The four steps as torchvision computes them; None when the crop is larger than the image (torchvision
        pads that case) or torch's default dtype has changed since this was made."""
        import numpy as np
        import torch

        if torch.get_default_dtype() != self.dtype:  # changed since: ToTensor follows it, the cached mean does not
            return None
        w, h = img.size
        nw, nh = self.resized_size(w, h)
        if (nw, nh) != (w, h):
            img = img.resize((nw, nh), self.resample)
        ch, cw = self.crop_hw
        if ch > nh or cw > nw:
            return None
        top, left = int(round((nh - ch) / 2.0)), int(round((nw - cw) / 2.0))
        img = img.crop((left, top, left + cw, top + ch))
        a = torch.from_numpy(np.array(img, np.uint8)).view(ch, cw, len(img.getbands()))  # (H, W, C), writable copy
        x = a.permute(2, 0, 1).contiguous().to(self.dtype).div_(255)  # ToTensor: (C, H, W) in [0, 1]
        return x.sub_(self.mean).div_(self.std)  # Normalize

    def __call__(self, img, transform):
        """``transform(img)``; ``transform`` is the one this was made from (:func:`fast_eval`)."""
        if self.state == "differs" or img.mode not in ("L", "RGB"):
            return transform(img)
        x = self.fast(img)
        if x is None:
            return transform(img)
        if self.state == "unchecked":
            import torch

            ref = transform(img)
            self.state = "same" if ref.dtype == x.dtype and torch.equal(ref, x) else "differs"
            return ref
        return x


def _recognise(transform) -> FastEval | None:
    try:
        from timm.data.transforms import MaybeToTensor
        from torchvision import transforms as T
        from torchvision.transforms.functional import pil_modes_mapping
    except ImportError:
        return None
    if type(transform) is not T.Compose or len(transform.transforms) != 4:
        return None
    resize, crop, to_tensor, norm = transform.transforms
    if not (type(resize) is T.Resize and type(crop) is T.CenterCrop and type(to_tensor) in (T.ToTensor, MaybeToTensor)
            and type(norm) is T.Normalize):
        return None
    size = resize.size
    if isinstance(size, (list, tuple)):
        size = size[0] if len(size) == 1 else tuple(size)
    ok_size = isinstance(size, int) or (len(size) == 2 and all(isinstance(v, int) for v in size))
    if not ok_size or resize.max_size is not None or resize.interpolation not in pil_modes_mapping:
        return None
    crop_hw = tuple(int(v) for v in crop.size)
    try:
        fast = FastEval(size, pil_modes_mapping[resize.interpolation], crop_hw, norm.mean, norm.std)
    except (TypeError, ValueError, RuntimeError):
        return None
    if len(crop_hw) != 2 or bool((fast.std == 0).any()) or fast.mean.numel() != fast.std.numel():
        return None
    return fast


def per_object(cache: weakref.WeakKeyDictionary, obj, make):
    """``cache[obj]``, made by ``make(obj)`` on first use; ``make(obj)`` on every call for an object that cannot be a
    weak key (not hashable, or not weak-referenceable). Workers racing on a first use may both make it: equal values,
    one is kept."""
    try:
        value = cache.get(obj, _UNSEEN)
    except TypeError:
        return make(obj)
    if value is _UNSEEN:
        value = cache[obj] = make(obj)
    return value


def fast_eval(transform) -> FastEval | None:
    """The :class:`FastEval` of ``transform`` (one per transform object), or None when it is not timm's eval
    transform."""
    return per_object(_CACHE, transform, _recognise)


def apply(transform, img):
    """``transform(img)``, through :class:`FastEval` when ``transform`` is a timm eval transform."""
    fast = fast_eval(transform)
    return transform(img) if fast is None else fast(img, transform)
