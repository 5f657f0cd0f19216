"""Which vitlab this is (its version, where it is installed from) and where its own files are.

The repository keeps the app (``app/``) and the bundled files (``assets/``: the zoo's checkpoints and cards, the
Fashion-MNIST slice, the sample photos) at its top level, beside ``vitlab/``. The wheel carries both inside the
package, as ``vitlab/_app`` and ``vitlab/_assets`` (``setup.py`` lists them, ``pyproject.toml`` maps them); an
editable install (``pip install -e .``) maps the same two package names onto the checkout's folders. So every
install finds them the same way, through the package's import machinery, never through the current folder.

Imports neither torch nor anything else heavy: ``vitlab --version`` and ``vitlab zoo list`` answer at once.
"""

from __future__ import annotations

import argparse
import functools
import importlib.resources
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
NAME = "vitlab"


def _project(path: Path, key: str) -> str | None:
    """A string field of pyproject.toml's [project] table (tomllib is 3.11+; vitlab runs on 3.10)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return None
    project = text.split("\n[project]\n", 1)[-1].split("\n[", 1)[0]
    match = re.search(rf'(?m)^{key}\s*=\s*"([^"]+)"', project)
    return match.group(1) if match else None


def _checkout() -> Path | None:
    """The repository folder when this vitlab is a checkout's ``vitlab/`` (vitlab's pyproject.toml beside it)."""
    root = PACKAGE.parent
    return root if _project(root / "pyproject.toml", "name") == NAME else None


@functools.cache
def _package_dir(package: str, in_checkout: str) -> Path:
    """The folder of ``package`` (``vitlab._app``, ``vitlab._assets``) where the import system finds it: inside an
    installed wheel, or the checkout's folder an editable install maps it to. A checkout that was never installed, or
    an editable install made before these names existed, has no such package: then the checkout's own folder."""
    try:
        found = importlib.resources.files(package)
    except ModuleNotFoundError:
        found = None
    if isinstance(found, Path) and found.is_dir():  # a zipped install (zipimport) has no folder to hand to Streamlit
        return found.resolve()
    root = _checkout()
    # a path that may not exist: whoever opens a file in it names that path in its error (zoo, Fashion-MNIST, app)
    return (root / in_checkout) if root else PACKAGE / package.rsplit(".", 1)[1]


def app_dir() -> Path:
    """The Streamlit app's folder (``Home.py``, ``serve.py``, ``lab/``, ``views/``)."""
    return _package_dir("vitlab._app", "app")


def assets_dir() -> Path:
    """The bundled files' folder (``zoo/``, ``fashion-mnist/``, ``samples/``)."""
    return _package_dir("vitlab._assets", "assets")


def _url_path(url: str) -> Path | None:
    from urllib.parse import unquote, urlparse
    from urllib.request import url2pathname  # 10 ms of imports (http, email): only when the version is asked for

    parsed = urlparse(url)
    return Path(url2pathname(unquote(parsed.path))).resolve() if parsed.scheme == "file" else None


@functools.cache
def install() -> tuple[str, str]:
    """(version, how this copy of vitlab is installed, in words). The version comes from the installed
    distribution's metadata when that distribution is this copy (a wheel's files, or an editable install of the
    checkout this package is in); otherwise, from a checkout's pyproject.toml: a stale or foreign vitlab elsewhere
    on the path never lends its version to this one."""
    import json
    from importlib import metadata  # read when the version is asked for, so `vitlab --help` does not wait for it

    for dist in metadata.distributions(name=NAME):
        # an install (pip, uv, pipx) leaves a .dist-info; a build's vitlab.egg-info in the checkout is not one
        if not str(getattr(dist, "_path", "x.dist-info")).endswith(".dist-info"):
            continue
        try:
            direct = json.loads(dist.read_text("direct_url.json") or "{}")
        except ValueError:
            direct = {}
        root = _url_path(str(direct.get("url", "")))
        if direct.get("dir_info", {}).get("editable") and root and PACKAGE.is_relative_to(root):
            return dist.version, f"editable install of {root}"
        if Path(str(dist.locate_file(f"{NAME}/__init__.py"))).resolve().parent == PACKAGE:
            return dist.version, "installed"
    root = _checkout()
    version = _project(root / "pyproject.toml", "version") if root else None
    if version:
        return version, f"checkout {root}, not installed"
    return "0+unknown", "not installed, and no pyproject.toml beside it"


def version() -> str:
    """vitlab's version (``vitlab.__version__``): recorded in every run.json, report and lecture summary."""
    return install()[0]


def describe() -> str:
    """``vitlab 0.1.0 from /path/to/vitlab (installed)``: what ``vitlab --version`` prints."""
    v, how = install()
    return f"{NAME} {v} from {PACKAGE} ({how})"


class VersionAction(argparse.Action):
    """``--version``: prints :func:`describe` and exits; reads the metadata only when asked."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS,
                 help="print vitlab's version and where it is installed from, then exit"):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(describe())  # on stdout, as argparse's own version action and `python --version` do
        parser.exit()
