"""What every tour measurement shares: the models of a tour, its image sets, streams and the jackknife helpers."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

import vitlab.tour.checks as T  # vitlab.tour.checks, not vitlab.tour: vitlab.tour imports this one

from ...engine.context import Run
from ...engine.run import GramStatistic, Statistic, stream
from ...errors import VitlabError
from ...inputs import taps as taps_mod
from ...inputs.data import ImageSource, select
from ...inputs.models import LoadedModel, load, twin_spec
from ...stats import cka as cka_mod
from ...stats import evidence as ev
from ...stats.evidence import Estimate


def _stream(models, source, indices, batch_size, statistics, run: Run, min_batch: int = 4):
    """``run.stream`` with this run's store and info; its batches reported under the check's words (``run_tour``
    gives each check a progress that names it), prefixed with the models it runs."""
    progress = run.progress
    if progress is not None:
        names = ", ".join(m.label for m in models)
        progress = (lambda p: lambda done, total, text: p(done, total, f"{names}: {text}"))(progress)
    return stream(models, source, indices, batch_size, statistics, run.with_progress(progress), min_batch=min_batch)


class Models:
    """The models of one tour: those given, their untrained twins and the zoo models some checks name."""

    def __init__(self, given: list[LoadedModel], control: str):
        if control not in ("random", "none"):
            raise VitlabError(f"--control must be 'random' or 'none', not '{control}'")
        self.given, self.control = list(given), control
        self.by_label = {m.label: m for m in given}
        self.device = given[0].device if given else "cpu"
        fam = {m.label: taps_mod.family(m.model) for m in given}
        self._vit = next((m for m in given if fam[m.label] == "vit" and taps_mod.has_cls_token(m.model)), None)
        self._cnn = next((m for m in given if fam[m.label] in ("resnet", "resnetv2")), None)
        self.used: dict[str, None] = {}  # labels of the models the current check reached for (Check.models)

    def _use(self, m: LoadedModel | None) -> LoadedModel | None:
        if m is not None:
            self.used[m.label] = None
        return m

    @property
    def vit(self) -> LoadedModel | None:
        return self._use(self._vit)

    @property
    def cnn(self) -> LoadedModel | None:
        return self._use(self._cnn)

    def get(self, spec: str) -> LoadedModel:
        if spec not in self.by_label:
            self.by_label[spec] = load(spec, self.device)
        return self._use(self.by_label[spec])

    def twin(self, m: LoadedModel) -> LoadedModel | None:
        """``m``'s untrained twin (None with ``--control none``); an untrained ``m`` is its own twin, and the tour
        says its learned answer does not apply (:meth:`untrained_note`)."""
        return None if self.control == "none" else self.get(twin_spec(m.spec).label)

    @staticmethod
    def untrained(m: LoadedModel) -> bool:
        """Whether ``m`` is an untrained model (random weights, ``NAME@random``): its own untrained twin."""
        return twin_spec(m.spec).label == m.label

    def untrained_note(self, used: list[str]) -> str:
        """"n.a.: ..." when a model among ``used`` (labels) is untrained itself, so a learned answer has nothing
        to compare; "" otherwise."""
        mine = [m.label for m in self.given if m.label in used and self.untrained(m)]
        if not mine:
            return ""
        if len(mine) == 1:
            return f"n.a.: {mine[0]} is untrained itself: its untrained twin is the same model, nothing to compare"
        return (f"n.a.: {' and '.join(mine)} are untrained themselves: their untrained twins are the same models, "
                "nothing to compare")

    def need(self, *what: str) -> None:
        if "vit" in what and self._vit is None:
            raise VitlabError("this check needs a ViT with a CLS token among the models, e.g. zoo:vit-cls")
        if "cnn" in what and self._cnn is None:
            raise VitlabError("this check needs a ResNet among the models, e.g. zoo:resnet")


def _indices(source: ImageSource, opts: T.TourOptions):
    return select(source, opts.images, opts.shuffle)


RF_BATCH = 8  # images per backward pass of the receptive fields


def _probe_pool(source: ImageSource, opts: T.TourOptions):
    """The images Fig 11's few-shot draws are taken from: enough for the test images and 30 shots per class."""
    return select(source, None if opts.images is None else max(opts.images, opts.probe_test + 30 * opts.probe_shots),
                  None)


@dataclass(frozen=True)
class Need:
    """One per-batch statistic a check streams: of ``model`` over an image set (:data:`IMAGE_SETS`), in batches that
    keep at least ``min_batch`` readable images. ``vitlab.tour.plan`` gathers the needs of every check on one model
    and image set into one pass; the check then streams the same statistic and finds it under its own cache key."""

    model: LoadedModel
    images: str
    statistic: Statistic
    min_batch: int = 4


IMAGE_SETS = {"tour": "the tour's images", "probes": "the probe pool"}


def image_set(name: str, source: ImageSource, opts: T.TourOptions) -> tuple[list[int], int]:
    """(indices, batch size) of one of :data:`IMAGE_SETS`."""
    return list(_indices(source, opts) if name == "tour" else _probe_pool(source, opts)), opts.batch_size


def _needs(models: list[LoadedModel], statistic, images: str = "tour", min_batch: int = 4) -> list[Need]:
    """``statistic(model)`` of each model over ``images``."""
    return [Need(m, images, statistic(m), min_batch) for m in models]


