"""Whole results kept in the disk cache (issue 34): a tour, a CKA report, a page's result, saved once and read back in
any later session or server, so that a warm visit costs a read instead of a re-run of the analysis (probe fits,
receptive-field gradients, jackknife and bootstrap intervals).

A result is saved *as data*, never pickled: :func:`encode` walks it into a JSON tree and a dict of numpy arrays,
stored together as one ``.npz`` entry of :class:`vitlab.Store` (read with ``allow_pickle=False``). What it can walk:

- None, bool, int, float (NaN and ±inf too), str; numpy scalars and arrays of plain dtypes (bit-exact in the npz);
- list, tuple, dict (any keys it can walk);
- pandas DataFrame, Series and Index: numeric, bool, datetime, string, categorical and object columns of the above,
  a RangeIndex or a plain index;
- any ``vitlab`` dataclass, field by field (``dataclasses.fields``), so fields added to a result later flow through
  without this module changing; on reading, the class must be a dataclass of a ``vitlab`` module (nothing else is
  ever imported or built);
- fields that are drawn from data rather than data themselves (the tour's Altair charts) are left out and rebuilt
  on reading (:data:`DERIVED`), exactly as :func:`vitlab.tour.run_tour` draws them.

Anything else (a torch tensor, a loaded model, an accumulator object, an Altair chart elsewhere) raises
:class:`Unsaveable`: such a result is simply not kept on disk (the app still memoises it per session).

A saved result is untrusted input when it is read back (anyone who can write the cache folder can plant one), so
:func:`load` returns it only when it is exactly what :func:`save` wrote and what its reader expects:

- its SHA-256 over the canonical payload (every array's name, dtype, shape and bytes, the tree among them) matches
  the one stored beside it (:data:`CHECKSUM`): an edited number is a miss, not an answer; an entry without one (an
  older vitlab) is a miss;
- every field of every vitlab dataclass in it has the type its annotation declares (a string where a float array
  belongs, a list where a frame belongs: a miss), arrays are plain numeric dtypes, and the result draws its own
  table (``to_frame()``) without an error (arrays of another shape than their labels);
- its top-level type is the one the caller expects (``expect``), when the caller says.

A miss is dropped, said once (``Store.bad_entry``) and recomputed; it never reaches a page or a run.

Keys (:func:`result_key`) hold the store's format and library versions (:func:`vitlab.inputs.cache.make_key`),
this module's :data:`FORMAT`, a fingerprint of vitlab's own source (a changed analysis never reuses an old result),
and the caller's parts: model fingerprints, the data's key or listing, the options.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import hmac
import importlib
import json
import math
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..inputs.cache import BadEntry, Store, make_key
from .conform import PLAIN_KINDS, check_result, conforms, field_types, kind_of, type_name

FORMAT = 2  # bump when the encoding below changes meaning (2: a checksum of the content beside it)
TREE = "__tree__"  # the npz member holding the JSON tree (utf-8 bytes as uint8)
CHECKSUM = "__sha256__"  # the npz member holding the SHA-256 (hex, ascii as uint8) of every other member


class Unsaveable(TypeError):
    """A value this module does not save (the result stays in memory only)."""


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """SHA-256 of vitlab's own ``.py`` files (names and contents): any change to the package is a new key."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    # the app and the assets a wheel carries inside the package (vitlab._app, vitlab._assets) are not the engine's code:
    # left out, an installed vitlab and an editable checkout of the same code make the same keys
    for p in sorted(p for p in root.rglob("*.py") if p.relative_to(root).parts[0] not in ("_app", "_assets")):
        h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:20]


def result_key(*parts: object) -> str:
    """The cache key of a whole result from ``parts`` (fingerprints, data key, options, ...)."""
    return make_key("result", FORMAT, code_fingerprint(), *parts)


# ------------------------------------------------------------------------------------------ encode


