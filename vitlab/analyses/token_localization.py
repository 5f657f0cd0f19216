"""Localization for your own images: a data-set statistic from a reference set, and per-token maps of one image.

Localization in Raghu et al. 2021 (Sec. 5, Figs 9-10) is a property of a model measured over a data set: the CKA
between each token and each input patch, over images. Over a handful of uploads that estimate is noise (the unbiased
estimator needs 4 images per batch and is wide at that size), so the token↔patch CKA map is computed over a
**reference set** (a dataset or folder; at least :data:`MIN_IMAGES` images in at least :data:`MIN_BATCHES` batches),
with a 95 % Fieller interval over its batches (``vitlab.stats.evidence.BootstrapCKA``). What one image can answer is
different: "for this token, on this image, which pixels does it carry?": the gradient map
(``vitlab.token_gradient``) and where the token attends (``vitlab.attention.attention_map``), same token, same layer.

    reference source ─reference_localization─► ReferenceLocalization (T, G) CKA, lo, hi
    your image, (layer, row, col) ─token_view─► TokenView: CKA row over the grid + interval, gradient map, attention

Shapes: T tokens (prefix + spatial, or h·w positions), G grid positions, H×W input pixels.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..charts.words import data_in_sentence
from ..engine.context import Run
from ..engine.run import stream
from ..errors import VitlabError
from ..inputs import taps as taps_mod
from ..inputs.data import ImageSource, open_source, select
from ..inputs.images import ModelInput, describe_model_input
from ..inputs.models import LoadedModel
from ..stats import cka as cka_mod
from ..stats.evidence import BootstrapCKA
from ..stats.fieller import FIELLER
from . import attention as attention_mod
from .localization import LocalizationStatistic
from .receptive import block_names
from .token_gradient import TokenGradient, TokenGradientOptions, token_gradient

MIN_IMAGES = 64  # the floor for a data-set statistic: 4 batches of 16 (the unbiased HSIC needs 4 per batch)
MIN_BATCHES = 4  # an interval over batches needs 4 (vitlab.stats.evidence.MIN_UNITS)
DEFAULT_REFERENCE = "fashion-mnist:test"
REFERENCES = ("fashion-mnist:test", "samples")


@dataclass(frozen=True)
class ReferenceOptions:
    """The reference set of the token↔patch CKA map."""

    source: str = field(default=DEFAULT_REFERENCE, metadata={"help": "dataset or folder the CKA map is measured on"})
    images: int = field(default=256, metadata={"help": f"images of the reference set (at least {MIN_IMAGES})"})
    batch_size: int = field(default=32, metadata={"help": "images per batch; the interval resamples batches"})


def tap_of_block(loaded: LoadedModel, block: str) -> str:
    """The localization tap of a block: a ViT/Mixer block's output token stream, a CNN block itself."""
    return f"{block}.resid_post" if taps_mod.family(loaded.model) in ("vit", "mixer") else block


def enough_images(count: int) -> bool:
    return count >= MIN_IMAGES


def reference_plan(given: int, given_name: str, opts: ReferenceOptions) -> tuple[str, str | None]:
    """(the source to measure CKA on, a note for the reader or None): the images given when there are enough of them
    (``opts.source == 'given'``), the reference set otherwise, saying so."""
    if opts.source == "given":
        if enough_images(given):
            return given_name, None
        return DEFAULT_REFERENCE, (f"{given} image(s) given: too few for a data-set statistic (at least {MIN_IMAGES}); "
                                   "the CKA map is measured on the reference set, "
                                   f"{data_in_sentence(DEFAULT_REFERENCE)}, instead")
    if given < MIN_IMAGES:
        return opts.source, (f"{given} image(s) given: too few for a data-set statistic (at least {MIN_IMAGES}); "
                             f"the CKA map is measured on the reference set, {data_in_sentence(opts.source)}")
    return opts.source, None


