"""Which input pixels one token carries, on one image: the gradient of the token with respect to the input.

For image x, a layer and one position t of its grid (a ViT/Mixer token, or one position of a CNN block's feature
map), the map is |∂(Σ_c h_t,c)/∂x|, averaged over the input's colour channels: the receptive-field analysis
(``vitlab.receptive``, Luo et al. 2016; Raghu et al. 2021 Sec. 4.2) for one token and one image instead of the
centre position averaged over images. "Summed over channels" is over the layer's channels, as there, so for the
centre position of a CNN block the map equals ``receptive_fields`` over that one image (tested).

The headline numbers are shares of the map's total: inside the token's own patch, and inside its 3×3 neighbourhood
of patches (clipped at the border), each beside the share a uniform gradient would give (the patch's or the
neighbourhood's area over the image's: the chance level in the same convention). Patches are the model's patches
for token models and, for a CNN, the input region the position covers on the h×w grid (edges at floor(i·H/h), as in
``vitlab.localization``).

Shapes: B batch (1 here), C input channels, H×W input pixels, gh×gw the layer's grid, N tokens, D width.

    image ─to_tensor─► x (1, C, H, W) ─forward to the layer─► y (1, N, D) | (1, D, gh, gw)
          ─Σ_c y[t]─► backward ─|·|, mean over C─► map (H, W) ─shares─► TokenGradient
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..engine.activations import as_source
from ..engine.context import Run
from ..errors import VitlabError
from ..inputs import taps as taps_mod
from ..inputs.cache import make_key
from ..inputs.data import to_tensor
from ..inputs.images import NOTES
from ..inputs.models import LoadedModel
from .receptive import block_names, input_gradient, layer_point

VERSION = 1


@dataclass(frozen=True)
class TokenGradientOptions:
    """Which image, layer and position."""

    index: int = field(default=0, metadata={"help": "which image of the set (0 = the first)"})
    layer: str = field(default="", metadata={"help": "a block ('blocks.0', 'layer3.1'), a CNN stage ('layer3', "
                                                     "'stages.2') or a tap name; '' = the first block"})
    row: int = field(default=0, metadata={"help": "the position's row on the layer's grid"})
    col: int = field(default=0, metadata={"help": "the position's column on the layer's grid"})
    residual: str = field(default="post", metadata={"help": "'post': the block output; 'pre': its last branch"})


def region_edges(size: int, parts: int) -> list[int]:
    """Edges of ``parts`` regions over ``size`` pixels (floor(i·size/parts)), as ``localization.patches``."""
    return [(i * size) // parts for i in range(parts + 1)]


def shares(gmap: np.ndarray, grid: tuple[int, int], pos: tuple[int, int]) -> dict[str, float]:
    """Share of ``gmap`` (H, W) in the patch ``pos`` of ``grid`` and in its 3×3 neighbourhood, and the shares a
    uniform map would give (area fractions)."""
    H, W = gmap.shape
    rows, cols = region_edges(H, grid[0]), region_edges(W, grid[1])
    r, c = pos
    own = (slice(rows[r], rows[r + 1]), slice(cols[c], cols[c + 1]))
    r0, r1, c0, c1 = max(r - 1, 0), min(r + 2, grid[0]), max(c - 1, 0), min(c + 2, grid[1])
    near = (slice(rows[r0], rows[r1]), slice(cols[c0], cols[c1]))
    total = float(gmap.sum())
    area = float(H * W)

    def frac(region) -> float:
        return float(gmap[region].sum()) / total if total > 0 else float("nan")

    def area_frac(region) -> float:
        return (region[0].stop - region[0].start) * (region[1].stop - region[1].start) / area

    return {"own_share": frac(own), "neighbourhood_share": frac(near), "own_chance": area_frac(own),
            "neighbourhood_chance": area_frac(near)}


def resolve_layer(loaded: LoadedModel, layer: str, residual: str = "post") -> tuple[str, str]:
    """(module, 'in'|'out') for a block, a tap or (CNNs) a stage module such as 'layer3' or 'stages.2'."""
    layer = layer or block_names(loaded)[0]
    fam = taps_mod.family(loaded.model)
    if fam in ("resnet", "resnetv2") and residual == "post" and _is_stage(loaded.model, layer):
        return layer, "out"  # a stage's output is its last block's output: the stage's feature map
    return layer_point(loaded, layer, residual)


def _is_stage(model, layer: str) -> bool:
    if layer.startswith("layer") and layer[5:].isdigit():
        return hasattr(model, layer)
    parts = layer.split(".")
    return len(parts) == 2 and parts[0] == "stages" and parts[1].isdigit() and int(parts[1]) < len(model.stages)


def _position_value(y, prefix: int, grid: tuple[int, int] | None, pos: tuple[int, int]):
    """Σ over channels (and the batch) of the layer output at grid position ``pos``; returns (value, grid)."""
    r, c = pos
    if y.dim() == 4:  # (B, D, gh, gw)
        g = (int(y.shape[2]), int(y.shape[3]))
        _check_pos(pos, g)
        return y[:, :, r, c].sum(), g
    if y.dim() == 3 and grid is not None:  # (B, N, D)
        _check_pos(pos, grid)
        return y[:, prefix + r * grid[1] + c].sum(), grid
    raise VitlabError(f"cannot find grid positions in a layer output of shape {tuple(y.shape)}")


def _check_pos(pos: tuple[int, int], grid: tuple[int, int]) -> None:
    if not (0 <= pos[0] < grid[0] and 0 <= pos[1] < grid[1]):
        raise VitlabError(f"position (row {pos[0]}, col {pos[1]}) is outside the layer's {grid[0]}x{grid[1]} grid: "
                          f"rows 0..{grid[0] - 1}, columns 0..{grid[1] - 1}")


def position_gradient(model, module: str, x, where: str, pos: tuple[int, int], prefix: int = 0,
                      grid: tuple[int, int] | None = None):
    """|∂ Σ_c y[pos] / ∂x| averaged over input channels: (B, C, H, W) -> ((B, H, W) float64, layer grid)."""
    return input_gradient(model, module, x, where, lambda y: _position_value(y, prefix, grid, pos))


@dataclass
class TokenGradient:
    """|∂h_t/∂x| of one token on one image, over the model's input pixels, with its shares."""

    model: str
    image: str
    layer: str
    row: int
    col: int
    grid: tuple[int, int]
    map: np.ndarray  # (H, W) float64, in the model's input frame (what ``activations.model_view`` shows)
    shares: dict[str, float]

    def summary(self) -> dict:
        return {"model": self.model, "image": self.image, "layer": self.layer, "row": self.row, "col": self.col,
                "grid": f"{self.grid[0]}x{self.grid[1]}", **self.shares}

    def shares_frame(self):
        """One row: the token and its shares (own patch, 3x3 neighbourhood) beside their uniform levels."""
        import pandas as pd

        return pd.DataFrame([self.summary()])

    def headline(self) -> str:
        s = self.shares
        return (f"{self.model} {self.layer} token ({self.row},{self.col}) on {self.image}: {s['own_share']:.1%} of "
                f"|dh/dx| in its own patch (uniform {s['own_chance']:.1%}), {s['neighbourhood_share']:.1%} in its 3x3 "
                f"neighbourhood (uniform {s['neighbourhood_chance']:.1%})")

    def to_frame(self):
        """Tidy (row, col, value) over input pixels, plus the token and its shares."""
        import pandas as pd

        H, W = self.map.shape
        r, c = np.meshgrid(np.arange(H), np.arange(W), indexing="ij")
        return pd.DataFrame({"pixel_row": r.ravel(), "pixel_col": c.ravel(), "gradient": self.map.ravel(),
                             "model": self.model, "image": self.image, "layer": self.layer, "token_row": self.row,
                             "token_col": self.col})

    @property
    def warnings(self) -> list[str]:
        if np.any(self.map):
            return []
        return [(f"{self.model} {self.layer} ({self.row},{self.col}): the gradient is zero everywhere (a constant "
                 "output, e.g. a zero-initialised norm in a randomly initialised branch)")]


