"""Few-shot linear probes per layer and per representation (Raghu et al. 2021, Sec. 5, Figs 11 and 13, App. F).

The probe is the closed-form regularised least-squares classifier of the paper and of big_vision's few-shot
evaluator (``big_vision/evaluators/fewshot_lsr.py``): features are standardised with the training mean and
standard deviation (+1e-5), a constant feature of 100 is appended for the bias (large, so it is almost
unregularised), targets are one-hot vectors rescaled to {-1, 1}^C, and

    W = (XᵀX + λI)⁻¹ Xᵀ Y   (N >= D),   W = Xᵀ (X Xᵀ + λI)⁻¹ Y   (N < D),

computed from one eigendecomposition for every λ. λ is chosen from 2^-10 .. 2^19 (big_vision's grid) by accuracy
on a held-out split of labelled examples (ties go to the larger λ); accuracy is then measured on a test split.

Representations of a layer's tokens (B, N, D); prefix tokens (CLS) come first:

- ``cls``: token 0 of a CLS model;  ``gap``: the mean of the spatial tokens (positions, for a CNN);
- ``gap_cls``: the mean of all tokens, CLS included;  ``first``: token 0, whatever it is (a spatial token in a GAP
  model);  ``token``: one probe per individual spatial token, accuracies averaged over a spread sample of tokens.

    labelled source ─few_shot_split─► train/val/test ─run.stream(ProbeFeatures)─► features ─probe─► ProbeResult
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..engine.context import Run, RunInfo
from ..engine.run import Statistic, stream
from ..errors import VitlabError
from ..inputs import taps as taps_mod
from ..inputs.data import Batch, ImageSource
from ..inputs.models import LoadedModel
from ..options import option
from ..progress import passes
from ..stats import evidence as ev
from ..stats import pool
from ..stats.evidence import Estimate
from .reports import PerModel

L2_GRID = tuple(2.0**i for i in range(-10, 20))
BIAS_CONSTANT = 100.0
REPRESENTATIONS = ("cls", "gap", "gap_cls", "first", "token")


# ---------------------------------------------------------------- the closed-form probe


@dataclass
class RidgeProbe:
    """An eigendecomposition of the standardised training features: W for any λ without refactoring."""

    mean: np.ndarray
    std: np.ndarray
    eigs: np.ndarray
    lhs: np.ndarray
    rhs: np.ndarray

    def weights(self, l2: float) -> np.ndarray:
        """(D + 1, C): the regularised least-squares solution for ``l2``."""
        return (self.lhs / (self.eigs + l2)[None, :]) @ self.rhs

    def design(self, x: np.ndarray) -> np.ndarray:
        """Standardise with the training statistics and append the bias feature: (n, D) -> (n, D + 1)."""
        x = (np.asarray(x, dtype=np.float64) - self.mean) / self.std
        return np.pad(x, ((0, 0), (0, 1)), constant_values=BIAS_CONSTANT)

    def accuracy(self, x: np.ndarray, y: np.ndarray, l2: float) -> float:
        return float(np.mean(np.argmax(self.design(x) @ self.weights(l2), axis=1) == np.asarray(y)))


def targets(y: np.ndarray, num_classes: int) -> np.ndarray:
    """One-hot rescaled to {-1, 1}: (n,) -> (n, C)."""
    return 2.0 * np.eye(num_classes)[np.asarray(y)] - 1.0


def fit(x: np.ndarray, y: np.ndarray, num_classes: int) -> RidgeProbe:
    """Precompute the probe of features ``x`` (n, D) and labels ``y`` (n,) in float64 (big_vision's cache)."""
    x = np.asarray(x, dtype=np.float64)
    mean, std = x.mean(axis=0, keepdims=True), x.std(axis=0, keepdims=True) + 1e-5
    probe = RidgeProbe(mean, std, np.empty(0), np.empty(0), np.empty(0))
    xd, t = probe.design(x), targets(y, num_classes)
    if xd.shape[0] >= xd.shape[1]:
        probe.eigs, q = np.linalg.eigh(xd.T @ xd)
        probe.rhs, probe.lhs = q.T @ (xd.T @ t), q
    else:
        probe.eigs, q = np.linalg.eigh(xd @ xd.T)
        probe.rhs, probe.lhs = q.T @ t, xd.T @ q
    return probe


def select_l2(probe: RidgeProbe, x_val: np.ndarray, y_val: np.ndarray, grid: Sequence[float] = L2_GRID
              ) -> tuple[float, float]:
    """(λ, validation accuracy): the best λ on the held-out split; ties go to the larger λ. The same arithmetic
    as ``probe.accuracy`` per λ, with the held-out design formed once (it was 60 % of a probe's time)."""
    xd, y = probe.design(x_val), np.asarray(y_val)
    accs = [float(np.mean(np.argmax(xd @ probe.weights(l2), axis=1) == y)) for l2 in grid]
    best = max(range(len(grid)), key=lambda i: (accs[i], grid[i]))
    return float(grid[best]), float(accs[best])


# ---------------------------------------------------------------- splits and features


@dataclass(frozen=True)
class Split:
    train: list[int]
    val: list[int]
    test: list[int]
    classes: int


def few_shot_split(source: ImageSource, shots: int = 10, val_shots: int | None = None, test: int = 500,
                   seed: int = 0) -> Split:
    """Per class ``shots`` training and ``val_shots`` (default = shots) held-out images, then ``test`` others,
    all drawn from a seeded permutation of a labelled source."""
    if not source.has_labels:
        raise VitlabError(f"data source '{source.name}' has no labels: probes need Fashion-MNIST, CIFAR, or a "
                          "folder with one sub-folder per class")
    if shots < 1:
        raise VitlabError(f"--shots must be positive, not {shots}")
    val_shots = shots if val_shots is None else val_shots
    if val_shots < 1:
        raise VitlabError(f"the held-out split needs at least one image per class to choose λ, not {val_shots}")
    order = np.random.default_rng(seed).permutation(len(source))
    need, train, val = len(source.classes), {}, {}
    for i in order:
        c = source.label(int(i))
        if len(train.setdefault(c, [])) < shots:
            train[c].append(int(i))
        elif len(val.setdefault(c, [])) < val_shots:
            val[c].append(int(i))
        elif sum(map(len, val.values())) >= need * val_shots:
            break
    used = {i for part in (train, val) for v in part.values() for i in v}
    rest = [int(i) for i in order if int(i) not in used][:test]
    short = [source.classes[c] for c in range(need) if len(train.get(c, [])) < shots or len(val.get(c, [])) < val_shots]
    if short or len(rest) < 1:
        raise VitlabError(f"data source '{source.name}' has too few images for {shots}+{val_shots} per class and a "
                          f"test split (short: {', '.join(short) or 'test'}); lower --shots or add images")
    return Split(sorted(i for v in train.values() for i in v), sorted(i for v in val.values() for i in v), rest, need)


def draw_split(labels: np.ndarray, shots: int, test: int, seed: int, val_shots: int | None = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Indices into ``labels`` (n,): ``shots`` training and ``val_shots`` (default = shots) held-out images per
    class, then up to ``test`` others, from ``default_rng(seed)``'s permutation: one few-shot draw from a pool of
    extracted features (the draws behind the probes' intervals and the tour's Fig 11)."""
    val_shots = shots if val_shots is None else val_shots
    order = np.random.default_rng(seed).permutation(len(labels))
    train, val, rest = [], [], []
    seen: dict = {}
    for i in order:
        k = seen.get(labels[i], 0)
        seen[labels[i]] = k + 1
        (train if k < shots else val if k < shots + val_shots else rest).append(int(i))
    short = [c for c, k in seen.items() if k < shots + val_shots]
    if short or not rest:
        raise VitlabError(f"the probe pool has too few images for {shots}+{val_shots} per class and a test split: "
                          "raise the number of images or lower the shots")
    return np.array(train), np.array(val), np.array(rest[:test])


def representations(model) -> list[str]:
    """The representations that exist for ``model``'s family."""
    if taps_mod.family(model) in ("resnet", "resnetv2"):
        return ["gap", "token"]
    prefix = taps_mod.num_prefix_tokens(model)
    return (["cls"] if taps_mod.has_cls_token(model) else []) + ["gap"] + (["gap_cls"] if prefix else []) + [
        "first", "token"]


def token_sample(spatial: int, count: int) -> list[int]:
    """``count`` spatial token indices spread evenly over ``spatial`` tokens (all when fewer)."""
    if count >= spatial:
        return list(range(spatial))
    return sorted({int(v) for v in np.rint(np.linspace(0, spatial - 1, count))})


def represent(act, model, rep: str, tokens: int):
    """(B, N, D) or (B, C, h, w) -> (B, D) or, for 'token', (B, K, D)."""
    x = act.flatten(2).transpose(1, 2) if act.dim() == 4 else act
    prefix = taps_mod.num_prefix_tokens(model)
    if rep == "cls" or rep == "first":
        return x[:, 0]
    if rep == "gap":
        return x[:, prefix:].mean(dim=1)
    if rep == "gap_cls":
        return x.mean(dim=1)
    if rep == "token":
        return x[:, [prefix + k for k in token_sample(x.shape[1] - prefix, tokens)]]
    raise VitlabError(f"representation must be one of {', '.join(REPRESENTATIONS)}, not '{rep}'")


@dataclass(frozen=True)
class ProbeFeatures(Statistic):
    """Per-batch features of each layer and representation (float32; small image sets, cached per batch)."""

    layers: tuple[str, ...]
    reps: tuple[str, ...]
    tokens: int = 8  # individual tokens probed per layer (spread over the grid)
    name: str = "probe-features"
    version: int = 1

    def params(self, loaded: LoadedModel) -> dict:
        return {"layers": list(self.layers), "reps": list(self.reps), "tokens": self.tokens}

    def taps(self, loaded: LoadedModel) -> list[str]:
        return list(self.layers)

    def compute(self, acts: dict, loaded: LoadedModel, batch: Batch) -> dict[str, np.ndarray]:
        return {f"{rep}|{tap}": represent(acts[tap], loaded.model, rep, self.tokens).float().cpu().numpy()
                for tap in self.layers for rep in self.reps}


def default_layers(model) -> list[str]:
    """Every block output (ViT/Mixer ``resid_post``; each CNN block)."""
    fam = taps_mod.family(model)
    return [t for t in taps_mod.default_taps(model) if fam not in ("vit", "mixer") or t.endswith(".resid_post")]


# ---------------------------------------------------------------- running


@dataclass
class ProbeResult:
    """Test accuracy of the few-shot probe for every layer and representation of one model."""

    model: str
    rows: list[dict]
    shots: int
    images: dict[str, int]
    warnings: list[str] = field(default_factory=list)

    def to_frame(self):
        """model, layer, layer_index, depth (normalised, (i+1)/L), representation, accuracy (mean over draws),
        accuracy_lo, accuracy_hi (its 95 % interval: t over the draws with the pool's own variance,
        :func:`accuracy_estimate`; NaN below 4 draws), interval_unit, interval_units, interval_method, chance (the test images' most
        common class's share, mean over draws: :func:`majority_rate`), above_chance (:func:`above_chance`: yes, no,
        can't tell; None for one draw), val_accuracy, l2 (means over the draws), shots, tokens (individual tokens
        averaged; 1 otherwise), draws."""
        import pandas as pd

        return pd.DataFrame(self.rows)


@dataclass
class ProbeReport(PerModel):
    results: list[ProbeResult]
    split: Split
    info: RunInfo

    def best(self, by: tuple[str, ...] = ("model",)):
        """The best layer's row per group (default: per model; ``("model", "representation")`` for each curve)."""
        frame = self.to_frame()
        return frame.loc[frame.groupby(list(by))["accuracy"].idxmax()]

    def interval_caption(self) -> str:
        """The error bars' words in the page's one convention (:func:`vitlab.analyses.findings.interval_caption`):
        "bars: 95 % t over 5 few-shot draws with the pool's own variance from a jackknife over 10 groups of its
        images"; "no interval" words below 4 draws or without one."""
        from .findings import interval_caption

        frame = self.to_frame()
        draws = int(frame["draws"].iloc[0]) if len(frame) else 0
        caption = interval_caption("few-shot draws", draws, pool.POOL_T)
        if draws < ev.MIN_UNITS:
            return caption
        if not frame["accuracy_lo"].notna().any():
            return "bars: no interval (--bootstrap 0, or a draw's test images all in one group of the pool)"
        pooled = len(self.split.train) + len(self.split.val) + len(self.split.test)
        return f"{caption} {pool.pool_note(min(pool.POOL_GROUPS, pooled))}"

    def headline(self) -> list[str]:
        lines = [f"{r['model']}: best {r['accuracy']:.3f} at {r['layer']} ({r['representation']})"
                 + (f", above chance: {r['above_chance']}" if isinstance(r.get("above_chance"), str) else "")
                 for _, r in self.best().iterrows()]
        shots = len(self.split.train) // self.split.classes
        frame = self.to_frame()
        chance = f"; chance {frame['chance'].max():.3f} (the most common test class's share)" \
            if "chance" in frame else ""
        return lines + [f"{shots}-shot probes on {len(self.split.test)} test images{chance}"]


REP_WORDS = {"cls": "CLS token", "gap": "mean of tokens (GAP)", "gap_cls": "GAP incl. CLS", "first": "first token",
             "token": "single tokens"}


def majority_rate(y: np.ndarray) -> float:
    """The share of the most common label in ``y``: the best accuracy a guess that ignores the image can reach on
    these test images (always answering that class); 1/classes when the classes are balanced."""
    return float(np.bincount(np.asarray(y)).max() / len(y))


def above_chance(lo: float, hi: float, chance: float) -> str | None:
    """'yes' when the accuracy's whole 95 % interval is above chance, 'no' when it is at or below it, "can't tell"
    when the interval contains it; None without an interval (one draw)."""
    if np.isnan(lo) or np.isnan(hi):
        return None
    return "yes" if lo > chance else "no" if hi <= chance else "can't tell"


def _probe_hits(xs: dict[str, np.ndarray], ys: dict[str, np.ndarray], classes: int
                ) -> tuple[np.ndarray, float, float]:
    """(hits, validation accuracy, λ) of one feature set: hits (n_test,) is 1.0 where the probe classifies a test
    image right (their mean is the test accuracy, as :meth:`RidgeProbe.accuracy`)."""
    probe = fit(xs["train"], ys["train"], classes)
    l2, val = select_l2(probe, xs["val"], ys["val"])
    hits = np.argmax(probe.design(xs["test"]) @ probe.weights(l2), axis=1) == np.asarray(ys["test"])
    return hits.astype(np.float64), val, l2


def _probe_one(xs: dict[str, np.ndarray], ys: dict[str, np.ndarray], classes: int) -> tuple[float, float, float]:
    """(test accuracy, validation accuracy, λ) of one feature set."""
    hits, val, l2 = _probe_hits(xs, ys, classes)
    return float(hits.mean()), val, l2


def _probe_draw(x: np.ndarray, y: np.ndarray, parts: dict[str, np.ndarray], classes: int
                ) -> tuple[np.ndarray, float, float, int]:
    """(hits, validation accuracy, λ, tokens) of one draw ``parts`` (indices into the pool ``x``, ``y``); hits
    (n_test,) per test image (:func:`_probe_hits`; their mean is the draw's test accuracy). 'token' features
    (n, K, D) get one probe per token, and the means over the tokens are reported (per test image for the hits)."""
    ys = {p: y[ix] for p, ix in parts.items()}
    if x.ndim == 2:
        return (*_probe_hits({p: x[ix] for p, ix in parts.items()}, ys, classes), 1)
    per = [_probe_hits({p: x[ix, k] for p, ix in parts.items()}, ys, classes) for k in range(x.shape[1])]
    return (np.mean([r[0] for r in per], axis=0), *(float(np.mean([r[j] for r in per])) for j in (1, 2)), len(per))


def accuracy_estimate(hits: Sequence[np.ndarray], test_groups: Sequence[np.ndarray], groups: int) -> Estimate:
    """The mean test accuracy over D few-shot draws from one pool, with the pool-aware t interval of
    :func:`vitlab.stats.pool.pool_estimate` (as the tour's Fig 11): ``hits[d]`` (n_d,) draw d's per-test-image hits,
    ``test_groups[d]`` (n_d,) their groups of the pool (:func:`vitlab.stats.pool.pool_groups`). An accuracy lies in
    [0, 1] and the mean moves in steps of one test image per draw: an interval narrower is widened to it."""
    accs = np.array([np.mean(h) for h in hits])
    replicates = pool.left_out_means(hits, test_groups, groups)
    return pool.pool_estimate(accs, replicates, (0.0, 1.0), 1.0 / (max(len(h) for h in hits) * len(hits)))


def _draws(labels: dict[str, np.ndarray], split: Split, draws: int, seed: int) -> list[dict[str, np.ndarray]]:
    """Index sets into the pool (train, val, test features concatenated): draw 0 is ``split`` itself; draw d ≥ 1
    re-draws the pool with ``draw_split`` (seed + d), so the features are extracted once."""
    sizes = [len(labels[p]) for p in ("train", "val", "test")]
    edges = np.cumsum([0] + sizes)
    out = [{p: np.arange(edges[i], edges[i + 1]) for i, p in enumerate(("train", "val", "test"))}]
    pool = np.concatenate([labels[p] for p in ("train", "val", "test")])
    shots, val_shots = len(split.train) // split.classes, len(split.val) // split.classes
    for d in range(1, draws):
        out.append(dict(zip(("train", "val", "test"), draw_split(pool, shots, sizes[2], seed + d, val_shots))))
    return out


PART_WORDS = {"train": "training images", "val": "held-out images", "test": "test images"}


def _gather(model: LoadedModel, source: ImageSource, split: Split, stat: ProbeFeatures, batch_size: int, run: Run,
            pass_at: tuple[int, int] = (0, 3)) -> tuple[dict, dict]:
    """Features {split: {key: (n, ...)}} and labels {split: (n,)} (unreadable images are left out).

    Under torchrun each rank computes its ``run.shard`` of the batches; ``run.gather`` (``vitlab.dist``: every
    rank's object, in rank order) collects all ranks' batches, which are put back in batch order. Memory: the kept
    features are each image's pooled vectors (``ProbeFeatures``: (D,) per layer and representation, (K, D) for
    'token'), never a token map; the forward's own activations are freed batch by batch. ``pass_at``: (this model's
    first pass, all passes) for the progress words.
    """
    mine: dict[str, list] = {}
    for p, part in enumerate(("train", "val", "test")):
        words = f"{model.label}, {PART_WORDS[part]}"
        sub = run.with_progress(passes(run.progress, pass_at[0] + p, pass_at[1], words))
        # per-image features: a short last batch is kept (the default drops batches under 4, for unbiased HSIC)
        for batch, found in stream([model], source, getattr(split, part), batch_size, [[stat]], sub, min_batch=1):
            mine.setdefault(part, []).append((batch.index, found[0][stat.name], list(batch.labels)))
    everyone = run.gather_objects(mine)
    pieces = {p: sorted((b for d in everyone for b in d.get(p, [])), key=lambda b: b[0])
              for p in ("train", "val", "test")}
    if not all(pieces.values()):
        raise VitlabError("a split has no readable image: check the data source")
    feats = {p: {k: np.concatenate([b[1][k] for b in bs]) for k in bs[0][1]} for p, bs in pieces.items()}
    return feats, {p: np.array([y for b in bs for y in b[2]]) for p, bs in pieces.items()}


def probe_model(model: LoadedModel, source: ImageSource, split: Split, *, layers: Sequence[str] | None = None,
                reps: Sequence[str] | None = None, tokens: int = 8, batch_size: int = 64, draws: int = 1,
                seed: int = 0, run: Run | None = None, pass_at: tuple[int, int] = (0, 3)) -> ProbeResult:
    """Few-shot probe accuracy of every layer x representation of one model (Figs 11, 13).

    ``draws`` few-shot draws (``split``, then re-draws of its images, seeds ``seed + d``): the accuracy is their
    mean, with its 95 % interval as the tour's Fig 11's (:func:`accuracy_estimate`): a t interval over the draws whose
    variance adds to the draws' spread the pool's own, from a jackknife over groups of the pool's images
    (:func:`vitlab.stats.pool.pool_groups`, seed ``seed``), since the draws share the pool's images and the t over
    the draws alone misses that part (NaN below ``evidence.MIN_UNITS`` draws or with ``run.bootstrap`` 0). ``run.shard``/``run.gather`` (``vitlab.dist``): each rank
    extracts its batches' features; after the gather every rank holds all of them in batch order and fits the same
    probes. ``pass_at``: (this model's first image pass, all passes), for the progress words of several models.
    """
    layers = tuple(layers or default_layers(model.model))
    taps_mod.check_taps(model.model, layers)
    allowed = representations(model.model)
    reps = tuple(reps or allowed)
    bad = [r for r in reps if r not in allowed]
    if bad:
        raise VitlabError(f"{model.label} has no representation {', '.join(bad)}: choose from {', '.join(allowed)}")
    if draws < 1:
        raise VitlabError(f"--draws must be at least 1, not {draws}")
    run = run or Run()
    feats, labels = _gather(model, source, split, ProbeFeatures(layers, reps, tokens), batch_size, run, pass_at)
    parts = _draws(labels, split, draws, seed)
    y = np.concatenate([labels[p] for p in ("train", "val", "test")])
    chance = float(np.mean([majority_rate(y[d["test"]]) for d in parts]))
    groups = min(pool.POOL_GROUPS, len(y))
    test_groups = [pool.pool_groups(len(y), groups, seed)[d["test"]] for d in parts]
    method = f"{pool.POOL_T} {pool.pool_note(groups)}"
    rows = []
    fits = len(layers) * len(reps)
    for i, tap in enumerate(layers):
        for r, rep in enumerate(reps):
            # draws x (tokens) closed-form fits per layer and representation: the run stops between them when asked
            run.step(i * len(reps) + r, fits, f"{model.label}: probe fits, {tap} {rep} ({i * len(reps) + r + 1} of "
                     f"{fits}, {draws} draw{'s' if draws > 1 else ''} each)")
            x = np.concatenate([feats[p][f"{rep}|{tap}"] for p in ("train", "val", "test")])
            per = [_probe_draw(x, y, d, split.classes) for d in parts]  # draws x (hits, val, λ, tokens)
            hits = [p[0] for p in per]
            acc = accuracy_estimate(hits, test_groups, groups) if draws > 1 and run.bootstrap else None
            lo, hi = (acc.lo, acc.hi) if acc else (np.nan, np.nan)
            unit = ev.interval_columns("draws", draws, method if acc else "no interval (one draw or --bootstrap 0)")
            rows.append({"model": model.label, "layer": tap, "layer_index": i, "depth": (i + 1) / len(layers),
                         "representation": rep, "accuracy": float(np.mean([h.mean() for h in hits])),
                         "accuracy_lo": lo, "accuracy_hi": hi, "chance": chance,
                         "above_chance": above_chance(lo, hi, chance),
                         "val_accuracy": float(np.mean([p[1] for p in per])), "l2": float(np.mean([p[2] for p in per])),
                         "shots": len(split.train) // split.classes, "tokens": per[0][3], "draws": draws,
                         **unit})
    return ProbeResult(model.label, rows, len(split.train) // split.classes,
                       {p: len(v) for p, v in labels.items()})


@dataclass(frozen=True)
class ProbeOptions:
    """Options of the few-shot linear probes (``vitlab probe``)."""

    shots: int = option(10, "training images per class")
    val_shots: int | None = option(None, "held-out images per class for choosing λ (default: --shots)")
    test: int = option(500, "test images")
    seed: int = option(0, "seed of the split")
    layers: tuple[str, ...] | None = option(None, "comma-separated taps (default: every block output)", kind="strs")
    reps: tuple[str, ...] | None = option(None, "comma-separated representations: cls, gap, gap_cls, first, token "
                                          "(default: all that the model has)", kind="strs")
    tokens: int = option(8, "individual tokens probed per layer for 'token'")
    draws: int = option(5, "few-shot draws of the split's images (seeds seed, seed+1, ...): the accuracy is their "
                        "mean with a 95 % t interval over the draws plus the pool's own variance (4 or more draws); "
                        "1: no interval")
    batch_size: int = option(64, "images per batch", short="-b")


def probes(models: Sequence[LoadedModel], source: ImageSource, opts: ProbeOptions = ProbeOptions(),
           run: Run | None = None) -> ProbeReport:
    """Few-shot linear probes of every model on one labelled source (the same split for every model).

    ``opts.reps`` given explicitly are used where a model has them (e.g. 'cls' is left out for a GAP model).
    """
    if not models:
        raise VitlabError("give at least one model")
    run = run or Run()
    split = few_shot_split(source, opts.shots, opts.val_shots, opts.test, opts.seed)
    reps = opts.reps
    mine = []
    for m in models:
        mine.append([r for r in reps if r in representations(m.model)] if reps else None)
        if reps and not mine[-1]:
            raise VitlabError(f"{m.label} has none of the representations {', '.join(reps)}")
    # the cheapest model first (its forward multiply-accumulates: ResNet-50 before ViT-B/16, 4.1 G against 16.8 G),
    # so that the first answer comes soonest; the report keeps the models' order (issue 51)
    order = sorted(range(len(models)), key=lambda i: models[i].forward_macs) if len(models) > 1 else [0]
    done: dict[int, ProbeResult] = {}
    for i in order:
        done[i] = probe_model(models[i], source, split, layers=opts.layers, reps=mine[i], tokens=opts.tokens,
                              batch_size=opts.batch_size, draws=opts.draws, seed=opts.seed, run=run,
                              pass_at=(3 * len(done), 3 * len(models)))
        # a first answer: the models probed so far, while the next one runs (the app draws it)
        run.estimate(lambda: ProbeReport([done[j] for j in sorted(done)], split, run.info), len(done), len(models))
    return ProbeReport([done[i] for i in range(len(models))], split, run.info)
