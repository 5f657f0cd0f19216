"""vitlab's Streamlit app: `streamlit run app/Home.py`.

The entrypoint draws the shared sidebar pickers (so their values survive page switches) and hands over to
the chosen page with `st.navigation`. Pages are thin: widgets, one engine call, one chart, export.
"""

import sys
from pathlib import Path

import streamlit as st

APP = Path(__file__).resolve().parent
# `import lab` from the pages (also under AppTest), and `import vitlab` from this checkout
for p in (str(APP.parent), str(APP)):
    if p not in sys.path:
        sys.path.insert(0, p)

import lab

# not "pages/": Streamlit would also discover that folder as a v1 multipage app and could run a page
# without this entrypoint (and without the sidebar)
PAGES = APP / "views"

st.set_page_config(page_title="vitlab", page_icon=":material/biotech:", layout="wide")


def page(file: str, title: str, icon: str, default: bool = False) -> st.Page:
    return st.Page(PAGES / file, title=title, icon=icon, url_path=file.removesuffix(".py"), default=default)


NAV = {
    "vitlab": [page("home.py", "Home", ":material/home:", default=True)],
    "Analyses": [
        page("similarity.py", "Representation similarity", ":material/grid_on:"),
        page("attention.py", "Attention", ":material/visibility:"),
        page("heads.py", "Head subsets", ":material/call_split:"),
        page("receptive.py", "Receptive fields", ":material/filter_center_focus:"),
        page("skips.py", "Skip connections", ":material/alt_route:"),
        page("localization.py", "Localization", ":material/my_location:"),
        page("probes.py", "Linear probes", ":material/linear_scale:"),
        page("checkpoints.py", "Checkpoints", ":material/compare_arrows:"),
        page("models.py", "Many models", ":material/scatter_plot:"),
    ],
    "Cause": [
        page("ablation.py", "Head ablation", ":material/content_cut:"),
        page("attribution.py", "Attribution", ":material/ads_click:"),
        page("token_norms.py", "Token norms", ":material/warning:"),
    ],
    "Presentation": [page("tour.py", "Paper tour", ":material/slideshow:"),
                     page("present.py", "Present the tour", ":material/co_present:")],
}

nav = st.navigation(NAV)
lab.sidebar()
nav.run()
