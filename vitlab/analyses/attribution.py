"""Attribution maps for one image and target class, each scored by deletion and insertion curves.

Maps (shapes: B batch, H heads, N tokens = P prefix + Ns spatial on a gh x gw grid, C channels, h x w a CNN map):

- ``rollout``: attention rollout (Abnar & Zuidema 2020, eq. 1; :func:`vitlab.analyses.attention.rollout_matrix`).
- ``rollout:FUSION:DISCARD``: rollout with head fusion (mean | max | min over heads) and a discard ratio, as in
  vit-explain (Gildenblat 2020): per block the fused (N, N) matrix has its lowest ``DISCARD`` fraction of entries
  set to zero (never the CLS→CLS entry), then ``A ← (A + I) / 2`` with rows renormalised, ``R ← A R``.
  ``rollout:mean:0`` is ``rollout``.
- ``grad-rollout``: gradient-weighted rollout (Chefer, Gur & Wolf 2021, "Generic Attention-model Explainability",
  eqs. 5-6 for self-attention): ``R = I``; per block ``Ā = mean_h (∇A ⊙ A)⁺``, ``R ← R + Ā R``, with
  ``∇A = ∂y_t/∂A`` the gradient of the target class's logit with respect to the block's attention probabilities.
- ``gradcam[:TAP]`` (CNNs): Grad-CAM (Selvaraju et al. 2017, eqs. 1-2) at a block output (default the last):
  ``α_c = 1/(h w) Σ_ij ∂y_t/∂A_cij``, map ``ReLU(Σ_c α_c A_c)``.
- ``random``: uniform random values (a control: its scores should match the random order's).

A token map is the CLS row of R over the spatial tokens (prefix tokens dropped); for a model without a CLS token
(global average pooling) it is the mean of the spatial rows.

Faithfulness: deletion and insertion curves and their AUC (``vitlab.analyses.deletion``: the cells, their order
with ties, the curves). The control is the mean AUC over ``random_orders`` seeded random orders of the same cells.
The random numbers of image batch b (random orders, ``random`` maps; a map's own scores use none) come from
``default_rng([seed, b])``, so the scores do not depend on how the batches are split: under torchrun each rank scores
its share and the per-image AUCs are gathered in batch order (the bootstrap over images is then a single process's);
the one image's maps are drawn by rank 0.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..engine import dist
from ..engine.activations import as_source
from ..engine.context import Run
from ..errors import VitlabError
from ..inputs import taps as taps_mod
from ..inputs.data import ImageSource, select, to_tensor
from ..inputs.models import LoadedModel
from ..options import DataOptions, option
from .attention import probs_taps, rollout_matrix
from .deletion import BASELINES, auc, cell_grid, cell_order, cell_scores, curves, default_cell_px
from .readout import ClassMatch, class_match, require_head

FUSIONS = ("mean", "max", "min")
TARGETS = ("pred", "label")
VIT_METHODS = ("rollout", "rollout:max:0.9", "rollout:min:0.9", "grad-rollout")
CNN_METHODS = ("gradcam",)


# ---------------------------------------------------------------- pure maps


def fused_rollout(probs_layers: Sequence[np.ndarray], fusion: str = "mean", discard: float = 0.0) -> np.ndarray:
    """Rollout with head fusion and discard ratio (module docstring): (H, N, N) per block -> (N, N), float64."""
    if fusion not in FUSIONS:
        raise VitlabError(f"head fusion must be one of {', '.join(FUSIONS)}, not '{fusion}'")
    if not 0.0 <= discard < 1.0:
        raise VitlabError(f"discard ratio must be in [0, 1), not {discard}")
    n = probs_layers[0].shape[-1]
    out = np.eye(n)
    for a in probs_layers:
        fused = getattr(np, fusion)(np.asarray(a, dtype=np.float64), axis=0)
        flat = fused.ravel()  # a view: discarding writes into `fused`
        drop = np.argsort(flat, kind="stable")[: int(flat.size * discard)]
        flat[drop[drop != 0]] = 0.0  # index 0 is CLS→CLS, which vit-explain keeps
        m = (fused + np.eye(n)) / 2
        out = (m / m.sum(-1, keepdims=True)) @ out
    return out


def grad_rollout(probs_layers: Sequence[np.ndarray], grads_layers: Sequence[np.ndarray]) -> np.ndarray:
    """Chefer et al. 2021, eqs. 5-6: R = I; R ← R + mean_h((∇A ⊙ A)⁺) R per block. (H, N, N) each -> (N, N)."""
    n = probs_layers[0].shape[-1]
    r = np.eye(n)
    for a, g in zip(probs_layers, grads_layers):
        cam = np.clip(np.asarray(g, dtype=np.float64) * np.asarray(a, dtype=np.float64), 0, None).mean(0)
        r = r + cam @ r
    return r


def gradcam(acts: np.ndarray, grads: np.ndarray) -> np.ndarray:
    """Grad-CAM of one image: activations and gradients (C, h, w) -> ReLU(Σ_c α_c A_c), α_c the mean gradient."""
    alpha = np.asarray(grads, dtype=np.float64).mean(axis=(1, 2))
    return np.clip(np.einsum("c,chw->hw", alpha, np.asarray(acts, dtype=np.float64)), 0, None)


def token_map(r: np.ndarray, prefix: int, grid: tuple[int, int], has_cls: bool) -> np.ndarray:
    """The CLS row of a relevance matrix (N, N) over the spatial tokens (gh, gw); mean spatial row without CLS."""
    rows = r[0] if has_cls else r[prefix:].mean(0)
    return np.asarray(rows[prefix:prefix + grid[0] * grid[1]], dtype=np.float64).reshape(grid)


# ---------------------------------------------------------------- forward/backward of a batch


def parse_method(loaded: LoadedModel, method: str) -> tuple[str, tuple]:
    """('rollout', (fusion, discard)) | ('grad-rollout', ()) | ('gradcam', (tap,)) | ('random', ())."""
    fam = taps_mod.family(loaded.model)
    name, *args = method.split(":")
    if name == "random":
        return name, ()
    if name in ("rollout", "grad-rollout"):
        if fam != "vit":
            raise VitlabError(f"{name} needs a ViT-family model with attention; '{loaded.label}' is a {fam} model: "
                              "use gradcam")
        if name == "grad-rollout":
            return name, ()
        try:
            return name, (args[0] if args else "mean", float(args[1]) if len(args) > 1 else 0.0)
        except ValueError:
            raise VitlabError(f"method '{method}': write rollout:FUSION:DISCARD, e.g. rollout:max:0.9") from None
    if name == "gradcam":
        if fam not in ("resnet", "resnetv2"):
            raise VitlabError(f"gradcam is for CNN stages; '{loaded.label}' is a {fam} model: use grad-rollout")
        tap = args[0] if args else taps_mod.default_taps(loaded.model)[-1]
        taps_mod.check_taps(loaded.model, [tap])
        if tap.endswith(taps_mod.CNN_SKIP_SUFFIXES):
            raise VitlabError(f"gradcam needs a block output (e.g. {taps_mod.default_taps(loaded.model)[-1]}), "
                              f"not '{tap}'")
        return name, (tap,)
    raise VitlabError(f"unknown attribution method '{method}': rollout[:FUSION:DISCARD], grad-rollout, "
                      "gradcam[:TAP] or random")


def _grad_pass(loaded: LoadedModel, x, targets, taps: list[str]) -> tuple[np.ndarray, dict, dict]:
    """Logits (B, classes), activations and gradients of Σ_i y_{i, t_i} at ``taps`` (images are independent)."""
    import torch

    model = loaded.model
    x = x.detach().clone().requires_grad_(True)  # parameters are frozen: the input carries the graph
    with torch.enable_grad(), taps_mod.capture(model, taps, detach=False) as acts:
        logits = model(x)
        y = logits[torch.arange(len(targets)), torch.as_tensor(targets, device=logits.device)].sum()
        grads = torch.autograd.grad(y, [acts[t] for t in taps]) if taps else []
        kept = {t: acts[t].detach().double().cpu().numpy() for t in taps}
    return (logits.detach().double().cpu().numpy(), kept,
            {t: g.detach().double().cpu().numpy() for t, g in zip(taps, grads)})


def maps_for_batch(loaded: LoadedModel, x, targets: Sequence[int] | None, methods: Sequence[str],
                   seed: int = 0) -> tuple[np.ndarray, list[dict[str, np.ndarray]]]:
    """(logits (B, classes), per image {method: map grid}) for a batch x (B, C, H, W); ``targets`` None: top-1."""
    import torch

    parsed = {m: parse_method(loaded, m) for m in methods}
    model = loaded.model
    taps: list[str] = []
    if any(p[0] in ("rollout", "grad-rollout") for p in parsed.values()):
        taps += probs_taps(loaded)
    taps += sorted({p[1][0] for p in parsed.values() if p[0] == "gradcam"})
    if targets is None:
        with torch.no_grad(), taps_mod.model_lock(model):  # never under another run's surgery or capture
            targets = model(x).argmax(-1).tolist()
    logits, acts, grads = _grad_pass(loaded, x, list(targets), taps)
    rng = np.random.default_rng(seed)
    fam = taps_mod.family(model)
    prefix = taps_mod.num_prefix_tokens(model)
    grid = taps_mod.grid_size(model) if fam in ("vit", "mixer") else None
    out = []
    for i in range(x.shape[0]):
        maps = {}
        for m, (name, args) in parsed.items():
            if name == "random":
                maps[m] = rng.random(grid or cell_grid(tuple(x.shape[-2:]), default_cell_px(loaded)))
            elif name == "gradcam":
                maps[m] = gradcam(acts[args[0]][i], grads[args[0]][i])
            else:
                probs = [acts[t][i] for t in taps if t.endswith(".attn_probs")]
                if name == "grad-rollout":
                    r = grad_rollout(probs, [grads[t][i] for t in taps if t.endswith(".attn_probs")])
                else:  # plain rollout is the attention page's (identical to fused_rollout(mean, 0), tested)
                    r = rollout_matrix(probs) if args == ("mean", 0.0) else fused_rollout(probs, *args)
                maps[m] = token_map(r, prefix, grid, taps_mod.has_cls_token(model))
        out.append(maps)
    return logits, out


# ---------------------------------------------------------------- deletion and insertion


# ---------------------------------------------------------------- one image, many images


@dataclass(frozen=True)
class FaithfulnessOptions(DataOptions):
    """Options of :func:`attribution`, :func:`faithfulness` and :func:`attribution_report`."""

    images: int | None = option(64, "images scored (first N, or shuffled)", short="-n")
    batch_size: int = option(16, "images per map batch", short="-b")
    methods: tuple[str, ...] | None = option(None, "maps: rollout[:FUSION:DISCARD], grad-rollout, gradcam[:TAP], "
                                                   "random (default: rollout, rollout:max:0.9, rollout:min:0.9, "
                                                   "grad-rollout for ViTs; gradcam for CNNs)", kind="strs")
    target: str = option("pred", "target class: pred (the model's top-1) or label (the source's label)",
                         choices=TARGETS)
    cell_px: int | None = option(None, "side of the deleted/inserted cells in input pixels (default: patch size; "
                                       "side // 14 for CNNs)")
    baseline: str = option("mean", "fill of deleted cells: mean (the data set's mean pixel, 0 after normalisation) "
                                   "or black", choices=BASELINES)
    random_orders: int = option(8, "random cell orders averaged for the control")
    image: int = option(0, "the image whose maps and curves are drawn")


def _methods(loaded: LoadedModel, opts: FaithfulnessOptions) -> tuple[str, ...]:
    if opts.methods:
        return tuple(opts.methods)
    return VIT_METHODS if taps_mod.family(loaded.model) == "vit" else CNN_METHODS


def _targets(loaded: LoadedModel, opts: FaithfulnessOptions, source: ImageSource, indices) -> list[int] | None:
    if opts.target == "pred":
        return None
    if opts.target != "label":
        raise VitlabError(f"target must be one of {', '.join(TARGETS)}, not '{opts.target}'")
    match = class_match(loaded, source, "attribution of a class").require(
        "target 'label'", "use target 'pred' (the model's top-1)")
    return [int(t) for t in match.to_head([int(source.label(i)) for i in indices])]


def _target_name(match: ClassMatch, source: ImageSource, target: int) -> str:
    """Head class ``target`` in words: the head's own name, or the source's where its labels are the head's
    indices in the data set's own order ('' otherwise)."""
    if match.names:
        return match.name(target)
    if match.usable and match.how == "in the data set's own order":
        return str(source.classes[target])
    return ""


