"""Lecture mode: the paper's claims as a guided path that asks before it tells (issue 41). One step per claim in the
paper's order: the student picks what they expect, then the step reveals the figure, the answer for these models
(pattern and learned, with numbers and intervals) and its control. Next opens only once the step is revealed; at
the end, a summary to download (predictions beside the answers, with the figures, one HTML file that opens offline).

Everything comes from a lecture prepared ahead of class (`vitlab lecture --prepare`, vitlab.tour.classroom): this
page reads the disk cache and never loads a model or runs a check. Free mode (Paper tour, Present the tour) is
unchanged. A prepared lecture is someone else's hand (issue 46): it is checked when it is read (its figures plain SVG,
its answers words of their closed sets), one that fails is said in words with the command that prepares it again,
and every text it carries (its data folder, model names, evidence) is shown escaped (lab.md_plain), its command in a
code block."""

import functools
import time

import lab
import streamlit as st

from vitlab.tour import classroom, glossary, lecture, summary

VERDICT_BOX = {"shown": st.success, "not shown": st.warning, "can't tell": st.info}
LEARNED_BOX = {"yes": st.success, "no": st.warning, "can't tell": st.info, "n.a.": st.info}
MARK = {True: "✓", False: "✗", None: "—"}  # a prediction as the paper's answer, not, or none
# the figures scale to their column and to the screen under the heading (a projector at 1280x720 included)
STYLE = """<style>
[data-testid="stMainBlockContainer"] {padding-top: 2.6rem !important}
.st-key-lecture-fig-p img {max-height: 68vh; object-fit: contain; object-position: left top}
.st-key-lecture-fig-i img {max-height: 26vh; object-fit: contain; object-position: left top}
</style>"""


class NotPrepared(Exception):
    """No lecture at these settings in the cache (raised, so st.cache_resource never keeps a miss)."""


@st.cache_resource(show_spinner=False, max_entries=4)
def _read(settings: classroom.LectureSettings, directory: str,
          made: str) -> tuple[classroom.Lecture | None, float, str | None]:
    """The prepared lecture, shared by every student's session on this server, the seconds its read took, and why
    it failed its check (then no lecture; kept, so that every session says the same until it is prepared again:
    ``made``, from the index, is part of the key, and a lecture prepared again is read again)."""
    t0 = time.perf_counter()
    try:
        found = classroom.read(lab.store(), settings)
    except classroom.BadLecture as e:
        return None, time.perf_counter() - t0, str(e)
    if found is None:
        raise NotPrepared
    return found, time.perf_counter() - t0, None


def not_shown(text: str, command: str) -> None:
    """Why there is no lecture to teach (``text``, which names folders and models: escaped) and the command that
    prepares it, in a code block (quoted for the shell: a backtick or a space in a folder name cannot break it)."""
    st.title("Lecture")
    st.error(lab.md_plain(text.replace(f"`{command}`", "the command below")))
    st.code(command, language="bash")


def choose(entries: list) -> classroom.LectureEntry:
    """The prepared lecture to teach (the newest by default); a new choice starts the path again."""
    if len(entries) == 1:
        return entries[0]
    labels = {i: f"{e.settings.describe()} (prepared {e.made})" for i, e in enumerate(entries)}  # plain text
    i = st.selectbox("Prepared lecture", list(labels), format_func=labels.get, key="lecture.pick")
    return entries[i]


def begin(key: str) -> None:
    """Start the path (again) when the lecture changes."""
    if st.session_state.get("lecture.key") != key:
        st.session_state.update({"lecture.key": key, "lecture.step": 0, "lecture.choices": {},
                                 "lecture.revealed": []})


def pick(key: str, options: tuple) -> None:
    value = st.session_state.get(f"lecture.choice.{key}")
    st.session_state["lecture.choices"][key] = options.index(value) if value in options else None


def reveal(key: str) -> None:
    if st.session_state["lecture.choices"].get(key) is not None and key not in st.session_state["lecture.revealed"]:
        st.session_state["lecture.revealed"].append(key)


def go(step: int) -> None:
    st.session_state["lecture.step"] = step


def restart() -> None:
    st.session_state.update({"lecture.step": 0, "lecture.choices": {}, "lecture.revealed": []})


