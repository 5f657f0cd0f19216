"""Localization (Raghu et al. 2021, Sec. 5, Figs 9-10): how well each token of a layer keeps the information of
its own input patch (linear CKA over images between the token and the patch at every position), CLS vs GAP
models; and, for one token on an image of your own, which pixels it carries (its gradient map) and where it
attends, beside its CKA map from a reference set (vitlab.token_localization)."""

import hashlib
from pathlib import Path

import claim
import lab
import streamlit as st

import vitlab
from vitlab import activations, localization
from vitlab import token_localization as tl
from vitlab.charts import localization as charts
from vitlab.charts.words import data_in_sentence, layer_in_words, wrap_name


def reference_ui() -> tl.ReferenceOptions:
    """The reference set: a dataset or folder, and how many of its images."""
    with st.expander(f"Reference set (used when fewer than {tl.MIN_IMAGES} images are given)", expanded=False):
        c1, c2 = st.columns([2, 1])
        choice = c1.selectbox("Reference set", list(tl.REFERENCES) + ["folder"], key="loc.ref",
                              format_func=lambda k: lab.SOURCES.get(k, "A folder of images…"))
        if choice == "folder":
            choice = st.text_input("Reference folder", key="loc.ref.folder", placeholder="/path/to/images",
                                   help=lab.pickers.folders_help()).strip()
            try:  # said where it was typed (the set is opened only when needed); the sidebar's rules
                if choice:
                    vitlab.folders.check_folder(choice)
            except vitlab.VitlabError as e:
                st.error(lab.md_plain(str(e)))
        n = c2.number_input("Reference images", tl.MIN_IMAGES, 100_000, 256, step=64, key="loc.ref.images")
    return tl.ReferenceOptions(choice, int(n))


def your_images_ui(s, src):
    """(images, count given, name) for the one-token view: a page upload, else the sidebar's images."""
    ups = st.file_uploader("Your images (or the sidebar's images)", key="loc.upload", accept_multiple_files=True,
                           type=[x.lstrip(".") for x in vitlab.data.IMAGE_SUFFIXES])
    if ups:
        given = tuple((u.name, u.getvalue()) for u in ups)
        lab.upload_problems_ui(given)  # skipped uploads and decode notes (first frame used, ...) of this view's own
        return list(given), len(ups), "your uploads"
    return src, min(s.images, len(src)), src.name


def more_images_words(s, available: int, ref: tl.ReferenceOptions) -> str:
    """The words above the page when it measures more images than the sidebar's: how many and why, that the checks
    run on them too, and what the person can change."""
    chose = (f"the {s.images} you chose" if available >= s.images
             else f"the {available} the sidebar's images give ({s.images} chosen)")
    return (f"**This page runs on {ref.images} images, more than {chose}.** Localization is a statistic over a data "
            f"set: it needs at least {tl.MIN_IMAGES} images (an interval over {tl.MIN_BATCHES} batches), so the maps "
            f"below and the Fig 9 and Fig 10 checks above them are measured on {ref.images} images of the reference "
            f"set, {lab.md_plain(data_in_sentence(ref.source))}. To measure your own images, choose at least "
            f"{tl.MIN_IMAGES} in the sidebar; for a quicker run, set Reference images (under Reference set) to "
            f"{tl.MIN_IMAGES}.")


def early_rates(rep, key: str, batch_size: int) -> None:
    """A running estimate of the rate chart, with its bars once there are batches enough for them."""
    lab.chart(charts.localization_rate_chart(rep.rates(), bars=rep.interval_caption(batch_size)), key=f"loc.{key}")


def token_state(grid: tuple[int, int]) -> tuple[int, int]:
    """The chosen token, kept in session keys 'loc.row'/'loc.col' (the number inputs', which the two clickable charts
    move). A view starts on the centre token, and again when the grid changes size (another model); a token it
    starts with (a link's) is kept when it lies on the grid."""
    previous = st.session_state.get("loc.grid")
    if previous != grid:
        row, col = st.session_state.get("loc.row"), st.session_state.get("loc.col")
        on_grid = isinstance(row, int) and isinstance(col, int) and 0 <= row < grid[0] and 0 <= col < grid[1]
        if previous is not None or not on_grid:
            st.session_state["loc.row"], st.session_state["loc.col"] = tl.centre_token(grid)
        st.session_state["loc.grid"] = grid
    # a click on the image of the upload view (drawn further down) moves the token before the inputs are drawn
    lab.follow_click("loc.pick", lab.clicked(st.session_state.get("loc.pick"), "pick", ["token_row", "token_col"]),
                     {"token_row": "loc.row", "token_col": "loc.col"})
    return int(st.session_state["loc.row"]), int(st.session_state["loc.col"])