def _score_batch(loaded, x, targets, methods, opts: FaithfulnessOptions, cell_px: int, rng,
                 step: Callable[[int, int, str], None] | None = None,
                 early: Callable[[dict, list, int, int], None] | None = None) -> list[dict]:
    """Maps, curves and AUCs of a batch of images: one dict per image. ``step(done, total, text)`` (``Run.step``,
    or a batch's share of it) hears each step: the maps' gradient pass, then every image's curves of each order.
    ``early(row, so_far, done, total)`` hears each image's maps (``row``: target and maps) and, after every forward
    of masked images, its curves so far (``so_far[k]``: order k's (curve, measured, of), curve None before it
    starts);
    ``done`` of ``total`` units: 1 for the maps, then one per masked image."""
    n, orders_per_image = x.shape[0], len(methods) + opts.random_orders
    total = 1 + n * orders_per_image  # the maps, then one step per image and cell order
    if step is not None:
        step(0, total, f"{loaded.label}: maps of {n} image{'s' if n > 1 else ''} ({', '.join(methods)}), "
             "one gradient pass")
    logits, maps = maps_for_batch(loaded, x, targets, methods, seed=int(rng.integers(2**31)))
    hw = tuple(x.shape[-2:])
    n_cells = int(np.prod(cell_grid(hw, cell_px)))
    rows = []
    for i, per in enumerate(maps):
        t = int(logits[i].argmax()) if targets is None else int(targets[i])
        ranked = [cell_order(cell_scores(per[m], hw, cell_px, m.startswith("gradcam"))) for m in methods]
        orders = [o for o, _ in ranked] + [rng.permutation(n_cells) for _ in range(opts.random_orders)]
        steps = [s for _, s in ranked] + [None] * opts.random_orders
        names = list(methods) + [f"random order {r + 1}" for r in range(opts.random_orders)]
        images_of = [2 * (n_cells + 1 if when is None else len(when)) for when in steps]  # masked images per order
        so_far: list = [(None, 0, of) for of in images_of]
        if early is not None:
            early({"target": t, "maps": per}, so_far, 1, 1 + sum(images_of))

        def seen(k: int, curve: np.ndarray, done: int, of: int, t=t, per=per, so_far=so_far,
                 images_of=images_of) -> None:
            so_far[k] = (curve, 2 * done, 2 * of)
            early({"target": t, "maps": per}, so_far, 1 + sum(images_of[:k]) + 2 * done, 1 + sum(images_of))
        c = []  # (methods + R, 2, n + 1): one order at a time (each its own forwards), so each is a step
        for k, (order, when) in enumerate(zip(orders, steps)):
            words = f"{loaded.label}: image {i + 1} of {n}, deletion and insertion of {names[k]}"
            at = 1 + i * orders_per_image + k
            if step is not None:
                step(at, total, f"{words} (order {k + 1} of {orders_per_image})")
            check = None if step is None else (lambda where, words=words, at=at: step(at, total, f"{words}: {where}"))
            c.append(curves(loaded, x[i], t, [order], cell_px, opts.baseline, steps=[when], check=check,
                            seen=None if early is None else lambda _, *a, k=k, seen=seen: seen(k, *a))[0])
        c = np.stack(c)
        rows.append({"target": t, "maps": per, "curves": c[: len(methods)], "random_curve": c[len(methods):].mean(0),
                     "auc": auc(c[: len(methods)]), "random_auc": auc(c[len(methods):]).mean(0)})
    return rows


