"""Links that reopen a view, and the code behind it (issue 41).

A view's state lives in the URL query: the sidebar's choices (``a``, ``b``, ``data``, ``n``, ``bs``, ``device``) and
every widget the page drew (by its key: ``skips.value=cosine``, ``att.head=3``). :func:`read_link` (the sidebar, first
thing on every run) reads the query once per browser session, checks it as untrusted input and seeds the sidebar's
plain state; :func:`box` (each analysis page, once) seeds the page's widgets from the link, writes the current state
back into the URL, and shows the link with the ``vitlab`` command and the Python call that recompute the page's CSV
(``vitlab.cli.recipe``: the app has no logic of its own for them).

A link's value is never trusted: the sidebar's values are checked against what the sidebar allows (the model
pickers' text, the image sources, a folder as an absolute path without '..', the number boxes' ranges, the devices);
a page's value is taken only for a widget this page draws, converted to the type that widget holds, and never for a
button or an upload. Anything else is named in an error above the page and left at its default.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import urllib.parse
from typing import Any

import streamlit as st

import vitlab
from vitlab.cli import recipe

from . import runs
from .state import DEFAULTS, DEVICES, ENV_INTS, SOURCES, UPLOADS, Settings, settings
from .text import md_plain

SIDEBAR = {"a": "model_a", "b": "model_b", "data": "source", "n": "images", "bs": "batch_size", "device": "device"}
KEY = re.compile(r"[A-Za-z][A-Za-z0-9_.\-]{0,79}")
MAX_KEYS, MAX_VALUE, MAX_ITEMS = 48, 1000, 256
# no setting of vitlab holds these; in a message shown as Markdown they could open a link, an image or an HTML tag
UNSAFE = frozenset("`<>[]")
# what a link may choose by itself besides zoo and loaded models (the bundled images); the rest it proposes
BUNDLED = ("fashion-mnist:test", "samples")
# page widgets that hold model specs (a link's new entries load models): at most this many, costly ones proposed
MODEL_LISTS = ("lens.models", "mm.models")
MAX_LINKED_MODELS = 8
FOLDER_KEYS = ("loc.ref.folder",)  # page widgets that hold a folder to read
# page widgets whose choices load models (key -> choice -> specs), declared by the page (:func:`costly`)
_COSTLY: dict[str, dict[Any, list[str]]] = {}
PASSES = 3  # reruns a link may take to reach widgets drawn only after others (a layer once its model ran)
NOT_VIEW = ("w.", "lab.", "share.", "dl.")  # the sidebar's widgets (linked by SIDEBAR), internals, downloads
NO_LINK = {"trigger_value", "string_trigger_value", "json_trigger_value", "file_uploader_state_value",
           "chat_input_value"}
# the Python type each view key's widget holds, learned from every session that drew it: a link opened later on
# the same server seeds those widgets before the page's first run, so the linked view is the first one computed
_KINDS: dict[str, str] = {}


def _errors() -> list[str]:
    return st.session_state.setdefault("share.errors", [])


# ------------------------------------------------------------------------------------------- reading a link


def _text(name: str, value: str) -> str:
    if len(value) > MAX_VALUE or any(ord(c) < 32 for c in value):
        raise ValueError(f"'{name}' in the link is longer than {MAX_VALUE} characters or holds control characters")
    if UNSAFE & set(value):
        raise ValueError(f"'{name}' in the link holds one of ` < > [ ], which no setting of vitlab holds")
    return value.strip()


def shown(text: str) -> str:
    """``text`` shown as written, never rendered (the app's one escaping function, ``show.md_plain``)."""
    return md_plain(text)


def _sidebar_value(name: str, raw: str) -> Any:
    """A sidebar choice from the link, checked as the sidebar's own widgets would check it."""
    text = _text(name, raw)
    if name in ("a", "b"):
        return text  # any spec the pickers accept as typed text; loading it says what is wrong with it
    if name == "data":
        if text == UPLOADS:
            raise ValueError("the link was made with uploaded images, which a link cannot carry: upload them again")
        if text in SOURCES:
            return text
        if not text.startswith("/") or ".." in text.replace("\\", "/").split("/"):
            raise ValueError(f"data={text!r} in the link is neither one of {', '.join(k for k in SOURCES)} nor "
                             f"the absolute path of a folder (without '..')")
        return text
    if name == "device":
        if text not in DEVICES:
            raise ValueError(f"device={text!r} in the link is not one of {', '.join(DEVICES)}")
        return text
    _, default, lo, hi = ENV_INTS[SIDEBAR[name]]
    if not re.fullmatch(r"\d{1,9}", text) or not lo <= int(text) <= hi:
        raise ValueError(f"{name}={text[:40]!r} in the link is not a whole number from {lo} to {hi}")
    return int(text)


def _convert(kind: str, raw: str) -> Any:
    """A link's text as the type ``kind`` a widget holds; ValueError when it is not one."""
    if kind == "bool":
        if raw not in ("true", "false"):
            raise ValueError("true or false")
        return raw == "true"
    if kind == "int":
        if not re.fullmatch(r"-?\d{1,9}", raw):
            raise ValueError("a whole number")
        return int(raw)
    if kind == "float":
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise ValueError("a finite number")
        return value
    if kind == "list":
        try:
            items = json.loads(raw)
        except ValueError:
            items = None
        if not isinstance(items, list) or len(items) > MAX_ITEMS or not all(
                isinstance(x, (int, float)) and not isinstance(x, bool) or isinstance(x, str) and not UNSAFE & set(x)
                for x in items):
            raise ValueError(f"a JSON list of at most {MAX_ITEMS} names (without ` < > [ ]) or numbers")
        return items
    if UNSAFE & set(raw) or any(ord(c) < 32 for c in raw):
        raise ValueError("text without ` < > [ ] or control characters")
    return raw


def _kind(value: Any) -> str | None:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float, str)):
        return type(value).__name__
    if isinstance(value, list) and all(isinstance(x, (str, int, float)) and not isinstance(x, bool) for x in value):
        return "list"
    return None