# the upload at most a third of the screen tall (a 917-px portrait pushed the maps a screen down), never wider than its
# column
st.html("<style>.st-key-loc-original [data-testid='stImage'] img {max-height: 33vh; max-width: 100%; width: auto; "
        "height: auto; object-fit: contain}</style>")
st.title("Localization")
notice = st.container()  # which images this page runs on, said before anything runs
lead = st.container()  # the finding, filled from this page's own result
st.caption("Localization is measured over a data set: for each token, the linear CKA over images with the input patch "
           "at every position. On one image, a token's gradient map and attention map say which pixels it carries.")
s = lab.settings()
ref = reference_ui()
compare = st.container(horizontal=True, gap="small")  # each button as wide as its words, wrapped to a new line
compare.button("Compare CLS vs GAP: zoo:vit-cls and zoo:vit-gap (16 tokens)", key="loc.clsgap",
               on_click=lab.set_models, args=("zoo:vit-cls", "zoo:vit-gap"))
compare.button("Compare CLS vs GAP: zoo:vit-cls-14 and zoo:vit-gap-14 (196 tokens, pooling only)", key="loc.clsgap14",
               on_click=lab.set_models, args=("zoo:vit-cls-14", "zoo:vit-gap-14"))
st.caption(f"CLS vs GAP in the zoo: for vit-cls / vit-gap, {vitlab.tour.GAP_CAVEAT}; vit-cls-14 / vit-gap-14 differ "
           "in pooling alone. Chance level of a token's best match is 1/positions, so the chart shows the "
           "chance-corrected rate: grids of different sizes on one scale (Paper tour, Figs 9-10).")
report = data = None
with lab.guard():
    src = lab.source(s)
    data_name, data_images, note = tl.images_for_dataset(min(s.images, len(src)), src.name, ref)
    if note:  # more images than the person chose: said above the lead, before anything runs
        notice.warning(more_images_words(s, len(src), ref))
    data = src if note is None else lab.named_source(ref.source)
    a, b = lab.models(s)
    opts = localization.LocalizationOptions(images=data_images, batch_size=s.batch_size)
    early = lab.running(lambda rep, key: early_rates(rep, key, s.batch_size),
                                   lab.so_far(lambda rep: rep.images, data_images))
    report = lab.compute(("loc", s.key, data_name, data_images),
                         lambda run: localization.localization([a, b], data, opts, run), "Localization",
                         expect=localization.LocalizationReport, early=early)

if report is not None:
    st.caption(lab.run_caption(report.info, data_images))
    summary = report.summary()
    rates = report.rates()  # per layer: rate, its 95 % interval, chance level, chance-corrected rate
    rate = charts.localization_rate_chart(rates, bars=report.interval_caption(s.batch_size))
    lab.chart(rate, key="loc.rate")
    lab.export(rate, rates, "localization_rate", "loc.rate")
    # the layers each model is drawn at: its first, middle and last block with a grid a map can hold
    unshown = [w for w in dict.fromkeys(localization.undrawable_note(x) for x in (a, b)) if w]
    if unshown:
        st.caption("Blocks without a map: " + " ".join(f"{lab.md_plain(w)}." for w in unshown)
                   + " Each model is drawn at its first, middle and last block that has one.")
    lab.links.box("localization", [s.model_a, s.model_b], opts, "localization_rates", s,
              None if note is None else data_name)

# the tour's checks after the page's rate chart: their lead is drawn at the top, but the chart does not wait for them
rows = {}
with lead, lab.guard():
    # the tour's Figs 9 and 10 on this page's models and images (the reference set when the sidebar has too few)
    for key in ("localization", "gap") if data is not None else ():
        rows[key] = claim.check(key, list(lab.models(s)), data, s, images=data_images)
with lead:
    for key, figure in (("localization", "Fig 9"), ("gap", "Fig 10")):
        claim.lead(rows.get(key), figure)