@dataclass
class AttributionResult:
    """The maps of one image with their deletion/insertion curves and scores."""

    model: str
    image: str
    target: int
    maps: dict[str, np.ndarray]  # method -> (gh, gw) (or the CNN map's (h, w))
    curves: dict[str, np.ndarray]  # method and 'random order' -> (2, n + 1): deletion, insertion
    scores: dict[str, tuple[float, float]]  # method and 'random order' -> (deletion AUC, insertion AUC)
    cell_px: int
    baseline: str
    target_name: str = ""  # the target class in words (the source's class names when they are the model's classes)
    # a running estimate's masked images measured so far per curve, of those it needs ({}: the result itself)
    measured: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def target_words(self) -> str:
        """"Ankle boot (class 9)", or "class 9" when the source has no names for the model's classes."""
        return f"{self.target_name} (class {self.target})" if self.target_name else f"class {self.target}"

    def to_frame(self):
        """Curves: method, curve (deletion | insertion), step, fraction of cells, probability of the target."""
        import pandas as pd

        rows = []
        for m, c in self.curves.items():
            for k, name in enumerate(("deletion", "insertion")):
                n = c.shape[1]
                rows += [{"model": self.model, "image": self.image, "method": m, "curve": name, "step": s,
                          "fraction": s / (n - 1), "probability": float(c[k, s])} for s in range(n)]
        return pd.DataFrame(rows)

    def summary(self):
        import pandas as pd

        return pd.DataFrame([{"method": m, "deletion_auc": d, "insertion_auc": i, "target": self.target,
                              "target_name": self.target_name, "baseline": self.baseline, "cell_px": self.cell_px}
                             for m, (d, i) in self.scores.items()])

    def map_frame(self, method: str):
        import pandas as pd

        g = self.maps[method]
        r, c = np.meshgrid(np.arange(g.shape[0]), np.arange(g.shape[1]), indexing="ij")
        return pd.DataFrame({"row": r.ravel(), "col": c.ravel(), "value": g.ravel(), "method": method,
                             "model": self.model, "image": self.image, "target": self.target})