def _encode(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value) if isinstance(value, list) else str(value)


def read_link() -> None:
    """Once per browser session, before the sidebar draws: take the sidebar's choices from the URL and keep the
    page's for :func:`finish`; then, on every run, seed what a link asked for and name what it could not take."""
    if "share.read" not in st.session_state:
        st.session_state["share.read"] = True
        st.session_state["share.page"] = st.session_state.get("lab.page")
        _read(dict(st.query_params))
    for key, value in st.session_state.pop("share.seed", {}).items():
        st.session_state[key] = value
    _seed_known()
    top = st.container()  # above the page: what a link could not take, named by :func:`finish` too
    st.session_state["share.run"] = {"top": top, "link": None, "shown": len(_errors())}
    if st.session_state.get("lab.page") == st.session_state.get("share.page"):  # on the linked page only
        for problem in _errors():
            top.error(f"Link: {shown(problem)}")


def _read(params: dict[str, str]) -> None:
    if len(params) > MAX_KEYS:
        _errors().append(f"the link has {len(params)} settings, more than {MAX_KEYS}: it was ignored")
        return
    pending = {}
    for name, raw in params.items():
        if name in SIDEBAR:
            try:
                value = _sidebar_value(name, raw)
                if not _proposed(name, value):
                    st.session_state[f"lab.{SIDEBAR[name]}"] = value
            except ValueError as e:
                _errors().append(f"{e}; the sidebar keeps its default")
        elif not KEY.fullmatch(name) or name.startswith(NOT_VIEW):
            _errors().append(f"'{name[:40]}' is not a setting of vitlab's pages; it was ignored")
        elif len(raw) > MAX_VALUE:
            _errors().append(f"the value of '{name}' is longer than {MAX_VALUE} characters; it was ignored")
        else:
            pending[name] = raw
    st.session_state["share.pending"] = {"keys": pending, "passes": 0}


