"""A lecture prepared ahead of class (issue 41): the whole tour, its figures drawn as SVG, kept in the disk cache.

``vitlab lecture --prepare`` runs the tour once at the lecture's settings (:class:`LectureSettings`) and keeps the
:class:`Lecture` (the :class:`~vitlab.tour.TourReport`, every figure as inline SVG, provenance) as one saved result
(:mod:`vitlab.tour.saved`), and its settings in a small index of prepared lectures. The app's Lecture page reads only
these two entries to teach: in class it never loads a model or runs a check. When nothing is prepared, the lecturer
prepares one on the page (the same :func:`prepare` and :func:`keep`), unless the server only reads
(:func:`cannot_prepare`).

    models, source ─run_tour─► TourReport ─chart_svg─► Lecture ─keep─► Store   (once, ahead of class)
    Store ─prepared─► [LectureEntry] ─read─► Lecture ─► the page, the summary   (in class: reads only)

Keys hold the settings, the zoo's checkpoint files and any weights file the specs name, and vitlab's own source
(:func:`vitlab.tour.saved.result_key`): a changed analysis, model or checkpoint is a missing lecture, never a stale
one.
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from ..errors import VitlabError
from ..inputs.cache import Store, default_dir
from . import glossary, saved
from .checks import TOUR_BOOTSTRAP, TOUR_SEED, TourOptions, TourReport

if TYPE_CHECKING:
    from ..engine.context import Run
    from ..inputs.data import ImageSource
    from ..inputs.models import LoadedModel

DEFAULT_MODELS = ("zoo:vit-cls", "zoo:resnet")
DEFAULT_DATA = "fashion-mnist:test"
INDEX_SIZE = 20  # prepared lectures listed on the page, newest first


@dataclass(frozen=True)
class LectureSettings:
    """What a lecture is prepared with: the tour's models and data, its options and its resampling."""

    models: tuple[str, ...] = DEFAULT_MODELS
    data: str = DEFAULT_DATA
    tour: TourOptions = field(default_factory=TourOptions)
    bootstrap: int = TOUR_BOOTSTRAP
    seed: int = TOUR_SEED

    def key(self) -> str:
        """The saved result's key (:func:`vitlab.tour.saved.result_key`)."""
        return saved.result_key("lecture", saved.plain(self), saved.files_key(self))

    def command(self, cache_dir: str | None = None) -> str:
        """The command that prepares this lecture (``cache_dir``: the cache it must go to, when not the default)."""
        words = ["vitlab", "lecture", "--prepare"]
        for m in self.models:
            words += ["-m", m]
        if self.data != DEFAULT_DATA:
            words += ["--data", self.data]
        defaults = TourOptions()
        for f in fields(TourOptions):
            value = getattr(self.tour, f.name)
            if f.name in ("images", "batch_size") or value != getattr(defaults, f.name):
                flag = f.metadata.get("flag") or "--" + f.name.replace("_", "-")
                if isinstance(value, bool):
                    words += [flag] if value else []
                elif value is not None:
                    words += [flag, ",".join(map(str, value)) if isinstance(value, tuple) else str(value)]
        if self.bootstrap != TOUR_BOOTSTRAP:
            words += ["--bootstrap", str(self.bootstrap)]
        if self.seed != TOUR_SEED:
            words += ["--seed", str(self.seed)]
        if cache_dir is not None and str(cache_dir) != str(default_dir()):
            words += ["--cache-dir", str(cache_dir)]
        return shlex.join(words)

    def describe(self) -> str:
        """In words: "zoo:vit-cls and zoo:resnet, Fashion-MNIST test set, first 64 images in batches of 16"."""
        from .report import images_in_words

        order = "first N" if self.tour.shuffle is None else f"shuffled, seed {self.tour.shuffle}"
        data = images_in_words(self.data, self.tour.images or 0, order)
        if self.tour.images is None:
            data = data.rsplit(", ", 1)[0] + ", every image"
        return f"{' and '.join(self.models)}, {data}, in batches of {self.tour.batch_size}"


def settings(models: tuple[str, ...] | list[str] | None = None, data: str = DEFAULT_DATA,
             tour: TourOptions | None = None, bootstrap: int = TOUR_BOOTSTRAP,
             seed: int = TOUR_SEED) -> LectureSettings:
    """:class:`LectureSettings` with a chosen subset of claims (``tour.only``) in the paper's order: the path of a
    lecture follows the paper, whatever order the claims were named in."""
    from .lecture import path

    tour = tour or TourOptions()
    if tour.only:
        tour = replace(tour, only=tuple(path(tour.only)))
    return LectureSettings(tuple(models or DEFAULT_MODELS), data, tour, int(bootstrap), int(seed))