def attribution(loaded: LoadedModel, images, index: int = 0, opts: FaithfulnessOptions = FaithfulnessOptions(),
                run: Run | None = None) -> AttributionResult:
    """Every map of image ``index`` of ``images`` (a source, PIL images or uploads) with its faithfulness."""
    run = run or Run()
    source = as_source(images)
    if not 0 <= index < len(source):
        raise VitlabError(f"image {index} does not exist: the source has images 0..{len(source) - 1}")
    # a headless model has no class to attribute: refused here, before any forward pass
    match = class_match(loaded, source, "attribution of a class")
    methods = _methods(loaded, opts)
    cell_px = int(opts.cell_px or default_cell_px(loaded))
    x = to_tensor([source.load(index)], loaded)

    def result(row: dict, curves_: dict[str, np.ndarray], measured: dict | None = None) -> AttributionResult:
        scores = {m: tuple(float(v) for v in auc(c)) for m, c in curves_.items()}
        return AttributionResult(loaded.label, source.item_id(index), row["target"], row["maps"], curves_, scores,
                                 cell_px, opts.baseline, _target_name(match, source, int(row["target"])),
                                 measured or {})

    def early(row: dict, so_far: list, done: int, total: int) -> None:
        """The running estimate: every map, and the curves of the orders begun (random order: their mean)."""
        def make() -> AttributionResult:
            curves_ = {m: got[0] for m, got in zip(methods, so_far) if got[0] is not None}
            begun = [got for got in so_far[len(methods):] if got[0] is not None]
            if begun:
                curves_["random order"] = np.mean([got[0] for got in begun], axis=0)
            measured = {m: (got[1], got[2]) for m, got in zip(methods, so_far)}
            measured["random order"] = (sum(got[1] for got in begun), sum(got[2] for got in so_far[len(methods):]))
            out = result(row, curves_, measured)
            if begun:  # as the result's: the mean of the orders' areas
                out.scores["random order"] = tuple(float(v) for v in np.mean([auc(got[0]) for got in begun], 0))
            return out
        run.estimate(make, done, total)

    row = _score_batch(loaded, x, _targets(loaded, opts, source, [index]), methods, opts, cell_px,
                       np.random.default_rng(run.seed), run.step, early if run.partial is not None else None)[0]
    out = result(row, {m: row["curves"][k] for k, m in enumerate(methods)} | {"random order": row["random_curve"]})
    out.scores = {m: tuple(float(v) for v in row["auc"][k]) for k, m in enumerate(methods)}
    out.scores["random order"] = tuple(float(v) for v in row["random_auc"])
    return out


