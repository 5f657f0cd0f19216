"""The sidebar: model and image pickers, uploads and their problems, the cache status, and the page clock."""

from __future__ import annotations

import hashlib

import streamlit as st

import vitlab
from vitlab.resources import describe

from . import links
from .runs import _loaded_registry, loaded_bytes, store, weights_status
from .show import md_plain
from .state import (
    CHECKPOINT,
    DEVICES,
    FOLDER,
    OTHER,
    SOURCES,
    UPLOADS,
    VIEWS,
    Settings,
    _plain,
    _seed,
    env_settings,
    settings,
)


def page(file: str, title: str, icon: str, url: str | None = None, default: bool = False) -> st.Page:
    """A navigation page: ``views/<file>.py`` at ``url`` (the generic analysis page serves several urls)."""
    return st.Page(VIEWS / f"{file}.py", title=title, icon=icon, url_path=url or file, default=default)


def zoo_specs() -> list[str]:
    from vitlab import zoo

    return [f"zoo:{n}" for n in zoo.names()]


def model_choices() -> list[str]:
    return zoo_specs() + list(vitlab.PAPER_MODELS) + [OTHER, CHECKPOINT]


def _describe_choice(choice: str) -> str:
    if choice in vitlab.PAPER_MODELS:
        return f"{choice}  ({vitlab.PAPER_MODELS[choice]})"
    return choice


def _is_checkpoint(spec: str) -> bool:
    _, _, weights = spec.partition("@")
    return weights.lower().endswith(vitlab.models.CHECKPOINT_SUFFIXES)


def model_picker(slot: str, label: str) -> str:
    """Zoo model, paper model by friendly name, any timm name (``NAME[@random]``), or a checkpoint file."""
    spec = _plain(slot)
    choices = model_choices()
    kind_default = spec if spec in choices else (CHECKPOINT if _is_checkpoint(spec) else OTHER)
    kind = st.selectbox(label, choices, key=_seed(f"w.{slot}.kind", kind_default), format_func=_describe_choice)
    if kind == OTHER:
        text = st.text_input(f"{label}: timm name", key=_seed(f"w.{slot}.text", "" if spec in choices else spec),
                             placeholder="vit_small_patch16_224.augreg_in21k, test_vit@random",
                             help="Any timm model name, optionally @random[:SEED] for random weights")
        spec = text.strip()
    elif kind == CHECKPOINT:
        arch0, _, path0 = spec.partition("@") if _is_checkpoint(spec) else ("", "", "")
        arch = st.text_input(f"{label}: architecture", key=_seed(f"w.{slot}.arch", arch0),
                             placeholder="vit_base_patch16_224")
        path = st.text_input(f"{label}: checkpoint file", key=_seed(f"w.{slot}.path", path0),
                             placeholder="/path/to/weights.safetensors")
        spec = f"{arch.strip()}@{path.strip()}" if arch.strip() and path.strip() else ""
    else:
        spec = kind
    st.session_state[f"lab.{slot}"] = spec
    return spec


def source_picker() -> str:
    source = _plain("source")
    choice_default = source if source in SOURCES else FOLDER
    choice = st.selectbox("Images", list(SOURCES), key=_seed("w.source", choice_default), format_func=SOURCES.get)
    if choice == FOLDER:
        seed = _plain("folder") or ("" if source in SOURCES else source)
        folder = st.text_input("Folder", key=_seed("w.folder", seed),
                               placeholder="/path/to/images (sub-folders = classes)", help=folders_help())
        st.session_state["lab.folder"] = folder.strip()
        source = folder.strip()
        # a folder is listed once and again when one of its folders changes; a file rewritten in place needs this
        st.button("Reload folder", key="w.folder.reload", on_click=vitlab.folders.forget,
                  help="List the folder again now (new, removed and renamed files are seen without it)")
    elif choice == UPLOADS:
        files = st.file_uploader("Upload images", type=[s.lstrip(".") for s in vitlab.data.IMAGE_SUFFIXES],
                                 accept_multiple_files=True, key="w.uploads")
        # an emptied uploader empties the source: removed files must not linger in later results
        st.session_state["lab.uploads"] = tuple((f.name, f.getvalue()) for f in files or ())
        upload_problems_ui(st.session_state["lab.uploads"])
        source = UPLOADS
    else:
        source = choice
    st.session_state["lab.source"] = source
    return source


def folders_help() -> str:
    """A folder box's help: where this server reads folders from (VITLAB_FOLDERS), escaped."""
    roots = ", ".join(str(r) for r in vitlab.folders.allowed_roots()) or "none"
    return md_plain(f"A folder under the folders this server reads ({roots}); VITLAB_FOLDERS names others. "
                    "Not the root of the file system, no '..'.")


def upload_problems_ui(uploads: tuple) -> None:
    """Name every upload that cannot be used, with its reason, as soon as it is uploaded (checked once per content)."""
    if not uploads:
        return
    digest = hashlib.sha256(b"".join(hashlib.sha256(b).digest() for _, b in uploads)).hexdigest()
    memo = st.session_state.setdefault("lab.upload_checks", {})
    if digest not in memo:
        while len(memo) >= 4:  # the sidebar's uploads and a page's own (Localization): both stay checked
            memo.pop(next(iter(memo)))
        with st.spinner(f"Checking {len(uploads)} uploads…"):  # a full decode each, one at a time (memory-bounded)
            memo[digest] = vitlab.data.check_uploads(uploads)
    skipped, notices = memo[digest]
    if skipped:
        st.warning(f"{len(skipped)} of {len(uploads)} uploads cannot be used and are skipped:\n\n"
                   + "\n".join(f"- {md_plain(why)}" for _, why in skipped))
    for name, what in notices:
        st.caption(f"{md_plain(name)}: {md_plain(what)}")