def _take(key: str, kind: str, raw: str, seeds: dict) -> None:
    try:
        value = _convert(kind, raw)
        if key in MODEL_LISTS:
            value = _linked_models(key, value)
        elif key in FOLDER_KEYS and value:
            value = _linked_folder(key, value)
        elif not isinstance(value, list) and value in _COSTLY.get(key, {}):
            value = _linked_choice(key, value)
    except ValueError as e:
        _errors().append(f"{key}={raw[:40]!r} is not {e}; the page keeps its default")
        return
    if value is not None:
        seeds[key] = value
        _linked()[key] = {"raw": raw[:40], "value": value, "runs": 0}


# ------------------------------------------------------------------ what a link may choose, and what it proposes


def _proposals() -> dict[str, dict]:
    return st.session_state.setdefault("share.proposals", {})


def _linked() -> dict[str, dict]:
    """The page's widgets seeded from the link, until the page has drawn them: a value the widget did not keep
    (out of range, not an option) is named by :func:`finish`."""
    return st.session_state.setdefault("share.linked", {})


def cheap_model(spec: str) -> bool:
    """Whether a link may choose ``spec`` by itself (DESIGN.md, Trust): a zoo model or its untrained twin (each a few
    MiB), the server's own default, or a model already loaded on this server. VitlabError when it is no model spec."""
    if spec in (DEFAULTS["model_a"], DEFAULTS["model_b"]):
        return True
    ms = vitlab.models.parse_spec(spec)
    if ms.weights == "zoo" or ms.weights.startswith("zoo@"):
        return True
    return any(k[0] == spec for k in runs._loaded_registry())


def _propose(target: str, what: str, value: str, keys: dict[str, Any], cost: tuple[str, bool], reseed=()) -> None:
    _proposals()[target] = {"what": what, "value": value, "keys": keys, "cost": cost[0], "fits": cost[1],
                            "reseed": tuple(reseed)}


def _proposed(name: str, value: Any) -> bool:
    """Propose a sidebar choice of the link that costs memory, network or a folder (True), instead of taking it."""
    slot = SIDEBAR[name]
    if name in ("a", "b"):
        try:
            if cheap_model(value):
                return False
            cost = runs.model_cost(value)
        except vitlab.VitlabError as e:
            raise ValueError(f"model {name.upper()} {value!r} in the link cannot be used: {e}") from None
        reseed = [f"w.{slot}.{part}" for part in ("kind", "text", "arch", "path")]
        _propose(slot, f"model {name.upper()}", value, {f"lab.{slot}": value}, cost, reseed)
        return True
    if name == "data" and value not in BUNDLED and value != DEFAULTS["source"]:
        try:
            cost = runs.source_cost(value)
        except vitlab.VitlabError as e:
            raise ValueError(f"data={value!r} in the link cannot be used: {e}") from None
        _propose(slot, "images", value, {"lab.source": value, "lab.folder": ""}, cost, ("w.source", "w.folder"))
        return True
    return False


def _costs(specs: list, what: str) -> list[tuple[str, tuple[str, bool]]]:
    """The models of ``specs`` a link may not load by itself, each with its cost (:func:`runs.model_cost`)."""
    costly = []
    for spec in specs:
        if not isinstance(spec, str):
            raise ValueError("a list of model names")
        try:
            if not cheap_model(spec):
                costly.append((spec, runs.model_cost(spec)))
        except vitlab.VitlabError as e:
            raise ValueError(f"{what} ({spec!r}: {e})") from None
    return costly


def _propose_models(key: str, what: str, costly: list[tuple[str, tuple[str, bool]]], value: Any) -> None:
    _propose(key, what, ", ".join(spec for spec, _ in costly), {key: value},
             ("; ".join(f"{spec}: {words}" for spec, (words, _) in costly), all(fits for _, (_, fits) in costly)))


def _linked_models(key: str, specs: list) -> list | None:
    """A page's model list from a link: the cheap models taken, the rest proposed (None: the page keeps its own)."""
    if len(specs) > MAX_LINKED_MODELS:
        raise ValueError(f"a list of at most {MAX_LINKED_MODELS} models (it has {len(specs)})")
    costly = _costs(specs, "a list of models that can be loaded")
    if costly:
        n = len(costly)
        _propose_models(key, f"{n} more model{'s' * (n > 1)} on this page", costly, list(specs))
    named = {spec for spec, _ in costly}
    return [spec for spec in specs if spec not in named] or None


