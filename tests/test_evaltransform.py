"""vitlab.evaltransform runs timm's eval transform without torchvision's dispatch: the same tensor, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from timm.data import create_transform
from torchvision import transforms as T

import vitlab
from vitlab.inputs import evaltransform
from vitlab.inputs.data import to_tensor, transform_image

SIZES = [(500, 375), (375, 500), (224, 224), (161, 161), (170, 1000), (1000, 170), (249, 248), (33, 401),
         (160, 300), (100, 100), (7, 3), (1, 1)]


def _image(w: int, h: int, mode: str, seed: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    shape = (h, w, 3) if mode == "RGB" else (h, w)
    # gradients plus noise, so that every resampling filter and crop offset changes the result
    smooth = np.linspace(0, 255, w)[None, :] * np.linspace(0.2, 1, h)[:, None]
    arr = np.clip((smooth[..., None] if mode == "RGB" else smooth) + rng.normal(0, 40, shape), 0, 255)
    return Image.fromarray(arr.astype(np.uint8), mode)


TRANSFORMS = {
    "timm vit 160 bicubic": dict(input_size=(3, 160, 160), interpolation="bicubic", crop_pct=0.95,
                                 mean=(0.5,) * 3, std=(0.5,) * 3),
    "timm resnet50 bicubic": dict(input_size=(3, 224, 224), interpolation="bicubic", crop_pct=0.95),
    "timm bilinear 0.875": dict(input_size=(3, 224, 224), interpolation="bilinear", crop_pct=0.875),
    "timm lanczos": dict(input_size=(3, 96, 96), interpolation="lanczos", crop_pct=0.9),
    "timm nearest crop 1.0": dict(input_size=(3, 64, 64), interpolation="nearest", crop_pct=1.0),
    "timm squash": dict(input_size=(3, 120, 120), interpolation="bilinear", crop_mode="squash", crop_pct=0.9),
    "greyscale 28": dict(input_size=(1, 28, 28), interpolation="bilinear", crop_pct=1.0, mean=(0.286,),
                         std=(0.353,)),
    # not timm's, but its shape: a crop larger than the resized image (torchvision pads: FastEval declines)
    "crop over resize": T.Compose([T.Resize(48, interpolation=T.InterpolationMode.BICUBIC), T.CenterCrop((64, 56)),
                                   T.ToTensor(), T.Normalize((0.4, 0.5, 0.6), (0.2, 0.25, 0.3))]),
}


@pytest.mark.parametrize("name", list(TRANSFORMS))
def test_fast_eval_is_bit_identical_to_the_transform(name):
    kw = TRANSFORMS[name]
    transform = create_transform(**kw) if isinstance(kw, dict) else kw
    fast = evaltransform.fast_eval(transform)
    assert fast is not None, transform
    mode = "L" if isinstance(kw, dict) and kw["input_size"][0] == 1 else "RGB"
    crop_h, crop_w = transform.transforms[1].size
    padded = 0
    for k, (w, h) in enumerate(SIZES):
        img = _image(w, h, mode, k)
        ref = transform(img)
        got = fast.fast(img)
        if got is None:  # the crop is larger than the resized image: torchvision pads, FastEval declines
            padded += 1
            nw, nh = fast.resized_size(w, h)
            assert crop_h > nh or crop_w > nw
            got = fast(img, transform)
        assert got.dtype == ref.dtype and got.shape == ref.shape and got.is_contiguous()
        assert torch.equal(got, ref), (name, w, h, (got - ref).abs().max())
    assert padded == (len(SIZES) if name == "crop over resize" else 0)
    assert fast.state == "unchecked"
    assert torch.equal(fast(_image(300, 200, mode, 99), transform), transform(_image(300, 200, mode, 99)))
    # its self-check runs on the first image it computes (never, when every image is padded)
    assert fast.state == ("unchecked" if name == "crop over resize" else "same")


def test_zoo_and_timm_model_transforms_take_the_fast_path_and_keep_their_numbers(tiny_vit):
    zoo = vitlab.load("zoo:resnet", "cpu")
    for m in (tiny_vit, zoo):
        assert evaltransform.fast_eval(m.transform) is not None
        imgs = [_image(w, h, "RGB", k) for k, (w, h) in enumerate(SIZES[:6])]
        mode = "L" if m.in_chans == 1 else "RGB"
        ref = torch.stack([m.transform(img.convert(mode)) for img in imgs])
        assert torch.equal(to_tensor(imgs, m), ref)


def test_other_transforms_run_as_they_are():
    norm = T.Normalize((0.5,) * 3, (0.5,) * 3)
    others = [
        T.Compose([T.Resize(64), T.CenterCrop(64), T.ToTensor(), norm, T.Lambda(lambda x: x * 2)]),  # extra step
        T.Compose([T.Resize(64, max_size=80), T.CenterCrop(64), T.ToTensor(), norm]),
        T.Compose([T.Resize(64), T.RandomCrop(64), T.ToTensor(), norm]),
        create_transform(input_size=(3, 100, 120), interpolation="bilinear", crop_pct=0.9),  # ResizeKeepRatio
        create_transform(input_size=(3, 96, 96), crop_mode="border"),
        T.Compose([T.Resize(64), T.CenterCrop(64), T.ToTensor(), T.Normalize((0.5,) * 3, (0.0, 0.5, 0.5))]),
        lambda img: torch.zeros(3, 8, 8),
    ]
    for t in others:
        assert evaltransform.fast_eval(t) is None, t


def test_a_fast_path_that_differs_from_the_transform_on_its_first_image_is_never_used_again(monkeypatch):
    transform = create_transform(input_size=(3, 64, 64), interpolation="bicubic", crop_pct=0.9)
    fast = evaltransform.fast_eval(transform)
    real_fast = fast.fast
    monkeypatch.setattr(fast, "fast", lambda img: real_fast(img) + 1e-7)  # a rounding change somewhere
    imgs = [_image(90, 70, "RGB", k) for k in range(3)]
    assert all(torch.equal(fast(img, transform), transform(img)) for img in imgs)
    assert fast.state == "differs"


def test_loaded_model_inputs_are_unchanged_on_an_image_mode_the_fast_path_leaves_alone(tiny_vit):
    """transform_image converts to the model's mode first, as to_tensor always did; FastEval sees L or RGB only."""
    img = _image(200, 150, "RGB", 3).convert("P")
    assert torch.equal(transform_image(img, tiny_vit), tiny_vit.transform(img.convert("RGB")))