@dataclass
class FaithfulnessResult:
    """Deletion and insertion AUCs of every method and of the random order, per image."""

    model: str
    methods: list[str]
    ids: list[str]
    auc: np.ndarray  # (n, methods, 2): deletion, insertion
    random_auc: np.ndarray  # (n, 2)
    cell_px: int
    cells: int
    baseline: str
    bootstrap: np.ndarray  # (R, n) resampled image indices
    skipped: list = field(default_factory=list)

    @property
    def images(self) -> int:
        return len(self.ids)

    def to_frame(self):
        import pandas as pd

        rows = []
        for i, image in enumerate(self.ids):
            for k, m in enumerate(self.methods):
                rows.append({"model": self.model, "image": image, "method": m, "deletion_auc": self.auc[i, k, 0],
                             "insertion_auc": self.auc[i, k, 1], "deletion_auc_random": self.random_auc[i, 0],
                             "insertion_auc_random": self.random_auc[i, 1]})
        return pd.DataFrame(rows)

    def summary(self):
        """Per method and curve: mean AUC, the random order's, their difference with a 95 % bootstrap over images."""
        import pandas as pd

        rows = []
        for k, m in enumerate(self.methods):
            for c, curve in enumerate(("deletion", "insertion")):
                d = self.auc[:, k, c] - self.random_auc[:, c]
                boot = d[self.bootstrap].mean(1)
                rows.append({"model": self.model, "method": m, "curve": curve, "auc": float(self.auc[:, k, c].mean()),
                             "auc_random_order": float(self.random_auc[:, c].mean()), "minus_random": float(d.mean()),
                             "lo": float(np.percentile(boot, 2.5)), "hi": float(np.percentile(boot, 97.5)),
                             "images": self.images, "better": "lower" if curve == "deletion" else "higher"})
        return pd.DataFrame(rows)