@dataclass
class ReferenceLocalization:
    """Token↔patch CKA (T, G) of one layer over a reference set, with its 95 % Fieller interval over batches."""

    model: str
    layer: str  # the tap
    source: str
    grid: tuple[int, int]
    prefix: int
    cka: np.ndarray  # (T, G)
    lo: np.ndarray  # (T, G)
    hi: np.ndarray  # (T, G)
    images: int
    batches: int

    def token(self, row: int, col: int) -> int:
        return self.prefix + row * self.grid[1] + col

    def own(self, row: int, col: int) -> tuple[float, float, float]:
        """(CKA, lo, hi) of the token at (row, col) with its own patch."""
        t, g = self.token(row, col), row * self.grid[1] + col
        return float(self.cka[t, g]), float(self.lo[t, g]), float(self.hi[t, g])

    def to_frame(self):
        """One row per (token, position): cka, cka_lo, cka_hi, own (as ``LocalizationResult.to_frame``)."""
        import pandas as pd

        T, G = self.cka.shape
        t, g = np.meshgrid(np.arange(T), np.arange(G), indexing="ij")
        own = t - self.prefix
        gw = self.grid[1]
        return pd.DataFrame({
            "model": self.model, "layer": self.layer, "reference": self.source, "token": t.ravel(),
            "kind": np.where(own.ravel() < 0, "cls", "spatial"),
            "token_row": np.where(own >= 0, own // gw, -1).ravel(),
            "token_col": np.where(own >= 0, own % gw, -1).ravel(),
            "position": g.ravel(), "pos_row": (g // gw).ravel(), "pos_col": (g % gw).ravel(), "own": (own == g).ravel(),
            "cka": self.cka.ravel(), "cka_lo": self.lo.ravel(), "cka_hi": self.hi.ravel(),
            "interval_unit": "batches", "interval_units": self.batches, "interval_method": FIELLER})

    def summary(self):
        """Per spatial token: CKA with its own patch and its interval, and whether its own patch is the argmax."""
        import pandas as pd

        rows = []
        gh, gw = self.grid
        for r in range(gh):
            for c in range(gw):
                t = self.token(r, c)
                value, lo, hi = self.own(r, c)
                rows.append({"model": self.model, "layer": self.layer, "token": t, "token_row": r, "token_col": c,
                             "own_cka": value, "own_lo": lo, "own_hi": hi,
                             "localized": bool(np.nanargmax(self.cka[t]) == r * gw + c)})
        return pd.DataFrame(rows)


def reference_localization(loaded: LoadedModel, source: ImageSource, layer: str, opts: ReferenceOptions,
                           run: Run) -> ReferenceLocalization:
    """Token↔patch CKA of ``layer`` (a tap) over the first ``opts.images`` of ``source``, in batches small enough to
    give :data:`MIN_BATCHES`; the interval is the jackknife t over batches (``run.bootstrap`` 0: none;
    ``run.seed``)."""
    n = min(opts.images, len(source))
    if n < MIN_IMAGES:
        raise VitlabError(f"reference set '{source.name}' gives {n} images: a token-patch CKA map needs at least "
                          f"{MIN_IMAGES}; pick a larger dataset or folder (e.g. {DEFAULT_REFERENCE})")
    batch = max(cka_mod.MIN_UNBIASED_BATCH, min(opts.batch_size, n // MIN_BATCHES))
    taps_mod.check_taps(loaded.model, [layer])
    stat = LocalizationStatistic((layer,))
    acc, grid = None, None
    for _, found in stream([loaded], source, select(source, n), batch, [[stat]], run):
        arrays = found[0][stat.name]
        if acc is None:
            acc = BootstrapCKA([str(t) for t in range(arrays["tokens_0"].shape[0])],
                               [str(g) for g in range(arrays["patches_0"].shape[0])])
            grid = tuple(int(v) for v in arrays["grid_0"])
        acc.update(cka_mod.centred(arrays["tokens_0"]), cka_mod.centred(arrays["patches_0"]))
    if acc is None or acc.batches < MIN_BATCHES:
        got = 0 if acc is None else acc.batches
        raise VitlabError(f"reference set '{source.name}': {got} readable batch(es) of {batch}, fewer than "
                          f"{MIN_BATCHES}; unreadable images were skipped ({len(run.info.skipped_images)})")
    ev = acc.evidence(run.bootstrap, run.seed)
    return ReferenceLocalization(loaded.label, layer, source.name, grid, taps_mod.num_prefix_tokens(loaded.model),
                                 ev.cka, ev.lo, ev.hi, acc.images, acc.batches)


@dataclass
class TokenView:
    """Everything the upload view draws for one token of one image."""

    reference: ReferenceLocalization
    gradient: TokenGradient
    attention: attention_mod.AttentionMap | None  # None for models without attention (CNNs, Mixer)
    note: str | None  # why the reference set is used, or None
    attention_note: str | None = None

    def cka_grid(self) -> np.ndarray:
        """(gh, gw) CKA of the token with the patch at each position, over the reference set."""
        t = self.reference.token(self.gradient.row, self.gradient.col)
        return self.reference.cka[t].reshape(self.reference.grid)

    def summary(self) -> dict:
        value, lo, hi = self.reference.own(self.gradient.row, self.gradient.col)
        return {**self.gradient.summary(), "reference": self.reference.source,
                "reference_images": self.reference.images,
                "reference_batches": self.reference.batches, "own_cka": value, "own_cka_lo": lo, "own_cka_hi": hi}


def reference_for(loaded: LoadedModel, images, block: str, opts: ReferenceOptions, run: Run,
                  given: int | None = None, given_name: str = "your images",
                  reference: ImageSource | None = None) -> tuple[ReferenceLocalization, str | None]:
    """The token↔patch CKA of block ``block`` for **every** token (the images given when there are enough, else the
    reference set), and a note saying which. It does not depend on the token: the app computes it once per block and
    a token change only reads a row of it."""
    blocks = block_names(loaded)
    if block not in blocks:
        raise VitlabError(f"unknown block '{block}' for '{loaded.label}': blocks are {', '.join(blocks[:4])}, ...")
    count = given if given is not None else _count(images)
    reference_name, note = reference_plan(count, given_name, opts)
    if reference_name == given_name:
        source = images
    elif reference is not None and reference_name == opts.source:
        source = reference
    else:
        source = open_source(reference_name)
    return reference_localization(loaded, source, tap_of_block(loaded, block), opts, run), note


def token_view(loaded: LoadedModel, images, index: int, block: str, row: int, col: int, opts: ReferenceOptions,
               run: Run, given: int | None = None, given_name: str = "your images",
               reference: ImageSource | None = None,
               measured: tuple[ReferenceLocalization, str | None] | None = None) -> TokenView:
    """The reference-set CKA map of block ``block`` for the token at (row, col), its gradient map on image ``index``
    of ``images``, and (ViT) its mean-over-heads attention map on that image at the same block.

    ``given``: how many images the user gave (default: all of ``images``); ``reference``: ``opts.source`` already
    opened (the app keeps it cached); ``measured``: :func:`reference_for`'s answer for this block, already computed
    (a token change then costs one cached gradient and one row of the image's cached attention)."""
    ref, note = measured or reference_for(loaded, images, block, opts, run, given, given_name, reference)
    if not (0 <= row < ref.grid[0] and 0 <= col < ref.grid[1]):
        raise VitlabError(f"token (row {row}, col {col}) is outside {block}'s {ref.grid[0]}x{ref.grid[1]} grid")
    grad = token_gradient(loaded, images, TokenGradientOptions(index, block, row, col), run)
    amap, anote = None, None
    if taps_mod.family(loaded.model) == "vit":
        amap = attention_mod.attention_map(loaded, images, index, int(block.split(".")[1]), "mean", (row, col),
                                           store=run.store)
    else:
        anote = f"{loaded.label} has no attention: a CNN position's view is its gradient map alone"
    return TokenView(ref, grad, amap, note, anote)


def model_input(loaded: LoadedModel, image) -> ModelInput:
    """What ``loaded``'s eval transform does to ``image`` (PIL): steps in words, read from the transform itself, and
    the box of the original that the model's input covers."""
    return describe_model_input(loaded.transform, loaded.in_chans, image.size)


def centre_token(grid: tuple[int, int]) -> tuple[int, int]:
    """The token a view starts on: the grid's centre (a corner patch is often constant, e.g. black in
    Fashion-MNIST, and its CKA undefined)."""
    return grid[0] // 2, grid[1] // 2


def undefined_positions(cka: np.ndarray, grid: tuple[int, int]) -> list[tuple[int, int]]:
    """(row, col) of the grid positions whose patch CKA is undefined for every token: ``cka`` (T, G), a column all
    NaN (a patch constant in every image has zero self-HSIC, vitlab.stats.cka)."""
    dead = np.all(~np.isfinite(np.asarray(cka, dtype=np.float64)), axis=0)
    return [divmod(int(g), grid[1]) for g in np.flatnonzero(dead)]


def undefined_note(positions: list[tuple[int, int]], where: str = "every image") -> str | None:
    """Those positions in words, for the reader of a map with holes in it."""
    if not positions:
        return None
    named = "; ".join(f"row {r}, col {c}" for r, c in positions[:8])
    more = f" and {len(positions) - 8} more" if len(positions) > 8 else ""
    one = len(positions) == 1
    return (f"{named}{more}: {'a constant patch' if one else 'constant patches'} in {where} (e.g. a black border), "
            f"so CKA with {'it is' if one else 'them is'} undefined; {'it is' if one else 'they are'} left blank")


def _count(images) -> int:
    try:
        return len(images)
    except TypeError:
        return len(list(images))


def block_of_tap(loaded: LoadedModel, tap: str) -> str:
    """The block a localization tap belongs to ('blocks.5.resid_post' -> 'blocks.5'; a CNN tap is its block)."""
    blocks = block_names(loaded)
    if tap in blocks:
        return tap
    head = tap.rsplit(".", 1)[0]
    if head in blocks:
        return head
    raise VitlabError(f"tap '{tap}' of '{loaded.label}' belongs to no block")


def images_for_dataset(given: int, given_name: str, reference: ReferenceOptions) -> tuple[str, int, str | None]:
    """(source, images, note) for a data-set statistic over the images given: them if there are at least
    :data:`MIN_IMAGES`, else the reference set at its own count, and a note that says so and that this is more than
    the images given."""
    if enough_images(given):
        return given_name, given, None
    return reference.source, reference.images, (
        f"{given} image(s) given: too few for a data-set statistic (at least {MIN_IMAGES}, for an interval over "
        f"{MIN_BATCHES} batches); localization is measured on {reference.images} images of the reference set, "
        f"{data_in_sentence(reference.source)}, instead: {reference.images - given} more than given")
