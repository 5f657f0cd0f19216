"""Home: what vitlab is, the chosen models and images, and what is cached."""

import lab
import streamlit as st

import vitlab
from vitlab import table

st.title("vitlab: do vision transformers see like CNNs?")
st.markdown(
    "A local lab for the analyses of Raghu et al. 2021, "
    "[*Do Vision Transformers See Like Convolutional Neural Networks?*](https://arxiv.org/abs/2108.08810), "
    "on any timm model: representation similarity (CKA), attention distances, receptive fields, skip "
    "connections, spatial localization and linear probes. Each model runs once over the images; every statistic "
    "is cached on disk, so a second visit is instant. Choose **model A**, **model B** and the **images** in the "
    "sidebar; each page compares them."
)

s = lab.settings()
left, right = st.columns(2)
with left:
    st.subheader("Models")
    for slot, spec in (("A", s.model_a), ("B", s.model_b)):
        st.markdown(f"**{slot}**: {lab.md_plain(spec or '—')} · "
                    f"{lab.md_plain(lab.weights_status(spec)) if spec else 'not chosen'}")
    with lab.guard():
        a, b = lab.models(s)
        for m in (a, b):
            st.caption(f"{lab.md_plain(m.label)}: family {m.family}, input "
                       f"{tuple(m.data_config['input_size'])}, {len(vitlab.taps.default_taps(m.model))} CKA taps, "
                       f"device {m.device}, fingerprint {m.fingerprint}")
with right:
    st.subheader("Images")
    with lab.guard():
        src = lab.source(s)
        named = "uploads" if s.source == lab.UPLOADS else lab.SOURCES.get(s.source, lab.md_plain(src.name))
        st.markdown(f"{named}: {len(src)} images"
                    + (f", classes {', '.join(lab.md_plain(c) for c in src.classes[:10])}" if src.classes else "")
                    + f"; the analysis pages use the first {min(s.images, len(src))}, in batches of {s.batch_size} "
                    f"(the Paper tour, its slides and the handout their own first "
                    f"{min(vitlab.tour.TOUR_IMAGES, len(src))}, in batches of {vitlab.tour.TOUR_BATCH}).")
        bad: list = []
        namer = lab.image_name(src)
        index = {src.item_id(i): i for i in range(min(8, len(src)))}
        shown = [(namer(index[name]), img) for name, img in vitlab.data.iter_images(src, list(index.values()), bad, 96)]
        if shown:
            # an image's caption is Markdown: a file or folder name is shown as it is written
            st.image([img for _, img in shown], caption=[lab.md_plain(n) for n, _ in shown], width=96)
        for _, why in bad:
            st.caption(f"skipped: {lab.md_plain(why)}")

st.subheader("Pages")
# the title as the link and what the page does as a caption below it: a link's label does not wrap, so a long
# one was cut at the right edge at 1280 px (issue 34)
cols = st.columns(2)
for k, p in enumerate(table.pages()):
    rows = [table.ANALYSES[name] for name in p.rows]
    what = "; ".join(f"{a.help.split(' (')[0]}" + (f" ({a.figure})" if a.figure != "-" else "") for a in rows)
    with cols[k % 2]:
        st.page_link(lab.page(p.file, p.title, p.icon, p.url), label=p.title, icon=p.icon)
        st.caption(what[:1].upper() + what[1:])

st.subheader("Cache")
info = lab.store().info()
if info.get("enabled"):
    # the machine's folder only in Status (the sidebar), where someone looking after the machine looks for it
    st.markdown(f"The disk cache holds {info['entries']} entries, {info['bytes'] / 2**20:.1f} MiB (budget "
                f"{info['size_limit'] / 2**30:.0f} GiB; its folder is under Status in the sidebar; set "
                "`VITLAB_CACHE_DIR`, `VITLAB_CACHE_GB` to change them).")