# pages whose settings are their own, not the sidebar's (the Lecture page shows its lecture's): no pickers there;
# their plain state (lab.*) stays, so every other page finds the sidebar as it was left
OWN_SETTINGS = ("lecture",)


def sidebar() -> None:
    """The shared pickers and the status (vitlab's install folder, the models, the disk cache's folder), drawn by
    the entrypoint on every page but :data:`OWN_SETTINGS`."""
    links.read_link()  # a link's settings, before the pickers draw (app/lab/links.py)
    own = st.session_state.get("lab.page") in OWN_SETTINGS
    with st.sidebar:
        if not own:
            pickers_ui()
        for problem in env_settings()[1]:
            st.error(md_plain(problem, lines=True))
        if not own:  # a student's page shows no machine paths or model specs (the page's own lecturer fold has them)
            status_ui()
        st.html(CLOCK, unsafe_allow_javascript=True, width="content")


def pickers_ui() -> None:
    st.subheader("Models")
    model_picker("model_a", "Model A")
    model_picker("model_b", "Model B")
    st.subheader("Data")
    source_picker()
    c1, c2 = st.columns(2)
    images = c1.number_input("Images", 4, 100_000, step=16, key=_seed("w.images", _plain("images")))
    batch = c2.number_input("Batch size", 4, 4096, step=8, key=_seed("w.batch_size", _plain("batch_size")))
    device = st.selectbox("Device", DEVICES, key=_seed("w.device", _plain("device")))
    st.session_state.update({"lab.images": int(images), "lab.batch_size": int(batch), "lab.device": device})


# What the person waits (issue 38): the server's "page ready in" counts only the script's run; this script in the
# browser times from the person's click or key (or the page's opening) to the moment the run has ended and every
# chart is drawn, and adds "shown in X s after your click" to each run caption. Installed once per browser tab.
CLOCK = """<script>(() => {
  if (window.__vitlabClock) return;
  const clock = window.__vitlabClock = {t0: 0, last: 0, pending: true, shown: null};
  const start = () => Object.assign(clock, {t0: performance.now(), pending: true});
  document.addEventListener('click', start, true);
  document.addEventListener('keydown', e => { if (e.key === 'Enter' || e.key.startsWith('Arrow')) start(); }, true);
  // the page's last change (not our own words): the moment the person saw it finished
  new MutationObserver(records => {
    if (records.some(r => !(r.target.closest && r.target.closest('.vitlab-shown')))) clock.last = performance.now();
  }).observe(document.body, {childList: true, subtree: true, characterData: true});
  setInterval(() => {
    const captions = [...document.querySelectorAll('[data-testid="stCaptionContainer"]')]
      .filter(c => c.textContent.includes('batches computed'));
    const busy = document.querySelector('[data-testid="stStatusWidget"]');
    const drawn = [...document.querySelectorAll('[data-testid="stVegaLiteChart"]')]
      .every(c => c.querySelector('canvas, svg.marks'));
    const now = performance.now();
    if (clock.pending && captions.length && !busy && drawn && clock.last > clock.t0 && now - clock.last > 600) {
      clock.pending = false;
      const s = ((clock.last - clock.t0) / 1000).toFixed(1);
      clock.shown = `shown ${s} s after ${clock.t0 ? 'your click' : 'the page opened'}`;
    }
    if (!clock.shown) return;
    captions.forEach(c => {
      const p = c.querySelector('p') || c;
      let span = p.querySelector('.vitlab-shown');
      if (!span) { span = document.createElement('span'); span.className = 'vitlab-shown'; }
      // always the caption's last words: a caption redrawn with other text (another model list) keeps our span where
      // it was, which could be inside a model's name (issue 47)
      if (p.lastChild !== span) p.appendChild(span);
      if (span.textContent !== '; ' + clock.shown) span.textContent = '; ' + clock.shown;
    });
  }, 100);
})();</script>"""


def status_ui() -> None:
    s = settings()
    with st.expander("Status", expanded=False):
        st.caption(md_plain(describe()))  # which vitlab serves this page: its version, where it is installed from
        for slot, spec in (("A", s.model_a), ("B", s.model_b)):
            status = md_plain(weights_status(spec)) if spec else "not chosen"
            st.caption(f"Model {slot} {md_plain(spec or '—')}: {status}")
        loaded = list(_loaded_registry().keys())
        st.caption("Loaded models: " + (md_plain(", ".join(f"{spec} ({device})" for spec, device in loaded))
                                        if loaded else "none yet") + f"; {loaded_bytes() / 2**30:.2f} GiB held")
        info = store().info()
        for w in store().warnings:
            st.warning(md_plain(w, lines=True))
        if info.get("enabled"):
            st.caption(f"Disk cache: {info['entries']} entries, {info['bytes'] / 2**20:.1f} MiB of "
                       f"{info['size_limit'] / 2**30:.0f} GiB in `{info['directory']}`")
        try:
            st.caption(f"Input workers: {vitlab.pipeline.default_workers()} {vitlab.pipeline.default_kind()} decoding "
                       f"and transforming images ahead of the forward ({vitlab.pipeline.cores()} cores; set "
                       f"VITLAB_WORKERS and VITLAB_WORKER_KIND to change)")
        except vitlab.VitlabError as e:  # a bad VITLAB_WORKERS / VITLAB_WORKER_KIND: named here and on each run
            st.error(md_plain(str(e), lines=True))


def model_slot(key: str, s: Settings, prefer: str | None = None) -> str:
    """A/B radio; returns the chosen spec."""
    specs = {"A": s.model_a, "B": s.model_b}
    slot = st.radio("Model", list(specs), horizontal=True, key=key,
                    format_func=lambda k: f"{k}: {md_plain(specs[k] or '—')}")
    return specs[slot]

