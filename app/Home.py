"""vitlab's Streamlit app: `vitlab app` (or `streamlit run app/Home.py` from the repository root).

The entrypoint draws the shared sidebar pickers (so their values survive page switches) and hands over to
the chosen page with `st.navigation`. Pages are thin: widgets, one engine call, one chart, export.
"""

import sys
from pathlib import Path

import streamlit as st

APP = Path(__file__).resolve().parent
# `import lab` from the pages (also under AppTest), and `import vitlab` from this checkout; installed (vitlab/_app),
# the folder above is the vitlab package itself, which must not become a folder of top-level modules
for p in (str(APP.parent), str(APP)) if (APP.parent / "vitlab").is_dir() else (str(APP),):
    if p not in sys.path:
        sys.path.insert(0, p)

import lab

lab.runs.own_collection()  # no full collection of the heap after every run, only after one that did work
lab.runs.wait_for_warm_imports()  # a server's first seconds: its warm-up imports, never two threads importing at once
lab.begin_run()  # the clock of the status caption's page time starts with the script run

from vitlab import table

# an emoji favicon is drawn in the browser; a ":material/...:" one is fetched from a font server (FACTS.md). The
# Material icons of the pages come from the font bundled with Streamlit: nothing leaves the machine.
st.set_page_config(page_title="vitlab", page_icon="🔬", layout="wide")
page = lab.page

# every analysis page comes from the table of analyses (vitlab.table); home and the presenter are the app's own
NAV: dict[str, list] = {"vitlab": [page("home", "Home", ":material/home:", default=True)]}
for p in table.pages():
    NAV.setdefault(p.section, []).append(page(p.file, p.title, p.icon, p.url))
NAV.setdefault("Presentation", []).append(page("present", "Present the tour", ":material/co_present:"))
NAV["Presentation"].append(page("lecture", "Lecture", ":material/school:"))  # guided: predict, then reveal

nav = st.navigation(NAV, expanded=True)  # every page listed: collapsed, the sidebar hides all past the tenth
st.session_state["lab.page"] = nav.url_path  # the generic analysis page draws the row of this url
try:
    lab.sidebar()
    nav.run()
    lab.links.finish()  # the view's state into the URL, after every widget of the page is drawn (app/lab/links.py)
finally:  # a rerun or a stop ends the script here too
    lab.runs.end_run()
# once per process, after the first page is drawn (not competing with it for 2 cores): heavy imports and the default
# models for the pages to come (issue 34); `streamlit run app/serve.py` starts it with the server instead
lab.warm_up()
