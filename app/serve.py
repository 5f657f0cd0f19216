"""vitlab's app with a warm start: ``streamlit run app/serve.py`` (same flags as for ``app/Home.py``).

The same app as ``streamlit run app/Home.py``; in addition, the moment the server starts (before any browser
connects), a background thread imports torch, timm, scipy and the engine and loads the default models
(``lab.warm_up``), so that the first page of a restarted server does not wait ~5-20 s for them (issue 34).
Streamlit runs this file as an ASGI app (``st.App``) and ``Home.py`` as the script of every session. Nothing here
may stop the server: a bad setting (``VITLAB_IMAGES=abc``) is named on the page that uses it (``lab.env_settings``).
"""

import logging
import sys
from contextlib import asynccontextmanager
from pathlib import Path

import streamlit as st

APP = Path(__file__).resolve().parent


@asynccontextmanager
async def lifespan(_app):
    for p in (str(APP.parent), str(APP)) if (APP.parent / "vitlab").is_dir() else (str(APP),):  # as in Home.py
        if p not in sys.path:
            sys.path.insert(0, p)
    try:
        import lab

        lab.warm_up()  # a daemon thread: the server answers at once, and warms while nobody is looking
    except Exception as e:  # noqa: BLE001 - warming is an optimisation: the server starts, the page names the problem
        logging.getLogger("vitlab.serve").warning("warm start skipped: %s: %s", type(e).__name__, e)
    yield


app = st.App(str(APP / "Home.py"), lifespan=lifespan)
