"""Shared fixtures: tiny random-init timm models, a private cache folder, small real image sets."""

from __future__ import annotations

import os

import pytest

# never touch the network or the user's cache from tests
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# the app's lab.guard shows an unexpected exception as an error in words; under test it must surface as one
os.environ.setdefault("VITLAB_STRICT", "1")


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VITLAB_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="session")
def tiny_vit():
    import vitlab

    return vitlab.load("test_vit@random:0", "cpu")


@pytest.fixture(scope="session")
def tiny_resnet():
    import vitlab

    return vitlab.load("test_resnet@random:0", "cpu")


@pytest.fixture(scope="session")
def fmnist_source():
    import vitlab

    return vitlab.open_source("fashion-mnist:test")


@pytest.fixture()
def store(tmp_path):
    import vitlab

    return vitlab.Store(tmp_path / "store")


@pytest.fixture(scope="module")
def app_cache(tmp_path_factory):
    """A fresh disk cache for one AppTest module (the app's Store is created once per process by
    st.cache_resource, so it is cleared on the way in and out)."""
    d = tmp_path_factory.mktemp("vitlab-cache")
    old = os.environ.get("VITLAB_CACHE_DIR")
    os.environ["VITLAB_CACHE_DIR"] = str(d)
    import lab

    lab.store.clear()
    yield d
    lab.store.clear()
    if old is None:
        os.environ.pop("VITLAB_CACHE_DIR", None)
    else:
        os.environ["VITLAB_CACHE_DIR"] = old


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """``streamlit run app/Home.py`` with tests/test_browser.py's settings and a disk cache of its own, one for the
    session: test_browser, test_browser_share, test_browser_slides and test_browser_uploads open their own browsers
    (so their own Streamlit sessions) on it, and what one computed (the models loaded, the tour) is read from the
    cache by the next. A file that needs other settings or a cold cache defines its own ``server``."""
    from tests.test_browser import ENV, require_browser, serve_app

    require_browser()
    tmp = tmp_path_factory.mktemp("app")
    with serve_app(tmp, {**ENV, "VITLAB_CACHE_DIR": str(tmp / "cache"), "HF_HUB_OFFLINE": "1"}) as url:
        yield url
