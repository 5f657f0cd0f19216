"""What the ``attention-parity`` and ``attention-map`` commands compute: the capture check over a few images of a
source, and one image's attention map(s) with the image the model saw. The maths is in :mod:`vitlab.attention`."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..engine.activations import model_view
from .attention import ParityResult, attention_map, capture_parity, head_maps, image_attention
from ..engine.context import Run, RunInfo
from ..inputs.data import ImageSource, iter_images, select
from ..errors import VitlabError
from ..inputs.models import LoadedModel
from ..options import option, parse_ints


@dataclass(frozen=True)
class ParityOptions:
    """Options of the capture check (``vitlab attention-parity``)."""

    images: int = option(4, "number of images", short="-n")
    tolerance: float = option(1e-4, "allowed max difference relative to the output scale")


def parity(loaded: LoadedModel, source: ImageSource, opts: ParityOptions = ParityOptions(),
           run: Run | None = None) -> ParityResult:
    """:func:`capture_parity` over the first ``opts.images`` images of ``source``, judged at ``opts.tolerance``."""
    images = [img for _, img in iter_images(source, select(source, opts.images))]
    res = capture_parity(loaded, images)
    res.tolerance = opts.tolerance
    return res


@dataclass(frozen=True)
class AttentionMapOptions:
    """Options of one image's attention map (``vitlab attention-map``)."""

    image: int = option(0, "index of the image in the source")
    layer: int = option(0, "block index")
    head: str = option("all", "head index, 'mean', 'rollout' (blocks 0..layer), or 'all'")
    query: str = option("cls", "'cls', a patch index, or ROW,COL of the query patch")


def parse_query(text: str):
    """``'cls'`` -> 'cls'; ``'3,4'`` -> (3, 4); ``'7'`` -> 7."""
    if text.lower() == "cls":
        return "cls"
    values = parse_ints(text, "--query")
    if not values:
        raise VitlabError(f"--query must be 'cls', a patch index or ROW,COL, not '{text}'")
    return tuple(values) if "," in text else values[0]


@dataclass
class AttentionMapView:
    """One image's attention map(s) as ``vitlab attention-map`` writes them, with the image the model saw."""

    frame: object  # DataFrame: AttentionMap.to_frame() rows (every head and the mean for head 'all')
    grid: np.ndarray  # (gh, gw): the map drawn over the image (the head mean for 'all')
    image_id: str
    view: np.ndarray  # (H, W, 3) uint8: the image as the model sees it
    computed: int  # forward passes run (0: from the cache)
    opts: AttentionMapOptions
    info: RunInfo = field(default_factory=RunInfo)

    def to_frame(self):
        return self.frame

    def headline(self) -> list[str]:
        o = self.opts
        return [f"attention map of '{self.image_id}', block {o.layer}, head {o.head}, query {o.query}"]


def attention_map_view(loaded: LoadedModel, source: ImageSource, opts: AttentionMapOptions = AttentionMapOptions(),
                       run: Run | None = None) -> AttentionMapView:
    """The map(s) ``opts`` asks for of image ``opts.image`` (one cached forward pass)."""
    run = run or Run()
    if not 0 <= opts.image < len(source):
        raise VitlabError(f"--image {opts.image} is outside 0..{len(source) - 1} for '{source.name}'")
    query = parse_query(opts.query)
    acts = image_attention(loaded, source, opts.image, run.store)
    if opts.head == "all":
        frame = head_maps(loaded, source, opts.image, opts.layer, query, run.store)
        grid = attention_map(loaded, source, opts.image, opts.layer, "mean", query, acts=acts).grid
    else:
        head = opts.head if opts.head in ("mean", "rollout") else (parse_ints(opts.head, "--head") or [None])[0]
        if head is None:
            raise VitlabError(f"--head must be a head index, 'mean', 'rollout' or 'all', not '{opts.head}'")
        amap = attention_map(loaded, source, opts.image, opts.layer, head, query, acts=acts)
        frame, grid = amap.to_frame(), amap.grid
    view = model_view(loaded, source.load(opts.image))
    return AttentionMapView(frame, grid, acts.ids[0], view, acts.computed, opts, run.info)
