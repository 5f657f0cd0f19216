"""Options of an analysis: a frozen dataclass whose fields carry their help, so that one declaration gives the
engine's defaults, the CLI's flags (``vitlab.table``) and the app's widget defaults.

    @dataclass(frozen=True)
    class SkipOptions(DataOptions):
        images: int | None = option(128, "number of images (first N, or shuffled)", short="-n")

A field's metadata: ``help``; optional ``short`` (a one-letter alias), ``flag`` (a CLI name other than
``--field-name``), ``choices``, ``kind`` ('ints' / 'strs' for comma-separated lists, 'query'), ``required``
(a CLI flag the user must give; the dataclass still has a default for library use) and ``metavar``.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

from .errors import VitlabError


def option(default: Any, help: str, **meta: Any) -> Any:
    """A dataclass field with its help text and CLI hints (see the module docstring)."""
    return field(default=default, metadata={"help": help, **meta})


@dataclass(frozen=True)
class DataOptions:
    """Which images, in which batches: shared by every batch analysis."""

    images: int | None = option(256, "number of images (first N, or shuffled)", short="-n")
    batch_size: int = option(64, "images per batch", short="-b")
    shuffle: int | None = option(None, "take a seeded random subset", metavar="SEED")


def env_switch(name: str, default: bool, on: str, off: str = "") -> bool:
    """A 0/1 environment variable (1/true/yes/on, 0/false/no/off; unset or empty: ``default``); any other value is a
    VitlabError naming the variable and what each value does (``on``, ``off``)."""
    raw = os.environ.get(name, "")
    value = raw.strip().lower()
    if not value:
        return default
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise VitlabError(f"{name} must be 1 ({on}) or 0{f' ({off})' if off else ''}, not '{raw}'")


def parse_ints(text: str | None, what: str) -> tuple[int, ...] | None:
    """``'0,1,2'`` -> ``(0, 1, 2)``; None or '' -> None."""
    if not text:
        return None
    try:
        return tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise VitlabError(f"{what} must be comma-separated integers, e.g. 0,1,2, not '{text}'") from None


def parse_strs(text: str | None) -> tuple[str, ...] | None:
    """``'a, b'`` -> ``('a', 'b')``; None or '' -> None."""
    if not text:
        return None
    return tuple(t.strip() for t in text.split(",") if t.strip())


def fields(options: type) -> list[dataclasses.Field]:
    return list(dataclasses.fields(options))


def defaults(options: type) -> dict[str, Any]:
    """Field name -> default (the app's widget defaults)."""
    return {f.name: f.default for f in dataclasses.fields(options)}