class _Encoder:
    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}

    def array(self, a: np.ndarray) -> dict:
        if a.dtype.kind not in PLAIN_KINDS:
            raise Unsaveable(f"numpy array of dtype {a.dtype}")
        name = f"a{len(self.arrays)}"
        self.arrays[name] = a
        return {"$": "nd", "k": name}

    def __call__(self, v: Any) -> Any:  # noqa: C901 - one branch per kind of value, read top to bottom
        import pandas as pd

        if v is None or isinstance(v, (bool, str)):
            return v
        if isinstance(v, np.generic):
            return {"$": "np", "v": self.array(np.asarray(v))}
        if isinstance(v, int):
            return v
        if isinstance(v, float):
            return v if math.isfinite(v) else {"$": "f", "v": repr(v)}
        if isinstance(v, np.ndarray):
            return self.array(v)
        if isinstance(v, list):
            return [self(x) for x in v]
        if isinstance(v, tuple):
            return {"$": "tuple", "v": [self(x) for x in v]}
        if isinstance(v, dict):
            return {"$": "dict", "k": [self(k) for k in v], "v": [self(x) for x in v.values()]}
        if isinstance(v, pd.DataFrame):
            return self.frame(v)
        if isinstance(v, pd.Series):
            return {"$": "series", "v": self.column(v), "index": self.index(v.index), "name": self(v.name)}
        if isinstance(v, pd.Index):
            return self.index(v)
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            return self.dataclass(v)
        raise Unsaveable(f"a {type(v).__module__}.{type(v).__qualname__}")

    def dataclass(self, v: Any) -> dict:
        cls = type(v)
        path = f"{cls.__module__}:{cls.__qualname__}"
        if not cls.__module__.startswith("vitlab.") or "<" in cls.__qualname__:
            raise Unsaveable(f"dataclass {path} (only vitlab's own are saved)")
        skip = DERIVED.get(path, ((), None))[0]
        fields = {f.name: self(getattr(v, f.name)) for f in dataclasses.fields(v) if f.name not in skip}
        return {"$": "dc", "cls": path, "f": fields}

    def column(self, s) -> dict:
        import pandas as pd

        dtype = s.dtype
        if isinstance(dtype, pd.CategoricalDtype):
            return {"kind": "cat", "codes": self.array(np.asarray(s.cat.codes)),
                    "cats": self.index(dtype.categories), "ordered": bool(dtype.ordered)}
        if isinstance(dtype, pd.StringDtype):
            values = [None if x is None or x is pd.NA or (isinstance(x, float) and x != x) else str(x)
                      for x in s.tolist()]
            return {"kind": "str", "storage": dtype.storage, "na": "NA" if dtype.na_value is pd.NA else "nan",
                    "v": values}
        if isinstance(dtype, np.dtype) and dtype.kind in PLAIN_KINDS:
            return {"kind": "nd", "v": self.array(s.to_numpy())}
        if isinstance(dtype, np.dtype) and dtype.kind == "O":
            return {"kind": "obj", "v": [self(x) for x in s.tolist()]}
        raise Unsaveable(f"a pandas column of dtype {dtype}")

    def index(self, ix) -> dict:
        import pandas as pd

        if isinstance(ix, pd.MultiIndex):
            raise Unsaveable("a pandas MultiIndex")
        if isinstance(ix, pd.RangeIndex):
            return {"$": "range", "v": [ix.start, ix.stop, ix.step], "name": self(ix.name)}
        return {"$": "index", "v": self.column(ix.to_series(index=range(len(ix)))), "name": self(ix.name)}

    def frame(self, df) -> dict:
        if df.attrs:
            raise Unsaveable("a DataFrame with attrs")
        return {"$": "df", "columns": self.index(df.columns), "index": self.index(df.index),
                "v": [self.column(df.iloc[:, i]) for i in range(df.shape[1])]}


