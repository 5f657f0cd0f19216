"""``vitlab app``: the Streamlit app, on localhost only, wherever it is started; vitlab stays the server's parent.

    argv after `vitlab app` ─app_command─► `python -m streamlit run …/serve.py` + local defaults ─serve─► exit status

:func:`serve` forwards SIGTERM, SIGINT and SIGHUP to the server and never leaves it behind (docs/hardening.md).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from ..errors import VitlabError
from .flags import HELP

# Streamlit reads .streamlit/config.toml from the folder it is started in, so from any other folder the address
# would be unset: every interface (FACTS.md). These flags do not depend on the folder; a flag the user gives wins.
APP_FLAGS = {"--server.address": "localhost", "--browser.gatherUsageStats": "false",
             "--client.toolbarMode": "minimal", "--theme.base": "light"}


def add_app(sub) -> None:
    p = sub.add_parser("app", help=HELP["app"],
                       description="Start the Streamlit app (app/serve.py: app/Home.py with a warm start) on "
                                   "http://localhost:8501. It listens on "
                                   "localhost only and takes uploads up to the engine's limit, wherever it is "
                                   "started; any other arguments go to `streamlit run` (e.g. --server.port 8502; "
                                   "--server.address 0.0.0.0 exposes it on purpose, docs/hardening.md).")
    p.set_defaults(func=run_app, streamlit_args=[])


def app_command(extra: list[str]) -> list[str]:
    """The ``streamlit run`` command line of ``vitlab app`` with ``extra`` arguments (which win over the defaults)."""
    from ..inputs.images import MAX_UPLOAD_BYTES
    from ..resources import app_dir

    # serve.py: Home.py as an ASGI app that imports torch/timm and loads the default models when the server starts,
    # so the first page after a (re)start does not wait for them (issue 34, bench/warm_bench.py); inside the wheel,
    # or the checkout's app/ (vitlab.resources)
    home = app_dir() / "serve.py"
    if not home.is_file():
        package = Path(__file__).parent.parent  # vitlab/, this module's vitlab/cli/ is inside it
        raise VitlabError(f"the app ({home}) is missing from this vitlab ({package}); reinstall it from "
                          "its wheel (docs/development.md, 'Installing'), or python -m pip install -e . in a checkout")
    given = {a.split("=", 1)[0] for a in extra if a.startswith("--")}
    defaults = {**APP_FLAGS, "--server.maxUploadSize": str(MAX_UPLOAD_BYTES // 2**20)}
    flags = [x for k, v in defaults.items() if k not in given for x in (k, v)]
    return [sys.executable, "-m", "streamlit", "run", str(home), *flags, *extra]


def run_app(args) -> int:
    return serve(app_command(list(args.streamlit_args)))


STOP_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP")  # what a service manager, Ctrl-C, `kill PID` or a closed terminal send
GRACE_S = 10.0  # how long the server may take to stop after a forwarded signal before it is killed


def _die_with_parent():
    """A ``preexec_fn`` (Linux) that makes the kernel send SIGTERM to the child when vitlab dies, even by SIGKILL
    (``prctl(PR_SET_PDEATHSIG)``); None elsewhere. libc is looked up here, in the parent: the child only calls it."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes
    import signal

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(1, int(signal.SIGTERM), 0, 0, 0)  # 1: PR_SET_PDEATHSIG
        if os.getppid() != parent:  # vitlab died between fork and prctl: nobody would end this server
            os._exit(1)

    return preexec


def serve(cmd: list[str]) -> int:
    """Run the server ``cmd`` as vitlab's child and stay its parent: SIGTERM, SIGINT and SIGHUP sent to vitlab go on
    to the server, which stops (Streamlit's own handler); vitlab returns its status once it has gone, killing it if
    it is still there :data:`GRACE_S` seconds after the signal (or at a second signal). On Linux the server also
    ends when vitlab is killed outright. So no orphan server ever keeps the port."""
    import signal
    import subprocess
    import threading

    child = subprocess.Popen(cmd, preexec_fn=_die_with_parent())  # noqa: S603 - our own command line
    deadline: list[float] = []

    def forward(signum, _frame) -> None:
        if child.poll() is not None:
            return
        if deadline:  # asked twice: stop now
            child.kill()
            return
        deadline.append(time.monotonic() + GRACE_S)
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    stops = [getattr(signal, name) for name in STOP_SIGNALS if hasattr(signal, name)]
    before = {}
    if threading.current_thread() is threading.main_thread():  # signal handlers can only be set there
        before = {sig: signal.signal(sig, forward) for sig in stops}
    try:
        while True:
            try:
                code = child.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                if deadline and time.monotonic() > deadline[0]:
                    child.kill()
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
        if child.poll() is None:  # vitlab itself is stopping (an exception here): never leave the server behind
            child.kill()
            child.wait()
    return 128 - code if code < 0 else code  # killed by signal N: the shell's 128 + N