def faithfulness(loaded: LoadedModel, source: ImageSource, opts: FaithfulnessOptions = FaithfulnessOptions(),
                 run: Run | None = None) -> FaithfulnessResult:
    """Deletion/insertion AUCs of every method over ``opts.images`` images of ``source``, against random orders."""
    run = run or Run()
    require_head(loaded, "attribution of a class")
    methods = _methods(loaded, opts)
    for m in methods:
        parse_method(loaded, m)
    cell_px = int(opts.cell_px or default_cell_px(loaded))
    indices = select(source, opts.images, opts.shuffle)
    starts = range(0, len(indices), opts.batch_size)
    mine = list(enumerate(starts))[run.shard[0]::run.shard[1]]  # torchrun: this rank's batches
    kept = []  # per batch: (batch number, (ids, AUCs, random-order AUCs, skipped images))
    for done, (b, s) in enumerate(mine):
        dist.at_batch(b)
        run.step(done, len(mine), f"batch {done + 1} of {len(mine)}")

        def step(d: int, total: int, text: str, done=done) -> None:  # this batch's share of the bar
            run.step(done * total + d, len(mine) * total, f"batch {done + 1} of {len(mine)}: {text}")
        chunk, imgs, skipped = [], [], []
        for i in indices[s:s + opts.batch_size]:
            try:
                imgs.append(source.load(i))
                chunk.append(i)
            except VitlabError as e:
                skipped.append((source.item_id(i), str(e)))
        rows = []
        if chunk:
            # each batch has its own seeded stream, so its random orders do not depend on which rank scores it
            rows = _score_batch(loaded, to_tensor(imgs, loaded), _targets(loaded, opts, source, chunk), methods,
                                opts, cell_px, np.random.default_rng([run.seed, b]), step)
        kept.append((b, ([source.item_id(i) for i in chunk], [r["auc"] for r in rows],
                         [r["random_auc"] for r in rows], skipped)))
    if run.progress:
        run.progress(len(mine), len(mine), "done")
    kept = run.gather_ordered(kept, "attribution scores")  # every rank's images, in batch order
    ids = [i for k in kept for i in k[0]]
    aucs, rand = [a for k in kept for a in k[1]], [a for k in kept for a in k[2]]
    skipped = [x for k in kept for x in k[3]]
    if not ids:
        raise VitlabError("no readable image to score")
    _, h, w = loaded.data_config["input_size"]
    boot = np.random.default_rng(run.seed).integers(0, len(ids), size=(max(1, run.bootstrap), len(ids)))
    return FaithfulnessResult(loaded.label, list(methods), ids, np.stack(aucs), np.stack(rand), cell_px,
                              int(np.prod(cell_grid((h, w), cell_px))), opts.baseline, boot, skipped)


@dataclass
class AttributionReport:
    """Faithfulness over a set of images, and the maps and curves of one of them (what the CLI writes)."""

    scores: FaithfulnessResult
    one: AttributionResult | None  # None on torchrun ranks other than 0
    view: np.ndarray | None  # (H, W, 3) uint8: the image as the model sees it

    def headline(self) -> list[str]:
        s, r = self.scores.summary(), self.scores
        return [s[["method", "curve", "auc", "auc_random_order", "minus_random", "lo", "hi"]].to_string(index=False),
                f"{r.images} images, {r.cells} cells of {r.cell_px} px, baseline {r.baseline}"]


def attribution_report(loaded: LoadedModel, source: ImageSource, opts: FaithfulnessOptions = FaithfulnessOptions(),
                       run: Run | None = None) -> AttributionReport:
    """:func:`faithfulness` over the images and :func:`attribution` of image ``opts.image``."""
    from ..engine.activations import model_view

    run = run or Run()
    scores = faithfulness(loaded, source, opts, run)
    if not run.is_main:  # torchrun: the one image's maps and curves are drawn by rank 0 alone
        return AttributionReport(scores, None, None)
    one = attribution(loaded, source, opts.image, opts, run.with_progress(None))
    return AttributionReport(scores, one, model_view(loaded, source.load(opts.image)))