def encode(value: Any) -> dict[str, np.ndarray]:
    """``value`` as npz members (its arrays, the JSON tree and their checksum); :class:`Unsaveable` when it holds
    anything else."""
    enc = _Encoder()
    tree = json.dumps(enc(value), allow_nan=False, separators=(",", ":"))
    arrays = {**enc.arrays, TREE: np.frombuffer(tree.encode(), dtype=np.uint8)}
    return {**arrays, CHECKSUM: np.frombuffer(checksum(arrays).encode(), dtype=np.uint8)}


def checksum(arrays: dict[str, np.ndarray]) -> str:
    """SHA-256 of the canonical payload: every member (but the checksum) by name, with its dtype, shape and bytes in
    C order, so an edited number, a renamed member or a reshaped array gives another sum."""
    h = hashlib.sha256()
    for name in sorted(k for k in arrays if k != CHECKSUM):
        a = np.ascontiguousarray(arrays[name])
        head = json.dumps([name, a.dtype.str, list(a.shape)]).encode()
        h.update(len(head).to_bytes(8, "little") + head + a.nbytes.to_bytes(8, "little"))
        h.update(a.tobytes())
    return h.hexdigest()


# ------------------------------------------------------------------------------------------ decode


class _Decoder:
    def __init__(self, arrays: dict[str, np.ndarray]) -> None:
        self.arrays = arrays

    def __call__(self, t: Any) -> Any:  # noqa: C901 - mirrors _Encoder.__call__
        import pandas as pd

        if t is None or isinstance(t, (bool, int, float, str)):
            return t
        if isinstance(t, list):
            return [self(x) for x in t]
        if not isinstance(t, dict):
            raise ValueError(f"unexpected node {type(t).__name__}")
        kind = t["$"]
        if kind == "nd":
            a = self.arrays[t["k"]]
            if a.dtype.kind not in PLAIN_KINDS or t["k"] in (TREE, CHECKSUM):
                raise ValueError(f"array {t['k']!r} of dtype {a.dtype}")
            return a
        if kind == "np":
            return np.asarray(self(t["v"]))[()]
        if kind == "f":
            if t["v"] not in ("nan", "inf", "-inf"):
                raise ValueError(f"unexpected float {t['v']!r}")
            return float(t["v"])
        if kind == "tuple":
            return tuple(self(x) for x in t["v"])
        if kind == "dict":
            return {self(k): self(v) for k, v in zip(t["k"], t["v"], strict=True)}
        if kind == "df":
            columns = self.index(t["columns"])
            data = {i: self.column(c, self.index(t["index"])) for i, c in enumerate(t["v"])}
            df = pd.DataFrame(data, index=self.index(t["index"]))
            df.columns = columns
            return df
        if kind == "series":
            return self.column(t["v"], self.index(t["index"])).rename(self(t["name"]))
        if kind in ("range", "index"):
            return self.index(t)
        if kind == "dc":
            return self.dataclass(t)
        raise ValueError(f"unexpected node kind {kind!r}")

    def column(self, c: dict, index):
        import pandas as pd

        kind = c["kind"]
        if kind == "nd":
            return pd.Series(self(c["v"]), index=index, copy=False)
        if kind == "obj":
            return pd.Series([self(x) for x in c["v"]], index=index, dtype=object)
        if kind == "str":
            dtype = pd.StringDtype(c["storage"], na_value=pd.NA if c["na"] == "NA" else np.nan)
            return pd.Series(c["v"], index=index, dtype=dtype)
        if kind == "cat":
            cats = self.index(c["cats"])
            values = pd.Categorical.from_codes(self(c["codes"]), categories=cats, ordered=c["ordered"])
            return pd.Series(values, index=index)
        raise ValueError(f"unexpected column kind {kind!r}")

    def index(self, t: dict):
        import pandas as pd

        if t["$"] == "range":
            return pd.RangeIndex(*t["v"], name=self(t["name"]))
        if t["$"] != "index":
            raise ValueError(f"unexpected index kind {t['$']!r}")
        values = self.column(t["v"], None)
        return pd.Index(values.array if hasattr(values, "array") else values, name=self(t["name"]))

    def dataclass(self, t: dict) -> Any:
        cls = _vitlab_dataclass(t["cls"])
        values = {k: self(v) for k, v in t["f"].items()}
        skip, rebuild = DERIVED.get(t["cls"], ((), None))
        values.update({k: None for k in skip})  # drawn again by ``rebuild`` below
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = set(values) - set(fields)
        if unknown:
            raise ValueError(f"{t['cls']} has no field(s) {', '.join(sorted(unknown))}")
        hints = field_types(cls)
        for k, v in values.items():
            if k not in skip and not conforms(v, hints.get(k, Any)):
                raise BadEntry(f"{t['cls']}.{k} holds {kind_of(v)} where {type_name(hints[k])} belongs")
        obj = cls(**{k: v for k, v in values.items() if fields[k].init})
        for k, v in values.items():
            if not fields[k].init:
                object.__setattr__(obj, k, v)
        return rebuild(obj) if rebuild else obj


