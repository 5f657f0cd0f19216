"""AppTest of warm visits (issue 34): a second session (a new AppTest, as a new browser or a restarted server would
be) reads the tour whole from the disk cache; the caption says so and gives the page's wall time; the table is the
first session's. With VITLAB_PERSIST=0 the result is computed again (from the cached statistics)."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "app"
sys.path.insert(0, str(APP))

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

SETTINGS = {"lab.model_a": "zoo:vit-cls", "lab.model_b": "zoo:resnet", "lab.source": "fashion-mnist:test",
            "lab.images": 16, "lab.batch_size": 8}

pytestmark = pytest.mark.usefixtures("app_cache")  # a fresh disk cache for this module (conftest)


def tour_session() -> AppTest:
    at = AppTest.from_file(str(APP / "Home.py"), default_timeout=900)
    for k, v in SETTINGS.items():
        at.session_state[k] = v
    at.session_state["tour.bootstrap"] = 50
    at.run()
    at.switch_page("views/tour.py").run()
    assert not at.exception and not at.error, [e.message for e in at.exception] + [e.value for e in at.error]
    return at


def caption(at: AppTest) -> str:
    return " ".join(c.value for c in at.caption if "images;" in c.value)


def test_a_second_session_shows_the_tour_from_the_disk_cache(monkeypatch):
    first = tour_session()
    assert "computed now" not in caption(first)  # wording of a fresh run: its counts and engine time
    assert "page ready in" in caption(first) and "result from the disk cache" not in caption(first)
    table = first.dataframe[0].value

    second = tour_session()  # a new session: nothing in memory, the same disk cache
    text = caption(second)
    assert "result from the disk cache" in text and "0 batches computed" in text and "page ready in" in text, text
    assert second.dataframe[0].value.equals(table)
    assert len(second.get("vega_lite_chart")) == len(first.get("vega_lite_chart")) >= 1

    monkeypatch.setenv("VITLAB_PERSIST", "0")  # the bench's baseline: computed again from the cached statistics
    third = tour_session()
    assert "result from the disk cache" not in caption(third)
    # computed again, from the cached statistics: the same to the last bits of a float sum's order
    pd.testing.assert_frame_equal(third.dataframe[0].value, table, check_exact=False, rtol=1e-9)


def test_warm_up_runs_once_in_the_background_and_can_be_switched_off(monkeypatch):
    import lab

    monkeypatch.setattr(lab.runs, "_warm_thread", [])
    monkeypatch.setenv("VITLAB_WARMUP", "0")
    assert lab.warm_up() is None
    monkeypatch.delenv("VITLAB_WARMUP")
    assert lab.warm_up() is None  # under pytest only when asked for by name
    monkeypatch.setenv("VITLAB_WARMUP", "1")
    thread = lab.warm_up()
    assert thread is not None and thread.daemon
    thread.join(600)
    assert not thread.is_alive()
    assert lab.warm_up() is None  # once per process
    assert {"torch", "timm", "scipy.stats", "vitlab.tour.measure"} <= set(sys.modules)
    loaded = {spec for spec, _ in lab._loaded_registry()}
    assert {lab.DEFAULTS["model_a"], lab.DEFAULTS["model_b"]} <= loaded


def test_a_page_run_waits_for_the_warm_ups_imports_instead_of_importing_beside_it(monkeypatch):
    """Two threads importing timm at once can each see the other's half-made module ("partially initialized module
    'timm.data'", issue 51): a page's run waits until the warm-up thread's imports are done."""
    import importlib
    import threading
    import time

    import lab

    done = []
    real = importlib.import_module

    def slow(name, *args, **kwargs):
        time.sleep(1.0)  # an import that takes a while, as timm's does on a busy machine
        module = real(name, *args, **kwargs)
        done.append(name)
        return module

    monkeypatch.setattr(lab.runs, "_warm_thread", [])
    monkeypatch.setattr(lab.runs, "_imports_done", threading.Event())
    monkeypatch.setattr(lab.runs, "WARM_MODULES", ("json", "csv"))
    monkeypatch.setattr(lab.runs, "_load", lambda *args: None)  # the models' part of the warm-up is not the point
    monkeypatch.setattr(importlib, "import_module", slow)
    monkeypatch.setenv("VITLAB_WARMUP", "1")
    thread = lab.warm_up()
    lab.runs.wait_for_warm_imports()
    assert done == ["json", "csv"]  # both imports were over when the page went on
    thread.join(60)
    lab.runs.wait_for_warm_imports()  # and once they are done it returns at once
