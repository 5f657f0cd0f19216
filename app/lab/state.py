"""The lab's settings: the sidebar's choices as plain values (``Settings``), their defaults from the environment
(a bad value is named, never a crash), and the plain session-state keys that survive page switches."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import streamlit as st

import vitlab

OTHER = "timm model name…"


CHECKPOINT = "checkpoint file…"


FOLDER = "folder"


UPLOADS = "uploads"


# short enough for the sidebar's select box at 1280 px (issue 34: "Fashion-MNIST test set (bundled" was cut)
SOURCES = {
    "fashion-mnist:test": "Fashion-MNIST test",
    "samples": "Sample photographs",
    "cifar10:test": "CIFAR-10 test",
    "cifar100:test": "CIFAR-100 test",
    FOLDER: "A folder of images…",
    UPLOADS: "Uploaded images…",
}


DEVICES = ("auto", "cpu", "cuda")


# Small defaults: the zoo models on 64 bundled Fashion-MNIST images give the first heatmap in seconds on a CPU;
# batches of 16 give the intervals 4 batches to rest on (2 batches of 32 give none: docs/evidence.md, issue 28).
# VITLAB_MODEL_A / _B / VITLAB_DATA / _IMAGES / _BATCH_SIZE / _DEVICE start the app on other choices (tests, demos).
# A bad one never stops the server (the warm start imports this module): the sidebar names it and uses the default.
ENV_INTS = {"images": ("VITLAB_IMAGES", 64, 4, 100_000), "batch_size": ("VITLAB_BATCH_SIZE", 16, 4, 4096)}


def env_settings() -> tuple[dict[str, Any], list[str]]:
    """The sidebar's starting values from the environment, and what is wrong with any of them (in words)."""
    values: dict[str, Any] = {
        "model_a": os.environ.get("VITLAB_MODEL_A", "zoo:vit-cls"),
        "model_b": os.environ.get("VITLAB_MODEL_B", "zoo:resnet"),
        "source": os.environ.get("VITLAB_DATA", "fashion-mnist:test"),
        "folder": "",
    }
    errors = []
    for name, (var, default, lo, hi) in ENV_INTS.items():
        text = os.environ.get(var, "")
        values[name] = default
        if not text.strip():
            continue
        try:
            value = int(text.strip())
        except ValueError:
            errors.append(f"{var}={text!r} is not a whole number; the sidebar starts at {default} instead (set "
                          f"{var} to a whole number from {lo} to {hi}, e.g. {var}={default})")
            continue
        if lo <= value <= hi:
            values[name] = value
        else:
            errors.append(f"{var}={text!r} is outside {lo} to {hi}; the sidebar starts at {default} instead")
    device = os.environ.get("VITLAB_DEVICE", "auto").strip() or "auto"
    values["device"] = device if device in DEVICES else "auto"
    if device not in DEVICES:
        errors.append(f"VITLAB_DEVICE={device!r} is not one of {', '.join(DEVICES)}; the sidebar starts at auto")
    return values, errors


DEFAULTS: dict[str, Any] = env_settings()[0]


MEMO_SIZE = 24  # results kept per browser session, so that a click re-draws without re-reading the cache


# not "pages/": Streamlit would also discover that folder as a v1 multipage app and could run a page
# without the entrypoint (and without the sidebar)
VIEWS = Path(__file__).resolve().parent.parent / "views"


@dataclass(frozen=True)
class Settings:
    """The sidebar's choices, as plain values."""

    model_a: str
    model_b: str
    source: str  # a data-source string for vitlab.open_source, or 'uploads'
    images: int
    batch_size: int
    device: str
    uploads: tuple[tuple[str, bytes], ...] = ()

    @property
    def key(self) -> tuple:
        """Identifies the inputs of a computation: uploads by content hash, a folder by its listing (names, sizes,
        mtimes: a new or changed file is a new key), so the page never shows results of other images."""
        uploads = tuple((n, hashlib.sha256(b).hexdigest()[:16]) for n, b in self.uploads) if self.source == UPLOADS \
            else ()
        fixed = self.source in SOURCES or self.source == UPLOADS
        source = self.source if fixed else vitlab.data.listing_key(self.source)
        return (self.model_a, self.model_b, source, self.images, self.batch_size, self.device, uploads)


def _plain(name: str) -> Any:
    key = f"lab.{name}"
    if key not in st.session_state:
        st.session_state[key] = env_settings()[0].get(name)  # read now: the variables may differ from the import's
    return st.session_state[key]


def _seed(widget_key: str, value: Any) -> str:
    """Give a widget its value from plain state when Streamlit has dropped the widget's own state."""
    if widget_key not in st.session_state:
        st.session_state[widget_key] = value
    return widget_key


def settings() -> Settings:
    """The current sidebar choices (plain values that survive page switches)."""
    return Settings(_plain("model_a"), _plain("model_b"), _plain("source"), int(_plain("images")),
                    int(_plain("batch_size")), _plain("device"), tuple(st.session_state.get("lab.uploads", ())))


TOUR_SETTINGS = "lab.tour_settings"  # the Paper tour page's images, batch size, twins and resamples (plain values)


def set_models(model_a: str, model_b: str) -> None:
    """A button callback: choose both models (the sidebar pickers re-seed from the plain keys)."""
    st.session_state["lab.model_a"], st.session_state["lab.model_b"] = model_a, model_b
    for slot in ("model_a", "model_b"):
        for part in ("kind", "text", "arch", "path"):
            st.session_state.pop(f"w.{slot}.{part}", None)

