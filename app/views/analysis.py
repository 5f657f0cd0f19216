"""The page of an analysis that has no handwritten page: drawn from its row of the table (vitlab.table):
a widget per option (its defaults and help from the options dataclass), one engine call, the row's charts.

Home.py registers this file once per such row, at the row's url; it tells the page which url is showing."""

import dataclasses

import lab
import streamlit as st

import vitlab
from vitlab import options, table

SIDEBAR_FIELDS = {"images", "batch_size", "shuffle"}  # the sidebar's choices, not the page's


def row() -> table.Analysis:
    url = st.session_state.get("lab.page")
    page = next((p for p in table.pages() if p.url == url and p.file == table.GENERIC_PAGE), None)
    if page is None:  # opened by file (AppTest switch_page): the first row drawn by this page
        page = next(p for p in table.pages() if p.file == table.GENERIC_PAGE)
    return table.ANALYSES[page.rows[0]]


def widget(a: table.Analysis, f: dataclasses.Field):
    """One option's widget, seeded with the dataclass default; returns the value for the options dataclass."""
    key, label, meta, default = f"{a.name}.{f.name}", f.name.replace("_", " "), f.metadata, f.default
    base = str(f.type).split("|")[0].strip()
    if meta.get("choices"):
        return st.selectbox(label, meta["choices"], index=meta["choices"].index(default), key=key, help=meta["help"])
    if base == "bool":
        return st.checkbox(label, value=default, key=key, help=meta["help"])
    if base in ("int", "float") and default is not None:
        return st.number_input(label, value=default, key=key, help=meta["help"], format="%d" if base == "int" else "%g")
    text = st.text_input(label, value="" if default is None else ",".join(map(str, default))
                         if isinstance(default, tuple) else str(default), key=key, help=meta["help"])
    if meta.get("kind") == "ints":
        return options.parse_ints(text, label)
    if meta.get("kind") == "strs":
        return options.parse_strs(text)
    if base in ("int", "float") and text.strip():
        try:
            return (int if base == "int" else float)(text)
        except ValueError:
            raise vitlab.VitlabError(f"{label} must be a number or empty, not '{text}'") from None
    return text if text or default is not None else None


def engine_models(a: table.Analysis, s):
    if a.arity == "one":
        return [lab.model(s.model_a, s.device)]
    pair = list(lab.models(s))
    return [tuple(pair)] if a.arity == "pairs" else pair


a = row()
s = lab.settings()
st.title(a.title)
st.caption(f"{a.help} (`vitlab {a.name}`)" + (f"; {a.figure} of Raghu et al. 2021" if a.figure != "-" else ""))
fields = [f for f in dataclasses.fields(a.options) if f.name not in SIDEBAR_FIELDS]
result = None
with lab.guard():
    cols, values = st.columns(max(1, min(4, len(fields)))), {}
    for i, f in enumerate(fields):
        with cols[i % len(cols)]:
            values[f.name] = widget(a, f)
    sidebar = {k: v for k, v in (("images", s.images), ("batch_size", s.batch_size))
               if k in {f.name for f in dataclasses.fields(a.options)}}
    opts = a.options(**values, **sidebar)
    models = engine_models(a, s)
    src = lab.source(s)
    result = lab.compute((a.name, s.key, opts), lambda run: a.call(models, src, opts, run), a.title)
if result is not None:
    for w in getattr(result, "warnings", []):
        st.warning(lab.md_plain(w, lines=True))
    for line in a.headline(result):
        st.caption(line)
    tables = a.tables(result)
    with lab.guard():
        drawn = a.charts(result, opts)
        for stem, chart in drawn.items():
            data = getattr(chart, "data", None)  # the chart's own rows when it has them, else the row's first table
            lab.chart(chart, key=f"{a.name}.{stem}")
            lab.export(chart, data if hasattr(data, "to_csv") else next(iter(tables.values())), stem,
                       f"{a.name}.{stem}")
        for stem, frame in tables.items() if not drawn else ():
            st.dataframe(frame, hide_index=True)
            st.download_button("CSV", data=frame.to_csv(index=False), file_name=f"{stem}.csv", mime="text/csv",
                               key=f"dl.{a.name}.{stem}.csv")
    lab.links.box(a.name, [s.model_a] if a.arity == "one" else [(s.model_a, s.model_b)] if a.arity == "pairs"
              else [s.model_a, s.model_b], opts, next(iter(tables)), s)