def status(lec: classroom.Lecture, seconds: float) -> None:
    """The lecturer's detail, folded: when and how the lecture was prepared, its exact models and command."""
    info, plain = lec.tour.info, lab.md_plain
    with st.expander("For the lecturer: how this lecture was prepared", expanded=False):
        st.caption(f"Prepared {plain(lec.made)} with the command below: {info.batches_computed} batches computed "
                   f"then, {info.batches_from_cache} from the cache, {lec.seconds:.0f} s. Now: 0 batches computed, "
                   f"read from the disk cache ({seconds:.1f} s); nothing on this page runs a model. Models and data: "
                   f"{plain(lec.settings.describe())}. The sidebar's choices do not apply here")
        st.code(lec.settings.command(), language="bash")


def _terms(lec: classroom.Lecture) -> dict:
    """Each step's words met first there, on this lecture's path (glossary.first_terms)."""
    return glossary.first_terms(lec.steps)


def terms_ui(terms: list) -> None:
    """The glossary's words met here for the first time on this path, one plain sentence each."""
    if terms:
        st.caption("  \n".join(f"**{t.name}**: {t.sentence}" for t in terms))


def header_ui(key: str, k: int, lec: classroom.Lecture, revealed: bool) -> None:
    """The step's heading (a neutral topic before and after the reveal: a claim's title can give its answer away,
    and asserts the paper over "not shown"), Previous / Next (Next opens once the step is revealed)."""
    n = len(lec.steps)
    head, tools = st.columns([3, 2], vertical_alignment="bottom")
    head.caption(f"Lecture · {lec.row(key).figure} · step {k + 1} of {n}")
    head.subheader(lecture.QUESTIONS[key].topic)
    nav = tools.container(horizontal=True, horizontal_alignment="right", gap="small")
    nav.button("◀ Previous", key="lecture.prev", on_click=go, args=(k - 1,), disabled=k == 0)
    nav.button("Summary ▶" if k == n - 1 else "Next ▶", key="lecture.next", on_click=go, args=(k + 1,),
               disabled=not revealed, type="primary", help=None if revealed else "Reveal this step first")


def question_ui(key: str, lec: classroom.Lecture) -> None:
    """Before the reveal: the question, what is compared (models in words), the options, the words met here first;
    Reveal opens once one is chosen."""
    q = lecture.QUESTIONS[key]
    said = glossary.student(key, lec.row(key), lec.settings)
    st.markdown(f"**{q.ask}**")
    st.caption(f"{q.setup} {said.compared}")
    st.radio("What do you expect?", q.options, index=st.session_state["lecture.choices"].get(key),
             key=f"lecture.choice.{key}", on_change=pick, args=(key, q.options))
    st.button("Reveal the answer", key="lecture.reveal", type="primary", on_click=reveal, args=(key,),
              disabled=st.session_state["lecture.choices"].get(key) is None,
              help="Choose what you expect first: the answer opens after a prediction")
    terms_ui(_terms(lec)[key][0])


def figure_ui(key: str, lec: classroom.Lecture) -> None:
    """The figures as drawn when the lecture was prepared (inline SVG, scaled to the column): nothing is drawn now."""
    row = lec.row(key)
    svgs = [(part, svg) for part, svg in (("p", lec.papers.get(row.figure)), ("i", lec.intervals.get(row.figure)))
            if svg]
    if not svgs:
        st.info("No figure: this step could not be measured on these models.")
    for part, svg in svgs:  # an image each: st.html would strip the SVG, and each keeps its own ids
        with st.container(key=f"lecture-fig-{part}"):
            st.image(svg, width="stretch")