def costly(key: str, choices: dict[Any, list[str]]) -> None:
    """A page declares the choices of its widget ``key`` that load models (a preset of hub checkpoints): from a
    link, such a choice is proposed with their cost unless every model is cheap (:func:`cheap_model`)."""
    _COSTLY[key] = choices


def _linked_choice(key: str, value: Any) -> Any | None:
    costly = _costs(_COSTLY[key][value], "a choice whose models can be loaded")
    if not costly:
        return value
    n = len(costly)
    _propose_models(key, f"{key}={value}, which loads {n} model{'s' * (n > 1)}", costly, value)
    return None


def _linked_folder(key: str, folder: str) -> None:
    """A folder typed into a page's box by a link: proposed (read only on the person's click), never taken."""
    try:
        where = vitlab.folders.check_folder(folder)
    except vitlab.VitlabError as e:
        raise ValueError(f"a folder this server may read ({e})") from None
    _propose(key, "a folder of images on this page", folder, {key: folder},
             (f"the images of the folder {where} on this server", True))
    return None


def waiting() -> list[str]:
    """What a link proposes on this page that the person may still take (each proposal that fits, in words): while
    any is open, the page computes nothing (:func:`runs.compute`), so that neither the page's own choice (a zoo model
    that the link would replace, minutes of work on a real-size page) nor half of the link's (model A taken, model
    B still asked for) runs before the person chooses."""
    if st.session_state.get("lab.page") != st.session_state.get("share.page"):
        return []  # the proposals are drawn on the linked page only; elsewhere the page keeps its own choice
    return [p["what"] for p in _proposals().values() if p["fits"]]


def _accept_all() -> None:
    for target in [t for t, p in _proposals().items() if p["fits"]]:
        _accept(target)


def _accept(target: str) -> None:
    """The person's click on a proposal: the link's choice is taken (a button callback, before the page draws)."""
    proposal = _proposals().pop(target, None)
    if proposal is None:
        return
    for key in proposal["reseed"]:
        st.session_state.pop(key, None)
    st.session_state.update(proposal["keys"])


def _dismiss(target: str) -> None:
    _proposals().pop(target, None)


def proposals_ui(where) -> None:
    """What the link asks for and has not done: each with its cost, done only by the person's click (one box, a line
    each, so that the page stays in view)."""
    proposals = _proposals()
    if not proposals:
        return
    box = where.container(border=True)
    box.caption("Nothing a link asks for is loaded, downloaded or read until you choose it: \"Use it\" takes it, "
                "\"Dismiss\" keeps the page's own choice. The page runs once the choices are made.")
    if len(waiting()) > 1:
        words, use, _ = box.columns([7, 1, 1], vertical_alignment="center")  # under each "Use it"
        words.markdown("This page computes nothing until every choice below is made.")
        use.button("Use all", key="share.accept.all", on_click=_accept_all, type="primary")
    for target, p in list(proposals.items()):
        words, use, drop = box.columns([7, 1, 1], vertical_alignment="center")
        refused = "" if p["fits"] else "  \nIt cannot be loaded on this server; the page keeps its own choice."
        words.markdown(f"**The link asks for {p['what']}:** {shown(p['value'])}  \n{shown(p['cost'])}{refused}")
        if p["fits"]:
            use.button("Use it", key=f"share.accept.{target}", on_click=_accept, args=(target,), type="primary")
        drop.button("Dismiss", key=f"share.dismiss.{target}", on_click=_dismiss, args=(target,))


def _seed_known() -> None:
    """Seed, before the page draws, the widgets whose type this server has seen (:data:`_KINDS`)."""
    pending = st.session_state.get("share.pending")
    if not pending or pending["passes"]:
        return
    for key in [k for k in pending["keys"] if k in _KINDS]:
        seeds: dict = {}
        _take(key, _KINDS[key], pending["keys"].pop(key), seeds)
        st.session_state.update(seeds)


# ---------------------------------------------------------------------------------------- a page's state