def test_the_cache_does_not_keep_transforms_alive():
    import gc
    import weakref

    transform = create_transform(input_size=(3, 64, 64), interpolation="bicubic", crop_pct=0.9)
    assert evaltransform.fast_eval(transform) is not None
    gone = weakref.ref(transform)
    del transform
    gc.collect()
    assert gone() is None


def test_a_changed_default_dtype_is_followed_as_totensor_follows_it():
    transform = create_transform(input_size=(3, 64, 64), interpolation="bicubic", crop_pct=0.9)
    img = _image(90, 70, "RGB", 5)
    assert torch.equal(evaltransform.apply(transform, img), transform(img))  # made and checked in float32
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        got, ref = evaltransform.apply(transform, img), transform(img)
    finally:
        torch.set_default_dtype(old)
    assert got.dtype == ref.dtype == torch.float64 and torch.equal(got, ref)


def test_per_object_remembers_what_it_can_and_makes_the_rest_each_time():
    import weakref

    cache, made = weakref.WeakKeyDictionary(), []

    def make(obj):
        made.append(1)
        return len(made)

    transform = create_transform(input_size=(3, 64, 64))
    assert evaltransform.per_object(cache, transform, make) == evaltransform.per_object(cache, transform, make) == 1
    assert evaltransform.per_object(cache, [1, 2], make) == 2 and evaltransform.per_object(cache, [1, 2], make) == 3
    assert evaltransform.per_object(cache, 7, make) == 4  # hashable but not weak-referenceable
    assert len(made) == 4 and len(cache) == 1