def answer_ui(key: str, lec: classroom.Lecture) -> None:
    """After the reveal: the prediction beside the paper's answer, the paper's words, both answers for these models
    in a plain sentence each, the words met here first, and How we know (folded); the figures beside them."""
    row, q = lec.row(key), lecture.QUESTIONS[key]
    said = lecture.outcome(key, st.session_state["lecture.choices"].get(key), row)
    student = glossary.student(key, row, lec.settings)
    left, right = st.columns([3, 2], gap="medium")
    with right:
        st.caption(q.ask)
        box = st.success if said["matches_paper"] else st.error
        box(f"**You predicted:** {said['prediction']}. **The paper:** {said['paper']}.")
        st.markdown(f"> {row.claim}")
        # the answers are words of their closed sets (checked when the lecture was read, classroom.checked); the
        # sentences are the glossary's own, the numbers came with the lecture: escaped
        VERDICT_BOX[row.pattern](f"**Pattern: {row.pattern}.** {student.meaning}")
        learned = student.learned if student.learned.endswith(".") else f"{student.learned}."  # "n.a.", not "n.a.."
        LEARNED_BOX[student.learned](f"**Learned: {learned}** {student.learned_text}")
        terms_ui(_terms(lec)[key][1])
        with st.expander("How we know", expanded=False):
            st.markdown("\n".join(f"- {lab.md_plain(line)}" for line in student.how))
        with st.expander("For the lecturer: exact models and measurements", expanded=False):
            st.caption(f"Models: {lab.md_plain(row.models) or 'none'}. {lab.md_plain(row.evidence)}")
    with left:
        figure_ui(key, lec)


def summary_bytes(lec: classroom.Lecture, choices: dict) -> bytes:
    """The summary file, made when the button is pressed (from the prepared figures: nothing is computed)."""
    return summary.summary_html(lec, choices).encode()


def summary_ui(lec: classroom.Lecture) -> None:
    """The end of the path: the predictions beside the answers, and the summary to take home."""
    choices = st.session_state["lecture.choices"]
    counts = lecture.score(choices, lec.tour.rows)
    st.subheader("Lecture summary: your predictions beside the answers")
    st.markdown(f"**{counts['matched']} of {counts['steps']}** predictions took the paper's answer; these models "
                f"showed the paper's pattern in **{counts['shown']} of {counts['steps']}** steps.")
    row = st.container(horizontal=True)
    row.download_button("Download your summary (HTML)", functools.partial(summary_bytes, lec, dict(choices)),
                        "vitlab_lecture_summary.html", "text/html", key="lecture.download", on_click="ignore",
                        type="primary", help="Your predictions beside the paper's answers and these models', with "
                                             "the figures: one file that opens offline in any browser")
    row.button("◀ Back to the last step", key="lecture.back", on_click=go, args=(len(lec.steps) - 1,))
    row.button("Start again", key="lecture.restart", on_click=restart)
    table = []
    for key in lec.steps:
        said = lecture.outcome(key, choices.get(key), lec.row(key))
        table.append({"step": lec.row(key).figure, "your prediction": said["prediction"],
                      "the paper": said["paper"], "as the paper": MARK[said["matches_paper"]],
                      "pattern on these models": said["pattern"],
                      "learned": glossary.student(key, lec.row(key), lec.settings).learned})
    st.table(table, hide_index=True)


def path_ui(lec: classroom.Lecture) -> None:
    steps, revealed = lec.steps, st.session_state["lecture.revealed"]
    # locked to the path: never past the first step not yet revealed (a stale or edited step number included)
    first_open = next((i for i, key in enumerate(steps) if key not in revealed), len(steps))
    k = max(0, min(int(st.session_state.get("lecture.step", 0)), first_open))
    st.session_state["lecture.step"] = k
    done = sum(key in revealed for key in steps)
    if k == len(steps):
        st.progress(1.0, text=f"{done} of {len(steps)} steps revealed")
        summary_ui(lec)
        return
    key = steps[k]
    header_ui(key, k, lec, key in revealed)
    st.progress(done / len(steps), text=f"{done} of {len(steps)} steps revealed")
    if key in revealed:
        answer_ui(key, lec)
    else:
        question_ui(key, lec)


st.html(STYLE)
store = lab.store()
with lab.guard():
    entries = classroom.prepared(store)
    if not entries:
        st.title("Lecture")
        default = classroom.settings()
        st.error(f"No lecture is prepared in the cache {lab.md_plain(store.directory)}. Prepare one ahead of class "
                 "(it runs the whole tour once; this page then only reads it):")
        st.code(default.command(str(store.directory)), language="bash")
    else:
        entry = choose(entries)
        command = entry.settings.command(str(store.directory))
        try:
            lec, seconds, bad = _read(entry.settings, str(store.directory), entry.made)
        except NotPrepared:
            not_shown(classroom.missing(entry.settings, store), command)
        else:
            if bad:
                not_shown(bad, command)
            else:
                begin(entry.settings.key())
                path_ui(lec)
                status(lec, seconds)
