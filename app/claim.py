"""The lead of every analysis page that speaks of a claim of the paper (issue 37): the tour's own check for that
figure (``vitlab.tour``, one code path), computed on the page's models, images and batches, and drawn in the tour's
words: the paper's claim, the statistic, the pattern and learned answers with their numbers and intervals, the control
on its own line, the interval's basis, the models and the images the statistic used. Where the page's run cannot
answer (too few batches, an undefined statistic, a missing model) the check says "can't tell" and why, and no
direction.

    row = claim.check("receptive", [a, b], src, s)   # a vitlab.tour.Check, cached like every page result
    claim.lead(row)                                   # the words, in place
"""

from __future__ import annotations

from dataclasses import replace

import lab
import streamlit as st

from vitlab import tour

PAPER_LEAD, OURS_LEAD = lab.PAPER_LEAD, lab.OURS_LEAD


def options(key: str, images: int, batch_size: int, control: str = "random") -> tour.TourOptions:
    """The tour's options for one check on a page's images and batches (the tour's other defaults: its control
    models, probe draws, receptive-field images)."""
    return tour.TourOptions(images=int(images), batch_size=int(batch_size), control=control, only=(key,))


def check(key: str, models: list, src, s: lab.Settings, images: int | None = None,
          batch_size: int | None = None) -> tour.Check | None:
    """The tour's check ``key`` on ``models`` (the page's; a ViT and a CNN among them where the claim needs them)
    over the page's images in its batches, with the tour's resamples and seed, so that it equals the Paper tour's row
    on the same settings. None when the run stopped (the error is shown in place). ``images``: a count other than
    the sidebar's that the page chose (and said so: Localization below 64 images), named in the run's progress."""
    chosen = images
    images = s.images if images is None else images
    batch_size = s.batch_size if batch_size is None else batch_size
    opts = options(key, images, batch_size)
    # the images the check reads, said in its progress as it runs: the page's, or its own (Fig 6 its first
    # rf_images, a backward pass each; Fig 11 its probe pool, 500 images where the page asked for 32)
    from vitlab.tour.measure import data_used

    reads, _, note = data_used(key, src, opts)
    own = f" on {reads} images ({note})" if note and reads != images else None
    label = f"{tour.CLAIMS[key].figure} check" + (own or ("" if chosen is None else f" on {images} images"))
    labels = tuple(dict.fromkeys(m.label for m in models))
    models = list({m.label: m for m in models}.values())
    report = lab.compute(("claim", key, s.key, src.name, labels, images, batch_size), lambda run: tour.run_tour(
        models, src, opts, replace(run, bootstrap=tour.TOUR_BOOTSTRAP, seed=tour.TOUR_SEED)), label)
    return None if report is None else report.rows[0]


def words(row: tour.Check) -> dict[str, str]:
    """The lead's lines (also what tests/test_page_words.py compares with the tour's row): paper, statistic, pattern,
    learned, control, basis."""
    w = lab.check_lines(row)
    return {"paper": f"**{PAPER_LEAD}** ({row.figure}) {w['paper']}",
            "statistic": f"**{OURS_LEAD}** {w['statistic']}.",
            "pattern": f"**Pattern: {row.pattern}.** {w['pattern_numbers']}",
            "learned": f"**Learned: {row.learned.rstrip('.')}.** {w['learned_numbers']}",
            "control": w["control_note"],
            "basis": f"{w['interval_text']}. Models: {w['models'] or 'none'}. Data: {w['data']}."}


def lead(row: tour.Check | None, figure: str = "", missing: str = "the check did not run (see below).") -> None:
    """Draw a check as a page's lead; ``missing`` in its place when no check was computed."""
    if row is None:  # the paper's words still lead (its claim for this figure), only the answer here is missing
        if lab.links.waiting():
            missing = "not computed yet: the page waits for your choice on what the link asks for (above)."
        paper = next((c.claim for c in tour.CLAIMS.values() if c.figure == figure), "")
        st.markdown(f"**{PAPER_LEAD}** ({figure}) {paper}".rstrip())
        st.info(f"**{OURS_LEAD}** {missing}")
        return
    w = words(row)
    st.markdown(w["paper"])
    st.markdown(w["statistic"])
    box = {"shown": st.success, "not shown": st.warning}.get(row.pattern, st.info)
    box(w["pattern"])
    st.markdown(w["learned"])
    st.markdown(w["control"])
    st.caption(w["basis"])
