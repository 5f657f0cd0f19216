"""Whether a value read back from the disk has the types its reader expects (issue 39): a saved result is untrusted
input, and a well-formed one with a string where a float array belongs would otherwise reach a page and kill it in
every later session. Checked against the dataclasses' own annotations (no second schema to keep in step), the
caller's class, and the result's ability to draw its own table."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import sys
import types
import typing
from typing import Any

import numpy as np

from ..inputs.cache import BadEntry

PLAIN_KINDS = "biufcmM"  # numpy dtype kinds stored bit-exact in the npz (no objects, no void)


@functools.lru_cache(maxsize=None)
def field_types(cls: type) -> dict[str, Any]:
    """A dataclass's field annotations, resolved (one that cannot be resolved is ``Any``: not checked)."""
    try:
        return typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - e.g. a name imported only for type checkers: resolve field by field
        pass
    out: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        ns = vars(importlib.import_module(klass.__module__)) if klass.__module__ in _modules() else {}
        for name, hint in getattr(klass, "__annotations__", {}).items():
            try:
                out[name] = eval(hint, dict(ns)) if isinstance(hint, str) else hint  # noqa: S307 - vitlab's source
            except Exception:  # noqa: BLE001
                out[name] = Any
    return out


def _modules() -> set[str]:
    return {m for m in sys.modules if m == "vitlab" or m.startswith("vitlab.")}


def conforms(v: Any, hint: Any) -> bool:  # noqa: C901 - one branch per kind of annotation
    """Whether ``v`` has the type ``hint`` declares (containers item by item; ``Any`` and what cannot be checked pass).
    Numbers may be Python or numpy scalars; an ``np.ndarray`` must hold a plain numeric dtype."""
    if hint is Any or isinstance(hint, (typing.TypeVar, str)) or hint is object:
        return True
    if hint is None or hint is type(None):
        return v is None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(conforms(v, a) for a in args)
    if origin is typing.Literal:
        return v in args
    if hint is float:
        return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, str)
    if hint is int:
        return isinstance(v, (int, np.integer))
    if hint is bool:
        return isinstance(v, (bool, np.bool_))
    if hint is str:
        return isinstance(v, str)
    if hint is np.ndarray:
        return isinstance(v, np.ndarray) and v.dtype.kind in PLAIN_KINDS
    if origin in (list, tuple, dict, set, frozenset) or hint in (list, tuple, dict, set, frozenset):
        return _container(v, origin or hint, args)
    if origin is not None:  # Callable, Sequence[...], a generic alias: its class, when it has one
        return not isinstance(origin, type) or isinstance(v, origin) or origin.__module__ == "collections.abc"
    if isinstance(hint, type):
        return isinstance(v, hint)
    return True


def _container(v: Any, kind: type, args: tuple) -> bool:
    if not isinstance(v, kind):
        return False
    if not args:
        return True
    if kind is dict:
        return all(conforms(k, args[0]) and conforms(x, args[1]) for k, x in v.items())
    if kind is tuple and not (len(args) == 2 and args[1] is Ellipsis):
        return len(v) == len(args) and all(conforms(x, a) for x, a in zip(v, args))
    return all(conforms(x, args[0]) for x in v)


def kind_of(v: Any) -> str:
    if isinstance(v, np.ndarray):
        return f"an array of {v.dtype}"
    return f"a {type(v).__name__}" + (f" {v[:40]!r}" if isinstance(v, str) else "")


def type_name(hint: Any) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


def check_result(value: Any, expect: type | tuple | None = None) -> None:
    """``value`` is of the type ``expect`` (a class, or a tuple of classes, one per item of a tuple result) and
    each result in it draws its own table: :class:`BadEntry` otherwise."""
    parts, wants = (value, expect) if isinstance(expect, tuple) else ((value,), (expect,))
    if isinstance(expect, tuple) and not (isinstance(value, tuple) and len(value) == len(expect)):
        raise BadEntry(f"a saved {kind_of(value)} where a tuple of {len(expect)} belongs")
    for part, want in zip(parts, wants):
        if want is not None and not isinstance(part, want):
            raise BadEntry(f"a saved {kind_of(part)} where a {want.__qualname__} belongs")
        to_frame = getattr(part, "to_frame", None) if dataclasses.is_dataclass(part) else None
        if callable(to_frame) and _takes_nothing(to_frame):
            try:
                to_frame()
            except Exception as e:  # noqa: BLE001 - e.g. arrays of another shape than their labels
                raise BadEntry(f"a saved {type(part).__qualname__} that cannot draw its table "
                               f"({type(e).__name__}: {str(e)[:120]})") from e


def _takes_nothing(fn) -> bool:
    try:
        inspect.signature(fn).bind()
    except (TypeError, ValueError):
        return False
    return True