def pair_and_twins(ms: Models) -> list[LoadedModel]:
    """The tour's ViT and CNN, then their untrained twins (with ``--control random``)."""
    return [ms.vit, ms.cnn] + ([ms.twin(ms.vit), ms.twin(ms.cnn)] if ms.control == "random" else [])


def data_used(key: str, source: ImageSource, opts: T.TourOptions) -> tuple[int, int, str]:
    """(images, batch size, note) that check ``key`` reads: the tour's images, except Fig 6 (its first
    ``rf_images``, a backward pass each, in batches of 8) and Fig 11 (the probe pool of its few-shot draws)."""
    if key == "receptive":
        n = len(select(source, opts.rf_images, None))
        return n, RF_BATCH, "the first images: a backward pass each"
    if key == "probes":
        return (len(_probe_pool(source, opts)), opts.batch_size,
                f"the probe pool: {opts.probe_draws} few-shot draws of {opts.probe_shots} shots per class and "
                f"{opts.probe_test} test images")
    return len(_indices(source, opts)), opts.batch_size, ""


def _self_cka(models: list[LoadedModel], source, opts, run: Run) -> list[ev.BootstrapCKA]:
    """Self-CKA accumulators (default taps) of each model over the same batches."""
    stats = [GramStatistic() for _ in models]  # as similarity._gram: the planned pass's entries
    accs = [ev.BootstrapCKA(s.taps(m), s.taps(m)) for m, s in zip(models, stats)]
    for batch, found in _stream(models, source, _indices(source, opts), opts.batch_size, [[s] for s in stats], run):
        for acc, f in zip(accs, found):
            acc.update(cka_mod.centred(f["gram"]["grams"]), key=batch.index)
    return run.reduce_accumulators(accs)


def _jk(acc: ev.BootstrapCKA) -> np.ndarray:
    """Leave-one-batch-out indices of an accumulator's batches (below 4 batches the intervals say "too few")."""
    if not acc.terms_xy:  # every batch had fewer than 4 readable images (one image: one batch of 1)
        raise VitlabError(f"no batch of {cka_mod.MIN_UNBIASED_BATCH} or more readable images: CKA's unbiased "
                          f"estimator needs at least {cka_mod.MIN_UNBIASED_BATCH} images in a batch")
    return ev.jackknife_indices(len(acc.terms_xy))


def _point(acc: ev.BootstrapCKA) -> np.ndarray:
    return ev.ratio(acc.xy, acc.xx, acc.yy)


def _jack(value, loo, unit: str = "batches", bounds=None, resolution: float = 0.0,
          bias_corrected: bool = False) -> Estimate:
    """Jackknife-t estimate; ``bounds``: the statistic's range (CKA [0, 1], differences of CKA [-1, 1], ...), the
    interval formed on its logit scale so that it never leaves it (``evidence.bounded_jackknife``);
    ``bias_corrected``: Tukey's interval, centred on the mean of the pseudo-values (``evidence.tukey_estimate``)."""
    return Estimate.jackknife(float(value), np.asarray(loo), unit, bounds=bounds, resolution=resolution,
                              bias_corrected=bias_corrected)


CKA_RANGE, CKA_DIFF = (0.0, 1.0), (-1.0, 1.0)  # a CKA mean, a difference of two


def _vit_minus_cnn(est, loo: int, rows: tuple, detail: str, bounds=None, resolution: float = 0.0):
    """The learned answer's inputs when ``est`` holds (ViT, CNN[, their twins]) estimates: ViT − CNN, the twins' ViT −
    CNN (jackknife over the same units; ``loo`` indexes each entry's leave-one-out values), the detail with them, and
    the rows for the chart."""
    effect = _jack(est[0][0].value - est[1][0].value, est[0][loo] - est[1][loo], bounds=bounds,
                   resolution=resolution)
    twin = _jack(est[2][0].value - est[3][0].value, est[2][loo] - est[3][loo], bounds=bounds,
                 resolution=resolution) if len(est) > 2 else None
    if twin is None:
        return effect, None, detail, _rows(*rows)
    return effect, twin, f"{detail}; ViT − CNN {effect.text('.2f')}, untrained twins {twin.text('.2f')}", _rows(
        *rows, ("ViT − CNN", "effect", effect), ("untrained twins: ViT − CNN", "twin", twin))


def _rows(*items: tuple[str, str, Estimate]) -> list[dict]:
    return [{"label": label, "role": role, "value": e.value, "lo": e.lo, "hi": e.hi, "unit": e.unit,
             "units": e.units, "interval": e.basis} for label, role, e in items]


def _cka_frame(m: LoadedModel, acc: ev.BootstrapCKA) -> pd.DataFrame:
    """A self-CKA map as ``CKAResult.to_frame`` columns (model_a, layer_a, model_b, layer_b, cka)."""
    c = _point(acc)
    la, lb = acc.layers_a, acc.layers_b
    return pd.DataFrame({"model_a": m.label, "model_b": m.label, "layer_a": np.repeat(la, len(lb)),
                         "layer_b": np.tile(lb, len(la)), "cka": c.ravel()})


def _zoo_control_note(ms: Models, controls: list[LoadedModel]) -> str:
    """Says plainly when a check's controls are not the tour's own ViT (e.g. model A zoo:vit-cls-14 while Figs 8
    and 12 need a retrained zoo model that exists only with 16 tokens)."""
    vit = ms._vit
    if vit is None or vit.label in {m.label for m in controls}:
        return ""
    names = ", ".join(m.label for m in controls)
    return f" These are the 16-token zoo controls {names}, not the tour's ViT {vit.label}: the zoo retrains only them."