@dataclass
class Lecture:
    """A prepared lecture: the tour on its settings, each figure as an inline SVG (``papers``: the paper-style
    figure, ``intervals``: the interval chart, by the tour row's figure), the run's provenance, when it was made."""

    settings: LectureSettings
    tour: TourReport
    papers: dict[str, str]
    intervals: dict[str, str]
    provenance: dict
    made: str
    seconds: float

    def to_frame(self):
        """The tour's table (``tour.csv``)."""
        return self.tour.to_frame()

    @property
    def steps(self) -> list[str]:
        """The lecture's path: claim keys in the paper's order (the tour keeps its rows in that order)."""
        from .lecture import key_of

        return [key_of(r.figure) for r in self.tour.rows]

    def row(self, key: str):
        """The tour's Check of claim ``key``."""
        return self.tour.rows[self.steps.index(key)]

    def headline(self) -> list[str]:
        return [f"lecture: {self.settings.describe()}; prepared {self.made} in {self.seconds:.0f} s"] + \
            self.tour.headline()


@dataclass(frozen=True)
class LectureEntry:
    """One prepared lecture in the index: its settings and when it was made."""

    settings: LectureSettings
    made: str


@dataclass
class LectureIndex:
    entries: list[LectureEntry]


def _index_key() -> str:
    return saved.result_key("lecture-index")


def prepare(models: list[LoadedModel], source: ImageSource, settings: LectureSettings, run: Run) -> Lecture:
    """Run the tour on ``models`` and ``source`` at ``settings`` and draw every figure as SVG (vl-convert), so that
    the page and the summary only read."""
    from . import run_tour
    from .report import chart_svg, provenance

    t0 = time.perf_counter()
    run = replace(run, bootstrap=settings.bootstrap, seed=settings.seed)
    tour = run_tour(models, source, settings.tour, run)
    # a student reads the figures: every model in them named in words (the lecturer's detail keeps the specs), blocks
    # counted from 1 as the lecture's words count them, no text cut short
    specs = {r.figure: [*settings.models, *(m.strip() for m in r.models.split(";") if m.strip())] for r in tour.rows}
    papers = {f: chart_svg(glossary.figure_in_words(c.to_dict(), specs.get(f, settings.models)))
              for f, c in tour.paper_charts.items()}
    intervals = {r.figure: chart_svg(glossary.figure_in_words(tour.charts[r.figure].to_dict(), specs[r.figure]))
                 for r in tour.rows if len(tour.frames.get(r.figure, ()))}
    seconds = time.perf_counter() - t0
    made = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return Lecture(settings, tour, papers, intervals, provenance(models, source, settings.tour, seconds, run), made,
                   round(seconds, 1))


def writable(store: Store) -> None:
    """A VitlabError when ``store`` cannot keep a lecture (off, read-only): a lecture not kept cannot be shown."""
    if store is None or not store.enabled or store.mode != "rw":
        where = getattr(store, "directory", None)
        raise VitlabError(f"the lecture cannot be kept: the disk cache{f' in {where}' if where else ''} is "
                          f"{'read-only' if store is not None and store.mode == 'ro' else 'off'}; prepare it with a "
                          f"cache the app reads and can write (--cache-dir DIR, or VITLAB_CACHE_DIR)")


PREPARE_ENV = "VITLAB_LECTURE_PREPARE"  # 0: the app's Lecture page never prepares (a class server: students read)


def cannot_prepare(store: Store) -> str | None:
    """Why the app may not prepare a lecture on this server, in words (None when it may): ``VITLAB_LECTURE_PREPARE=0``
    (a server a class reads from), or a disk cache it cannot keep a lecture in (:func:`writable`)."""
    import os

    if os.environ.get(PREPARE_ENV, "").strip() == "0":
        return f"this server only reads lectures ({PREPARE_ENV}=0)"
    try:
        writable(store)
    except VitlabError as e:
        return str(e)
    return None


def keep(store: Store, lecture: Lecture) -> None:
    """Save ``lecture`` and list it first in the index (:func:`writable` first)."""
    writable(store)
    place_secret(store)  # kept beside the lecture, so that a server that only reads it signs places alike
    if not saved.save(store, lecture.settings.key(), lecture):
        raise VitlabError("the lecture could not be saved as data (vitlab.tour.saved): please report this")
    entries = [e for e in prepared(store) if e.settings != lecture.settings]
    saved.save(store, _index_key(), LectureIndex([LectureEntry(lecture.settings, lecture.made)] + entries
                                                 [:INDEX_SIZE - 1]))


_SECRET_KEY = ("lecture-place-secret", 1)


def place_secret(store: Store | None) -> bytes:
    """The key this lab signs a student's place in a lecture with (:func:`vitlab.tour.lecture.place_query`), kept in
    ``store`` so that a server restarted on the same cache still takes the places it wrote before (a class whose
    server restarts mid-lecture keeps its steps). Read as untrusted input: anything but 64 hex digits is replaced by
    a fresh key. Where ``store`` is off, read-only without a key, or cannot write, the key is fresh for this process
    (a restart then starts every student at step 1, as the place's refusal says)."""
    import secrets

    from ..inputs.cache import make_key

    key = make_key(*_SECRET_KEY)
    usable = store is not None and store.enabled and store.mode != "off"
    found = store.get_json(key) if usable else None
    if isinstance(found, str) and len(found) == 64 and all(c in "0123456789abcdef" for c in found):
        return bytes.fromhex(found)
    fresh = secrets.token_bytes(32)
    if usable and store.mode == "rw":
        store.put_json(key, fresh.hex())
    return fresh