def view_state() -> dict[str, Any]:
    """This run's linkable widgets, key -> value: drawn in this run, not the sidebar's, not a button or an upload,
    holding a plain value (a number, a name, a switch, a list of them)."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    try:  # Streamlit's widget registry (1.67): which keys are widgets drawn now, and what kind each one is
        state = ctx.session_state._state
        drawn = ctx.shared.widget_ids_this_run  # a set that answers `in` only
        meta = state._new_widget_state.widget_metadata
        ids = {k: state._key_id_mapper.get_id_from_key(k, None) for k in st.session_state}
    except AttributeError:
        return {}
    out = {}
    for key in sorted(k for k, i in ids.items() if i in drawn):
        md = meta.get(ids.get(key))
        if md is None or md.value_type in NO_LINK or key.startswith(NOT_VIEW) or not KEY.fullmatch(key):
            continue
        value = st.session_state.get(key)
        if _kind(value) is not None:
            out[key] = value
    return out


def follow_drawn() -> None:
    """Before a page's run (``runs.compute``): seed the widgets drawn so far from a link's pending keys and rerun, so
    that the link's view is the first one computed, not the defaults it would replace (which can take minutes on a
    real-size model) on a server that has not yet drawn this page (:func:`_seed_known` knows only the widgets of
    pages drawn before). Keys of widgets drawn later stay pending for :func:`finish`."""
    pending = st.session_state.get("share.pending")
    if not pending or not pending["keys"] or pending["passes"] >= PASSES:
        return
    view = view_state()
    seeds: dict = {}
    for key in [k for k in pending["keys"] if k in view]:
        _take(key, _kind(view[key]), pending["keys"].pop(key), seeds)
    seeds = {k: v for k, v in seeds.items() if v != view[k]}
    if seeds:
        pending["passes"] += 1
        st.session_state["share.seed"] = seeds
        st.rerun()


def _follow(view: dict[str, Any]) -> None:
    """Seed the page's widgets from a link's pending keys (a rerun draws them with the link's values)."""
    pending = st.session_state.get("share.pending")
    if not pending or not pending["keys"]:
        return
    seeds: dict = {}
    for key in [k for k in pending["keys"] if k in view]:
        raw = pending["keys"].pop(key)
        _take(key, _kind(view[key]), raw, seeds)
    seeds = {k: v for k, v in seeds.items() if v != view[k]}
    pending["passes"] += 1
    if not seeds or pending["passes"] >= PASSES:
        for key in pending["keys"]:
            _errors().append(f"this page has no setting '{key}'; it was ignored")
        pending["keys"].clear()
    if seeds and pending["passes"] <= PASSES:
        st.session_state["share.seed"] = seeds
        st.rerun()


def _kept(view: dict[str, Any]) -> None:
    """Name each linked value its widget did not keep (a block past the model's depth, an option the page does not
    offer): the page shows another view than the link's, and says which."""
    linked = _linked()
    for key in list(linked):
        entry = linked[key]
        if key in view:
            if view[key] != entry["value"]:
                _errors().append(f"{key}={entry['raw']!r} is not one of this page's choices here; it shows "
                                 f"{_encode(view[key])[:40]!r} instead")
            del linked[key]
        else:
            entry["runs"] += 1
            if entry["runs"] > PASSES + 1:  # drawn only after a result this session has not reached
                del linked[key]


def state(s: Settings, view: dict[str, Any]) -> dict[str, str]:
    """The URL query of this view: the sidebar's choices and the page's widgets."""
    params = {k: str(getattr(s, v)) for k, v in SIDEBAR.items()}
    params.update({k: _encode(v) for k, v in view.items()})
    return params


def link(params: dict[str, str]) -> str:
    """The full URL of this page with ``params``: the browser's own address of the page (``st.context.url``, which
    Streamlit gives with the current page's path), or localhost under test."""
    here = st.context.url
    if not here:
        page = st.session_state.get("lab.page") or ""
        here = f"http://localhost:8501/{page}"
    parts = urllib.parse.urlsplit(here)
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path or "/", urllib.parse.urlencode(params),
                                    ""))


def own(params: dict[str, str]) -> None:
    """This run's page keeps its own state in the URL instead of the sidebar's and its widgets' (the Lecture page: a
    student's place on the path, which the page signs and checks itself): :func:`finish` writes ``params`` alone."""
    st.session_state.setdefault("share.run", {})["own"] = dict(params)


