"""vitlab installs like a library: the sdist and the wheel built from it carry the app, the zoo and the bundled data,
and a fresh virtual environment with only that wheel runs ``vitlab --version``, ``vitlab zoo list``, every zoo model,
a small ``vitlab cka`` and ``vitlab app`` from a folder outside the checkout (issue 49).

The build is what ``python -m build --no-isolation`` does (an sdist, then the wheel from the unpacked sdist), with no
network; the virtual environment reuses this interpreter's packages (torch, timm, streamlit) and holds vitlab itself
only as the wheel's copy, which must win over the editable checkout installed beside it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tarfile
import time
import urllib.request
from pathlib import Path

import pytest

from vitlab.resources import _project

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
VERSION = _project(ROOT / "pyproject.toml", "version")
ZOO = sorted(p.stem for p in (ROOT / "assets" / "zoo").glob("*.safetensors"))


def test_an_editable_checkout_finds_its_app_and_assets_through_the_package_as_the_wheel_does(capsys):
    import importlib.resources

    from vitlab import cli, resources
    from vitlab.inputs import data, fmnist
    from vitlab.zoo import registry

    # pip install -e . maps vitlab._app and vitlab._assets onto the checkout's folders (setuptools' editable finder);
    # an install made before they existed fails here: python -m pip install -e .
    assert importlib.resources.files("vitlab._app") == ROOT / "app"
    assert importlib.resources.files("vitlab._assets") == ROOT / "assets"
    assert (resources.app_dir(), resources.assets_dir()) == (ROOT / "app", ROOT / "assets")
    assert (registry.ZOO_DIR, data.ASSETS, fmnist.bundled_dir()) == (
        ROOT / "assets" / "zoo", ROOT / "assets", ROOT / "assets" / "fashion-mnist")
    assert cli.app_command([])[4] == str(ROOT / "app" / "serve.py")
    with pytest.raises(SystemExit) as stop:
        cli.main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out == f"vitlab {VERSION} from {ROOT / 'vitlab'} (editable install of {ROOT})\n"


def test_the_version_is_this_copys_never_another_installs(monkeypatch):
    from importlib import metadata

    from vitlab import resources

    class Other:  # a vitlab installed elsewhere on the path (a wheel in site-packages, a checkout's stale egg-info)
        _path = Path("/elsewhere/site-packages/vitlab-9.9.dist-info")
        version = "9.9"

        def read_text(self, name):
            return None

        def locate_file(self, name):
            return Path("/elsewhere/site-packages") / name

    monkeypatch.setattr(metadata, "distributions", lambda **kw: [Other()])
    resources.install.cache_clear()
    try:
        assert resources.install() == (VERSION, f"checkout {ROOT}, not installed")
    finally:
        resources.install.cache_clear()


def _run(cmd: list, cwd: Path, env: dict | None = None, timeout: float = 300) -> str:
    done = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(map(str, cmd))} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv, folder outside the checkout, environment): the wheel built from the sdist, installed into a venv."""
    tmp = tmp_path_factory.mktemp("wheel")
    dist = tmp / "dist"
    dist.mkdir()
    # sdist from the checkout (PEP 517, no isolation: no download), then the wheel from the unpacked sdist, so a file
    # the sdist forgets is missing from the wheel too; the wheel's build folder is the unpacked sdist's, not the tree's
    code = "import sys; from setuptools import build_meta as b; print(b.build_sdist(sys.argv[1]))"
    sdist = dist / _run([sys.executable, "-c", code, dist], ROOT).strip().splitlines()[-1]
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp / "src", filter="data")
    (src,) = (tmp / "src").iterdir()
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", dist, src],
         tmp)
    (wheel,) = dist.glob("vitlab-*.whl")
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv], tmp)
    # this interpreter's pip installs into the venv; --ignore-installed: the editable vitlab outside stays untouched
    _run([sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "--no-deps", "--no-index",
          "--ignore-installed", "--quiet", wheel], tmp)
    away = tmp / "elsewhere"
    away.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(VITLAB_CACHE_DIR=str(tmp / "cache"), HF_HUB_OFFLINE="1", VITLAB_WARMUP="0",
               PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}")
    return venv, away, env, sdist


def test_the_sdist_carries_the_app_the_zoo_and_the_data(installed):
    *_, sdist = installed
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    wanted = {"setup.py", "pyproject.toml", "requirements.txt", "app/serve.py", "app/Home.py", "app/lab/__init__.py",
              "assets/fashion-mnist/t10k-images-idx3-ubyte.gz", "assets/samples/astronaut.jpg",
              *(f"assets/zoo/{n}.{ext}" for n in ZOO for ext in ("safetensors", "json"))}
    assert wanted <= names, sorted(wanted - names)


