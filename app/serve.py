"""vitlab's app with a warm start: ``streamlit run app/serve.py`` (same flags as for ``app/Home.py``).

The same app as ``streamlit run app/Home.py``; in addition, the moment the server starts (before any browser
connects), a background thread imports torch, timm, scipy and the engine and loads the default models
(``lab.warm_up``), so that the first page of a restarted server does not wait ~5-20 s for them (issue 34).
Streamlit runs this file as an ASGI app (``st.App``) and ``Home.py`` as the script of every session.
"""

import sys
from contextlib import asynccontextmanager
from pathlib import Path

import streamlit as st

APP = Path(__file__).resolve().parent


@asynccontextmanager
async def lifespan(_app):
    for p in (str(APP.parent), str(APP)):
        if p not in sys.path:
            sys.path.insert(0, p)
    import lab

    lab.warm_up()  # a daemon thread: the server answers at once, and warms while nobody is looking
    yield


app = st.App(str(APP / "Home.py"), lifespan=lifespan)