def token_gradient(loaded: LoadedModel, images, opts: TokenGradientOptions, run: Run) -> TokenGradient:
    """The gradient map of position (``opts.row``, ``opts.col``) of ``opts.layer`` on image ``opts.index`` of
    ``images`` (a source, PIL images or (name, bytes) uploads). One forward to the layer and one backward; cached."""
    source = as_source(images)
    if not 0 <= opts.index < len(source):
        raise VitlabError(f"image index {opts.index} is outside 0..{len(source) - 1}")
    layer = opts.layer or block_names(loaded)[0]
    module, where = resolve_layer(loaded, layer, opts.residual)
    pos = (int(opts.row), int(opts.col))
    key = make_key("token-gradient", VERSION, loaded.fingerprint, source.item_key(opts.index), module, where, pos,
                   *loaded.layout_key)
    hit = run.store.get(key, {"map": None, "grid": (2,)})  # a planted entry of other arrays is a miss
    # decoded on a cache hit too: what the decoder did to the image (first frame of an animation, the central part
    # of a strip) is said with every answer, as the batched path says it (run.info.notices)
    image = source.load(opts.index)
    name = source.item_id(opts.index)
    run.info.notices += [(name, n) for n in image.info.get(NOTES, ()) if (name, n) not in run.info.notices]
    if hit is None:
        x = to_tensor([image], loaded)
        prefix, grid = taps_mod.num_prefix_tokens(loaded.model), taps_mod.grid_size(loaded.model)
        gmap, g = position_gradient(loaded.model, module, x, where, pos, prefix, grid)
        hit = {"map": gmap[0].cpu().numpy(), "grid": np.array(g)}
        run.store.put(key, hit)
        run.info.forward_passes[loaded.label] = run.info.forward_passes.get(loaded.label, 0) + 1
    grid = (int(hit["grid"][0]), int(hit["grid"][1]))
    gmap = np.asarray(hit["map"], dtype=np.float64)
    return TokenGradient(loaded.label, source.item_id(opts.index), layer, pos[0], pos[1], grid, gmap,
                         shares(gmap, grid, pos))