def _vitlab_dataclass(path: str) -> type:
    """The dataclass named ``module:qualname``, only from a module of vitlab (imported, never anything else)."""
    module, _, name = str(path).partition(":")
    parts = module.split(".")
    if not (parts[0] == "vitlab" and len(parts) > 1 and "__main__" not in parts and name
            and all(p.isidentifier() for p in parts + name.split("."))):
        raise ValueError(f"not a vitlab class: {path!r}")
    obj: Any = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    if not (isinstance(obj, type) and dataclasses.is_dataclass(obj) and obj.__module__ == module):
        raise ValueError(f"not a vitlab dataclass: {path!r}")
    return obj


def decode(arrays: dict[str, np.ndarray], expect: type | tuple | None = None) -> Any:
    """The value :func:`encode` wrote, checked (the module's docstring): :class:`BadEntry`, ValueError, KeyError or
    TypeError on anything edited, malformed, foreign, or not of the type ``expect`` (a class, or a tuple of classes
    for a tuple result)."""
    if CHECKSUM not in arrays or TREE not in arrays:
        raise BadEntry("a saved result without its checksum (saved by an older vitlab, or not by vitlab)")
    stored = bytes(np.asarray(arrays[CHECKSUM]).astype(np.uint8)).decode("ascii", errors="replace")
    if not hmac.compare_digest(stored, checksum(arrays)):
        raise BadEntry("a saved result whose content does not match its checksum (edited or damaged)")
    tree = json.loads(bytes(arrays[TREE].astype(np.uint8)).decode())
    value = _Decoder(arrays)(tree)
    check_result(value, expect)
    return value


# ------------------------------------------------------------------------------------------ the tour's charts


class LazyCharts(dict):
    """figure -> chart, each drawn on first use: a saved tour is shown one figure at a time, and drawing all twenty
    Altair charts up front costs more than reading the tour itself (~0.5 s on 2 cores). A dict in every other way."""

    def __init__(self, makers: dict[str, Callable]):
        super().__init__(dict.fromkeys(makers))
        self._makers = dict(makers)

    def __getitem__(self, figure):
        chart = super().__getitem__(figure)
        if chart is None and figure in self._makers:
            chart = self._makers.pop(figure)()
            super().__setitem__(figure, chart)
        return chart

    def get(self, figure, default=None):
        return self[figure] if figure in self else default

    def values(self):
        return [self[f] for f in self]

    def items(self):
        return [(f, self[f]) for f in self]

    def copy(self) -> dict:
        return dict(self.items())

    def __eq__(self, other) -> bool:
        return dict(self.items()) == (dict(other.items()) if isinstance(other, dict) else other)

    __hash__ = None