if report is not None:

    st.subheader("One token")
    c1, c2 = st.columns([1, 1])
    # the options' words do not name the models: the radio keeps its value as the option's words, so "A: zoo:vit-cls"
    # matched no option once a compare button had changed the models, and neither A nor B showed as selected
    slot = c1.radio("Model", ["A", "B"], horizontal=True, key="loc.slot", format_func=lambda k: f"model {k}",
                    captions=[a.label, b.label])
    m = a if slot == "A" else b
    results = [r for r in report.results if r.model == m.label]
    layer = c2.selectbox("Layer", [r.layer for r in results], key="loc.layer", format_func=layer_in_words,
                         help="The first, middle and last block whose grid a map can hold (at most "
                              f"{localization.MAX_POSITIONS:,} positions), counted from 0 as the model's own layer "
                              "names and the CSV's taps count them (block 0 is 'blocks.0.resid_post' of a ViT)")
    result = next(r for r in results if r.layer == layer)
    gh, gw = result.grid
    part = summary[(summary["model"] == m.label) & (summary["layer"] == layer)]
    grid_key = f"loc.grid.{slot}"
    lab.follow_click("loc", lab.clicked(st.session_state.get(grid_key), "tok", ["token_row", "token_col"]),
                     {"token_row": "loc.row", "token_col": "loc.col"})
    row, col = token_state((gh, gw))
    grid_chart = charts.localization_summary_chart(part, cell=max(220, 24 * max(gh, gw)), title="click a token",
                                                   selected=(row, col), select="tok")
    left, right = st.columns([1, 1])
    with left:
        lab.chart(grid_chart, on_select="rerun", key=grid_key)
        lab.export(grid_chart, part, f"localization_{m.label}_{layer}_summary", "loc.grid")
        holes = tl.undefined_note(tl.undefined_positions(result.cka, result.grid), f"every one of the "
                                  f"{report.images} images")
        if holes:
            st.caption(f"Grey cells: {holes}.")
        p1, p2 = st.columns(2)
        row = int(p1.number_input("Token row", 0, gh - 1, key="loc.row"))
        col = int(p2.number_input("Token column", 0, gw - 1, key="loc.col"))
    if report.warnings:
        with st.expander(f"{len(report.warnings)} warning(s) of the run"):
            for w in report.warnings:
                st.caption(lab.md_plain(w, lines=True))
    token = result.prefix + row * gw + col
    frame = result.to_frame()
    shown = ([0] if result.prefix else []) + [token]
    with right, lab.guard():
        # two maps, their legend and title in half the page at 1280 px (a 14 x 14 grid's 168-px maps ran 9 px past it;
        # a long model name on lines of 40 characters)
        maps = charts.localization_maps(frame, tokens=shown, columns=2, cell=min(140, max(120, 12 * max(gh, gw))),
                                        title=["CKA of the token with the patch at each position",
                                               *wrap_name(m.label, 40),
                                               f"{layer_in_words(layer)} (ringed: its own patch)"])
        lab.chart(maps, key="loc.maps")
        lab.export(maps, frame[frame["token"].isin(shown)], f"localization_{m.label}_{layer}_token{token}", "loc.maps")

    st.subheader("This token on your image")
    with lab.guard():
        images, given, given_name = your_images_ui(s, src)
        names = activations.as_source(images)
        ids = [names.item_id(i) for i in range(min(len(names), 50))]
        # which images these are (names and content): the picker's key and the token view's follow them, so a new
        # upload of as many images is neither shown under the previous label nor given the previous maps
        keyed = range(len(names)) if isinstance(images, list) else range(len(ids))  # a source: s.key names it
        content = hashlib.sha1("\0".join(names.item_key(i) for i in keyed).encode()).hexdigest()[:16]
        # a data set's image by its number and class ("image 0 (Ankle boot)"), never its id 'fashion-mnist:10000#0'
        namer = lab.image_name(names)
        pick = st.selectbox("Image", range(len(ids)), key=f"loc.image.{content}", format_func=namer)
        block = tl.block_of_tap(m, layer)
        # the token-independent part (CKA of every token over the reference set) once per block; a token change
        # then reads the image's cached activations and one cached gradient
        measured = lab.compute(("loc.ref", s.key, m.label, block, given_name, given, content, ref),
                               lambda run: tl.reference_for(m, images, block, ref, run, given, given_name,
                                                            lab.named_source(ref.source)), "Reference set")
        view = None if measured is None else lab.compute(
            ("loc.token", s.key, m.label, block, row, col, pick, given_name, given, content, ref),
            lambda run: tl.token_view(m, images, pick, block, row, col, ref, run, given, given_name,
                                      measured=measured), "Token view")
        original = names.load(pick)
        picture = activations.model_view(m, original)
        seen = tl.model_input(m, original)
        c1, c2 = st.columns(2)
        with c1.container(key="loc-original"):
            boxed = charts.original_with_box(original, seen.box)
            st.image(boxed, width="content",
                     caption=f"Your image, {original.width}×{original.height}; outlined: the part the model sees")
            lab.export_image(boxed, None, f"original_{m.label}", "loc.original")
        with c2:
            picker = charts.token_picker_chart(picture, (gh, gw), (row, col), select="pick")
            lab.chart(picker, on_select="rerun", key="loc.pick")
            lab.export(picker, charts.token_picker_frame((gh, gw), (row, col)), f"model_input_{m.label}", "loc.pick")
        st.caption(f"**What the model sees** ({lab.md_plain(m.label)}'s transform): {lab.md_plain(seen.text)}.")
        if view is not None:
            if view.note:
                st.info(lab.md_plain(view.note, lines=True))
            info = view.summary()
            # an upload's name as given (it may hold a '/'); a folder's image by its file name; a data set's by its
            # number and class
            raw = names.item_id(pick)
            name = raw if isinstance(images, list) else namer(pick) if raw.startswith(f"{names.name}#") else \
                Path(raw).name
            # subtitles in short lines: a long one is cut
            where = f"token (row {row}, col {col}) at {layer_in_words(block)}"
            cols = st.columns(3)
            with cols[0]:
                ref_chart = charts.token_map_chart(
                    view.cka_grid(), (gh, gw), (row, col), legend="CKA", scheme="magma", domain=(0, 1),
                    title=["CKA over the reference set,", "not this image"],
                    subtitle=[where, f"vs each patch, {view.reference.images} images"])
                lab.chart(ref_chart, key="loc.refcka")
                st.caption(f"CKA with each patch over {view.reference.images} images of the reference set, "
                           f"{lab.md_plain(data_in_sentence(ref.source if view.note else given_name))} "
                           f"({view.reference.batches} "
                           f"batch{'es' * (view.reference.batches != 1)}): own patch "
                           f"{info['own_cka']:.2f} [{info['own_cka_lo']:.2f}, {info['own_cka_hi']:.2f}] (95 % "
                           "jackknife Fieller over the batches)")
                holes = tl.undefined_note(tl.undefined_positions(view.reference.cka, view.reference.grid),
                                          "every image of the reference set")
                if holes:
                    st.caption(f"Blank: {holes}.")
                lab.export(ref_chart, view.reference.to_frame(), f"reference_cka_{m.label}_{block}_token{row}_{col}",
                           "loc.refcka")
            with cols[1]:
                grad_chart = charts.token_map_chart(
                    view.gradient.map, (gh, gw), (row, col), legend="|∂h/∂x| / max", picture=picture,
                    domain=(0, 1), relative=True, title="Gradient on this image", subtitle=[where, name])
                lab.chart(grad_chart, key="loc.grad")
                st.caption(f"gradient |∂h/∂x| of token ({row},{col}) at {layer_in_words(block)} on "
                           f"{lab.md_plain(name)}: "
                           f"{info['own_share']:.0%} in its own patch (uniform {info['own_chance']:.0%}), "
                           f"{info['neighbourhood_share']:.0%} in its 3×3 neighbourhood (uniform "
                           f"{info['neighbourhood_chance']:.0%})")
                lab.export(grad_chart, view.gradient.to_frame(), f"gradient_{m.label}_{block}_token{row}_{col}",
                           "loc.grad")
            with cols[2]:
                if view.attention is None:
                    st.info(lab.md_plain(view.attention_note, lines=True))
                else:
                    attn_chart = charts.token_map_chart(
                        view.attention.grid, (gh, gw), (row, col), legend="attention weight", picture=picture,
                        title="Attention on this image", subtitle=[where, "mean over heads"])
                    lab.chart(attn_chart, key="loc.attn")
                    st.caption(f"attention of token ({row},{col}) at {layer_in_words(block)}, mean over heads, on "
                               f"{lab.md_plain(name)}")
                    lab.export(attn_chart, view.attention.to_frame(), f"attention_{m.label}_{block}_token{row}_{col}",
                               "loc.attn")
            for w in view.gradient.warnings:
                st.warning(lab.md_plain(w, lines=True))