def take_own(names: tuple[str, ...]) -> dict[str, str]:
    """The link's raw values of the page's own ``names`` (:func:`own`), taken on the run that read the link (a fresh
    browser session: a reload or a reopened link), so that no widget follows them; the page checks them itself."""
    keys = (st.session_state.get("share.pending") or {}).get("keys") or {}
    return {n: keys.pop(n) for n in names if n in keys}


def finish() -> None:
    """After the page (the entrypoint calls it): follow a link's pending keys on the widgets the page drew, put the
    view's state in the URL (only when it changed), and fill the page's link box with it."""
    s = settings()
    run = st.session_state.get("share.run") or {}
    owned = run.get("own")
    view = view_state() if owned is None else {}
    for key, value in view.items():
        _KINDS[key] = _kind(value)
    _kept(view)
    _follow(view)
    params = state(s, view) if owned is None else owned
    if {k: st.query_params.get(k) for k in st.query_params} != params:
        st.query_params.from_dict(params)
    if run.get("link") is not None:
        run["link"].code(link(params), language=None, wrap_lines=True)
    for problem in _errors()[run.get("shown", 0):]:
        if run.get("top") is not None:
            run["top"].error(f"Link: {shown(problem)}")
    if run.get("top") is not None and st.session_state.get("lab.page") == st.session_state.get("share.page"):
        proposals_ui(run["top"])  # above the page, after it drew: its own widgets' proposals are made while it draws


# ---------------------------------------------------------------------------------------------- the box


def box(analysis: str, models: list, opts, table: str, s: Settings | None = None, data: str | None = None,
        rows: dict[str, Any] | None = None, **changes) -> None:
    """The page's link, and the ``vitlab`` command and Python call that recompute its CSV ``table`` (a key of
    the row's tables) from ``analysis`` (a row name) on ``models`` (specs; (A, B) pairs for a 'pairs' row) and
    ``data`` (default: the sidebar's images; '' when the page's images have no name a command takes), with
    ``opts`` changed by ``changes`` (what the page holds beside its options, e.g. the image it shows). ``rows``
    (column -> value): the page shows only the CSV's rows with these values (one heatmap of several), said in words."""
    s = s or settings()
    data = s.source if data is None else data
    opts = dataclasses.replace(opts, **changes) if changes else opts
    row = vitlab.ANALYSES[analysis]
    with st.expander("Link and code: reopen or recompute this view", icon=":material/link:"):
        st.caption(link_words(s))
        st.session_state.setdefault("share.run", {})["link"] = st.empty()  # filled by finish(): every widget drawn
        try:
            command = recipe.command_line(row, models, data, opts, s.device)
            python = recipe.python_call(row, models, data, opts, table, s.device)
        except vitlab.VitlabError as e:
            st.info(str(e))
            return
        st.caption(table_words(recipe.table_file(row, table), rows))
        st.code(command, language="bash", wrap_lines=True)
        st.caption(f"The same on vitlab's Python API, writing `{table}.csv`:")
        st.code(python, language="python")


def link_words(s: Settings) -> str:
    """What the link carries, and what it reads when opened elsewhere (uploads do not travel with it)."""
    if s.source == UPLOADS:
        return ("Link to this view (models and the page's choices, not your uploaded images: a link cannot carry "
                "them, so opened elsewhere it asks for them to be uploaded again and computes on those). Copy it "
                "with the icon at its right.")
    return ("Link to this view (models, images and the page's choices; opened elsewhere, it reads the same results "
            "from this server's cache). Copy it with the icon at its right.")


def table_words(file: str, rows: dict[str, Any] | None) -> str:
    """The caption over the command: the CSV ``file`` it writes, as this page's table or, when the page shows a part
    of it (``rows``: column -> value), which of its rows the page shows."""
    if not rows:
        return f"The command that writes this page's table as `{file}` (and its charts, run.json):"
    where = " and ".join(f"{column} = {md_plain(str(value))}" for column, value in rows.items())
    return f"The command below writes `{file}` (and its charts, run.json); this view shows its rows with {where}:"