def test_the_wheel_runs_the_zoo_on_its_bundled_data_outside_the_checkout(installed):
    venv, away, env, _ = installed
    py, vitlab = venv / "bin" / "python", venv / "bin" / "vitlab"  # the venv's own, as pipx links them
    where = json.loads(_run([py, "-c", (
        "import json, vitlab, vitlab.cli as c, vitlab.resources as r, vitlab.inputs.data as d;"
        "import vitlab.inputs.fmnist as f;"
        "print(json.dumps({'vitlab': vitlab.__file__, 'app': str(r.app_dir()), 'assets': str(r.assets_dir()),"
        "'fmnist': str(f.bundled_dir()), 'samples': str(d.ASSETS / 'samples'), 'serve': c.app_command([])[4],"
        "'version': vitlab.__version__, 'checkout': str(r._checkout())}))")], away, env))
    site = Path(where["vitlab"]).parent
    # the wheel's copy, not the editable checkout installed outside the venv, and every file found inside it
    assert site.is_relative_to(venv) and site.name == "vitlab", where
    assert where["app"] == str(site / "_app") and where["assets"] == str(site / "_assets"), where
    assert where["serve"] == str(site / "_app" / "serve.py") and where["fmnist"].startswith(where["assets"]), where
    assert where["version"] == VERSION and where["checkout"] == "None", where
    assert sorted(p.name for p in Path(where["samples"]).glob("*.jpg")) == sorted(
        p.name for p in (ROOT / "assets" / "samples").glob("*.jpg"))

    assert _run([vitlab, "--version"], away, env).strip() == f"vitlab {VERSION} from {site} (installed)"

    listing = _run([vitlab, "zoo", "list"], away, env).splitlines()[1:]
    rows = {line.split()[0]: line.split() for line in listing}
    assert sorted(rows) == ZOO and all(r[5] != "-" for r in rows.values()), listing  # each checkpoint's MB: present

    # every zoo model loads from the wheel's checkpoint and classifies the wheel's Fashion-MNIST slice as its card says
    code = ("import sys, torch, vitlab; from vitlab import zoo; from vitlab.inputs import fmnist;"
            "x, y = fmnist.load('test', fmnist.bundled_dir()); x, y = zoo.to_input(x[:zoo.SLICE_N]), y[:zoo.SLICE_N];"
            "torch.set_grad_enabled(False);"
            "[print(n, float((vitlab.load('zoo:' + n, 'cpu').model(x).argmax(1).numpy() == y).mean()),"
            " zoo.card(n)['slice_accuracy'], zoo.card(n)['slice_tolerance']) for n in sys.argv[1:]]")
    accuracies = _run([py, "-c", code, *ZOO], away, env).splitlines()
    assert [line.split()[0] for line in accuracies] == ZOO, accuracies
    for line in accuracies:
        _, acc, card, tol = line.split()
        assert abs(float(acc) - float(card)) <= float(tol), line

    out = away / "out"
    _run([vitlab, "cka", "-m", "zoo:vit-cls", "-m", "zoo:resnet", "--data", "fashion-mnist:test", "-n", "16", "-b",
          "8", "--no-cache", "--device", "cpu", "-o", out], away, env)
    assert list(out.glob("*.csv")), sorted(p.name for p in out.iterdir())
    assert json.loads((out / "run.json").read_text())["vitlab"] == VERSION


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.read().decode() if r.status == 200 else None
    except OSError:
        return None


@pytest.mark.browser
def test_vitlab_app_from_the_wheel_serves_the_app_outside_the_checkout(installed, tmp_path):
    from .test_browser import ARGS, CHROMIUM, SLOW, require_browser

    venv, away, env, _ = installed
    port = _free_port()
    url = f"http://localhost:{port}"
    log = tmp_path / "app.log"
    with open(log, "wb") as f:
        proc = subprocess.Popen([venv / "bin" / "vitlab", "app", "--server.port", str(port), "--server.headless",
                                 "true", "--server.fileWatcherType", "none"], cwd=away, env=env, stdout=f,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 120
        while _get(f"{url}/_stcore/health") != "ok":
            assert proc.poll() is None and time.time() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
        assert "<title>Streamlit</title>" in _get(url)  # noqa: the index page the browser opens
        require_browser()  # the page itself: drawn in Chromium (CI has it; VITLAB_REQUIRE_BROWSER=1 fails without)
        from playwright.sync_api import sync_playwright

        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            try:
                page = browser.new_page()
                page.set_default_timeout(SLOW)
                page.goto(url)
                sidebar = page.locator('[data-testid="stSidebar"]')
                sidebar.get_by_text("Models", exact=True).wait_for()
                sidebar.get_by_text("Status").click()
                site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
                sidebar.get_by_text(f"vitlab {VERSION} from {site / 'vitlab'} (installed)").wait_for()
                # the app's default models, their checkpoints found inside the wheel
                for slot, name in (("A", "vit-cls"), ("B", "resnet")):
                    sidebar.get_by_text(f"Model {slot} zoo:{name}: zoo checkpoint", exact=True).wait_for()
                assert page.locator('[data-testid="stException"]').count() == 0
            finally:
                browser.close()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the group started above: vitlab app, its streamlit, nothing else
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
