"""vitlab's Streamlit app (``vitlab app``). A package only so that the wheel carries it as ``vitlab._app`` and an
editable install maps that name onto this folder (setup.py, vitlab.resources); its pages import ``lab`` from here."""