def prepared(store: Store) -> list[LectureEntry]:
    """The prepared lectures listed in ``store``, newest first (empty when none, or the index cannot be read)."""
    index = saved.load(store, _index_key())
    return list(index.entries) if isinstance(index, LectureIndex) else []


class BadLecture(VitlabError):
    """A prepared lecture in the cache that failed its check (a planted figure, an unknown verdict): a miss, said
    with what was wrong and the command that prepares it again."""


def checked(lecture: Lecture) -> Lecture:
    """``lecture`` as read back, checked as untrusted input (issue 46), with every figure written out again as plain
    SVG (:func:`vitlab.tour.plainsvg.plain_svg`); :class:`~vitlab.inputs.cache.BadEntry` naming the first thing
    wrong. Its steps are claims of :data:`~vitlab.tour.CLAIMS` in the paper's order, each once, with the paper's
    own title and words; its answers are words of their closed sets (:data:`~vitlab.stats.evidence.VERDICTS`,
    :data:`~vitlab.tour.checks.words.LEARNED`); its figures belong to its steps and are plain SVG."""
    from ..inputs.cache import BadEntry
    from ..stats.evidence import VERDICTS
    from .checks import CLAIMS, LEARNED
    from .plainsvg import BadFigure, plain_svg

    keys = {c.figure: k for k, c in CLAIMS.items()}
    order = [keys.get(r.figure) for r in lecture.tour.rows]
    for row, key in zip(lecture.tour.rows, order):
        if key is None:
            raise BadEntry(f"a step of the figure '{row.figure[:40]}', which no claim has")
        if (row.title, row.claim) != (CLAIMS[key].title, CLAIMS[key].claim):
            raise BadEntry(f"{row.figure}'s title or claim is not the paper's")
        if row.pattern not in VERDICTS:
            raise BadEntry(f"{row.figure}'s pattern answer '{row.pattern[:40]}' is not one of {', '.join(VERDICTS)}")
        if row.learned not in LEARNED:
            raise BadEntry(f"{row.figure}'s learned answer '{row.learned[:40]}' is not one of {', '.join(LEARNED)}")
    if order != [k for k in CLAIMS if k in order] or len(set(order)) != len(order):
        raise BadEntry("its steps are not the paper's claims in the paper's order, each once")
    figures = {r.figure for r in lecture.tour.rows}
    clean: dict[str, dict[str, str]] = {"papers": {}, "intervals": {}}
    for part, kept in (("papers", lecture.papers), ("intervals", lecture.intervals)):
        for figure, svg in kept.items():
            if figure not in figures:
                raise BadEntry(f"a figure for '{str(figure)[:40]}', which is none of its steps")
            try:
                clean[part][figure] = plain_svg(svg)
            except BadFigure as e:
                kind = "paper-style figure" if part == "papers" else "interval chart"
                raise BadEntry(f"the {kind} of {figure} {e}") from None
    return replace(lecture, **clean)


def read(store: Store, settings: LectureSettings) -> Lecture | None:
    """The lecture prepared at ``settings``, checked (:func:`checked`), or None (never prepared, evicted, or
    prepared by another vitlab). An entry that fails a check is dropped and said once in the store's warnings, and
    :class:`BadLecture` says what was wrong (the page and the command show it in words; the next read is a plain
    miss)."""
    bad = store.bad_reads if store is not None and store.enabled else 0
    lecture = saved.load(store, settings.key())
    if store is not None and store.enabled and store.bad_reads > bad:
        raise BadLecture(failed(settings, store, "edited or damaged: its saved data did not match its checksum or "
                                                 "its types"))
    if not (isinstance(lecture, Lecture) and lecture.settings == settings):
        return None
    try:
        return checked(lecture)
    except ValueError as e:  # BadEntry, and anything malformed in the words it checks
        store.bad_entry("saved results", e, "a:" + settings.key())
        raise BadLecture(failed(settings, store, str(e))) from None


def failed(settings: LectureSettings, store: Store, why: str) -> str:
    """The lecture at ``settings`` in ``store`` failed its check for ``why``, and the command to prepare it again."""
    return (f"the prepared lecture in the cache {store.directory} failed its check ({why}): it is not shown; "
            f"prepare it again with `{settings.command(str(store.directory))}`")


def missing(settings: LectureSettings, store: Store) -> str:
    """What to run when the lecture at ``settings`` is not in ``store``, in words."""
    return (f"No prepared lecture for {settings.describe()} in the cache {store.directory}: prepare it ahead of "
            f"class with `{settings.command(str(store.directory))}` (it runs the whole tour once; the page then only "
            "reads it).")