def tour_charts(report):
    """The tour's interval charts and paper-style figures from its rows, frames and figure data, exactly as
    :func:`vitlab.tour.run_tour` draws them (a saved tour keeps only the data), each drawn when first used."""
    from ..charts.evidence import estimate_chart
    from ..charts.tour import paper_chart
    from .checks import CLAIMS

    keys = {c.figure: k for k, c in CLAIMS.items()}
    charts, papers = {}, {}
    for check in report.rows:
        figure, frame = check.figure, report.frames[check.figure]
        title = f"{figure}: pattern {check.pattern}, learned {check.learned}"
        charts[figure] = functools.partial(estimate_chart, frame, title)
        data = report.figures.get(figure) or {}
        if data:  # paper_chart draws nothing without data (a check that could not be measured)
            papers[figure] = functools.partial(paper_chart, keys[figure], data, figure)
    report.charts, report.paper_charts = LazyCharts(charts), LazyCharts(papers)
    return report


# class path -> (fields left out of the saved data, how to rebuild them on reading)
DERIVED: dict[str, tuple[tuple[str, ...], Callable | None]] = {
    "vitlab.tour.checks.report:TourReport": (("charts", "paper_charts"), tour_charts),
}


# ------------------------------------------------------------------------------------------ the store


def save(store: Store, key: str, value: Any) -> bool:
    """Keep ``value`` under ``key``; False when it cannot be saved as data (:class:`Unsaveable`) or there is no
    store. A failed write is the store's warning, never an error."""
    if store is None or not store.enabled or store.mode != "rw":
        return False
    try:
        arrays = encode(value)
    except Unsaveable:
        return False
    store.put(key, arrays)
    return True


def load(store: Store, key: str, expect: type | tuple | None = None) -> Any | None:
    """The value saved under ``key``, or None: absent, unreadable, edited (its checksum), malformed, of another type
    than its fields declare or than ``expect``, or naming anything but a vitlab dataclass. Such an entry is dropped,
    said once in the store's warnings, and recomputed by the caller; nothing is unpickled."""
    if store is None or not store.enabled:
        return None
    arrays = store.get(key)
    if arrays is None:
        return None
    try:
        return decode(arrays, expect)
    except Exception as e:  # noqa: BLE001 - anything malformed is a miss, recomputed and written again
        store.bad_entry("saved results", e, "a:" + key)
        return None


# ------------------------------------------------------------------------------------------ key parts


def plain(value: Any) -> Any:
    """``value`` (a key: tuples, options dataclasses, sets, ...) as JSON-able data that is the same in every process
    (a set's repr is not: string hashing is randomised per process)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((plain(v) for v in value), key=lambda v: json.dumps(v, sort_keys=True))
    if isinstance(value, dict):
        return sorted(([plain(k), plain(v)] for k, v in value.items()), key=lambda kv: json.dumps(kv, sort_keys=True))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        cls = type(value)
        return {"$": f"{cls.__module__}:{cls.__qualname__}",
                **{f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}}
    if isinstance(value, (bytes, bytearray)):
        return hashlib.sha256(value).hexdigest()
    if isinstance(value, np.generic):
        return value.item()
    return f"{type(value).__qualname__}:{value}"


def _strings(value: Any):
    if isinstance(value, str):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(k)
            yield from _strings(v)


def files_key(key: Any) -> list:
    """(path, size, mtime) of every weights file a model spec in ``key`` names (``ARCH@/path/file``) and of the zoo's
    checkpoints: models a result loads by name (the tour's twins and pairs) are then part of its key, cheaply (a stat
    each, nothing read)."""
    from ..zoo.registry import ZOO_DIR

    paths = set()
    for s in _strings(plain(key)):
        _, at, weights = s.partition("@")
        if at and ("/" in weights or "\\" in weights):
            paths.add(Path(weights).expanduser())
    if ZOO_DIR.is_dir():
        paths.update(p for p in ZOO_DIR.iterdir() if p.is_file())
    out = []
    for p in sorted(paths):
        try:
            st = p.stat()
            out.append([str(p), st.st_size, st.st_mtime_ns])
        except OSError as e:
            out.append([str(p), e.errno])
    return out
