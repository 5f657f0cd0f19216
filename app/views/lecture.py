"""Lecture mode: the paper's claims as a guided path that asks before it tells (issue 41). One step per claim in the
paper's order: the student picks what they expect, then the step reveals the figure, the answer for these models
(pattern and learned, with numbers and intervals) and its control. Next opens only once the step is revealed; at
the end, a summary to download (predictions beside the answers, with the figures, one HTML file that opens offline).

Everything comes from a lecture prepared ahead of class (`vitlab lecture --prepare`, or on this page by the lecturer
when none is there: vitlab.tour.classroom's prepare and keep, with progress and Cancel): in class the page reads the
disk cache and never loads a model or runs a check. A server that only reads (VITLAB_LECTURE_PREPARE=0, or a cache
it cannot write) never prepares: it says the lecturer has not prepared the lecture yet. A student's place (step,
predictions, revealed steps) is kept in the URL, signed by this server, so that a reload finds it; a link's place is
checked before it is taken (vitlab.tour.lecture.read_place). The sidebar shows the lecture's settings, not the
pickers (lab.pickers.OWN_SETTINGS). Free mode (Paper tour, Present the tour) is unchanged. A prepared lecture is someone else's hand (issue 46): it is checked when it is read (its figures plain SVG,
its answers words of their closed sets), one that fails is said in words with the command that prepares it again,
and every text it carries (its data folder, model names, evidence) is shown escaped (lab.md_plain), its command in a
code block."""

import functools
import time
from dataclasses import replace

import lab
import streamlit as st

from vitlab.tour import CLAIMS, TOUR_IMAGES, classroom, glossary, lecture, summary

VERDICT_BOX = {"shown": st.success, "not shown": st.warning, "can't tell": st.info}
LEARNED_BOX = {"yes": st.success, "no": st.warning, "can't tell": st.info, "n.a.": st.info}
MARK = {True: "✓", False: "✗", None: "—"}  # a prediction as the paper's answer, not, or none
# A projector layout (issue 47): a revealed step fits 1280x720 without scrolling, the figures beside the answer. The
# figures scale to the height left under the heading (the paper-style figure above the interval chart); the answer's
# column reads a little smaller; the lecturer's detail sits in the sidebar (tests/test_browser_lecture.py measures it)
STYLE = """<style>
[data-testid="stMainBlockContainer"] {padding-top: 0.9rem !important; padding-bottom: 0.5rem !important}
.st-key-lecture-head h3 {padding: 0 !important}
.st-key-lecture-fig-p img {max-height: calc(100vh - 19rem); object-fit: contain; object-position: left top}
.st-key-lecture-fig-i img {max-height: 10.5rem; object-fit: contain; object-position: left top}
.st-key-lecture-answer {gap: 0.5rem}
.st-key-lecture-answer p, .st-key-lecture-answer li {font-size: 0.92rem; line-height: 1.4}
.st-key-lecture-answer [data-testid="stAlert"] > div {padding: 0.45rem 0.75rem}
.st-key-lecture-answer blockquote {margin: 0; padding-top: 0; padding-bottom: 0}
.st-key-lecture-answer [data-testid="stCaptionContainer"] p {font-size: 0.84rem; line-height: 1.35}
.st-key-lecture-answer [data-testid="stExpander"] summary {padding-top: 0.3rem; padding-bottom: 0.3rem}
.st-key-lecture-summary td:first-child, .st-key-lecture-summary th:first-child {white-space: nowrap}
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


@st.cache_resource(show_spinner=False)
def _secret() -> bytes:
    """This lab's key for the places it writes into links, kept in the disk cache (classroom.place_secret): a
    server restarted on the same cache takes the places it wrote before."""
    return classroom.place_secret(lab.store())


def restore(raw: dict, key: str, steps: list[str]) -> None:
    """The place a reload or a reopened link holds (``raw``: its query, taken once per browser session), checked
    (lecture.read_place): taken when this server wrote it for this lecture, else said in words; the path starts at
    step 1."""
    try:
        place = lecture.read_place(raw, steps, key, _secret())
    except lecture.PlaceRefused as e:
        st.info(f"This link's place in the lecture was not taken: {e}. The lecture starts at step 1.")
        return
    if place is not None:
        st.session_state.update({"lecture.step": place.step, "lecture.choices": dict(place.choices),
                                 "lecture.revealed": steps[:place.revealed]})


def keep_place(key: str, steps: list[str]) -> None:
    """The student's place into the URL (signed), so that a reload or the link finds them where they are."""
    revealed = st.session_state["lecture.revealed"]
    shown = next((i for i, k in enumerate(steps) if k not in revealed), len(steps))
    choices = tuple((k, c) for k, c in st.session_state["lecture.choices"].items() if c is not None and k in steps)
    place = lecture.Place(int(st.session_state["lecture.step"]), choices, shown)
    lab.links.own(lecture.place_query(place, steps, key, _secret()))


def sidebar_ui(settings: classroom.LectureSettings | None) -> None:
    """The lecture's settings in the sidebar, in words (the sidebar's pickers do not apply to a lecture)."""
    with st.sidebar:
        st.subheader("This lecture")
        if settings is None:
            st.markdown("No lecture chosen yet.")
            return
        claims = "every claim" if not settings.tour.only else ", ".join(CLAIMS[k].figure for k in settings.tour.only)
        st.markdown(f"**Models:** {lab.md_plain(glossary.models_words(settings.models))}  \n"
                    f"**Images:** {lab.md_plain(glossary.source_words(settings.data))}, "
                    f"{settings.tour.images or 'every'} images  \n"
                    f"**Batch:** {settings.tour.batch_size} images  \n**Steps:** {claims}")


def status(lec: classroom.Lecture, seconds: float) -> None:
    """The lecturer's detail, folded in the sidebar (off the projected step): when and how the lecture was prepared,
    its exact models and command."""
    info, plain = lec.tour.info, lab.md_plain
    with st.sidebar.expander("For the lecturer: how this lecture was prepared", expanded=False):
        st.caption(f"Prepared {plain(lec.made)} with the command below: {info.batches_computed} batches computed "
                   f"then, {info.batches_from_cache} from the cache, {lec.seconds:.0f} s. Now: 0 batches computed, "
                   f"read from the disk cache ({seconds:.1f} s); nothing on this page runs a model. Models and data: "
                   f"{plain(lec.settings.describe())}")
        st.code(lec.settings.command(), language="bash")
        loaded = [spec for spec, _ in lab._loaded_registry()]
        st.caption("Models loaded on this server: " + (lab.md_plain(", ".join(loaded)) if loaded else "none") +
                   f"; {lab.runs.loaded_bytes() / 2**30:.2f} GiB held")


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
    head, tools = st.container(key="lecture-head").columns([3, 2], vertical_alignment="bottom")
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
    in a plain sentence each, the words met here first, and How we know (folded); the figures beside them. The exact
    models and measurements go to the sidebar, for the lecturer."""
    row, q = lec.row(key), lecture.QUESTIONS[key]
    said = lecture.outcome(key, st.session_state["lecture.choices"].get(key), row)
    student = glossary.student(key, row, lec.settings)
    left, right = st.columns([1, 1], gap="medium")
    with right.container(key="lecture-answer"):
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
    with st.sidebar.expander("For the lecturer: this step's exact models and measurements", expanded=False):
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
    with st.container(key="lecture-summary"):  # its step column on one line: "Figs 1-2", not "Figs 1-" / "2"
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


# ------------------------------------------------------------------------------------ preparing on the page

PREPARING = "Preparing the lecture"  # lab.compute's label: its progress text, its Cancel flag
REQUEST = "lecture.prepare"  # the settings the lecturer asked to prepare, until the lecture is kept or cancelled


@st.cache_resource(show_spinner=False)
def _underway() -> dict:
    """Lectures being prepared on this server now (settings key -> when it started), shared by every session: a
    second visitor waits for the first one's lecture rather than computing it again."""
    return {}


def prepare_ui(base: classroom.LectureSettings) -> classroom.LectureSettings:
    """The lecture's settings, chosen by the lecturer (models of the zoo, images, batch, steps, untrained twins; the
    rest as ``base``): widgets that lock while it is being prepared."""
    busy = REQUEST in st.session_state
    zoo = lab.zoo_specs()
    c1, c2, c3, c4 = st.columns([3, 3, 1, 1])
    models = []
    for col, spec, label in ((c1, base.models[0], "First model (a ViT)"), (c2, base.models[-1],
                                                                         "Second model (a CNN)")):
        options = zoo if spec in zoo else [spec, *zoo]
        models.append(col.selectbox(label, options, index=options.index(spec), key=f"lecture.new.{label[:6]}",
                                    format_func=lambda m: f"{glossary.model_words(m)} ({m})", disabled=busy))
    images = c3.number_input("Images", 16, 10_000, base.tour.images or TOUR_IMAGES, step=16, key="lecture.new.n",
                             disabled=busy, help="The first images of the data set the tour reads")
    batch = c4.number_input("Batch", 4, 1024, base.tour.batch_size, step=8, key="lecture.new.bs", disabled=busy,
                            help="Images per batch: the intervals resample batches")
    figures = {CLAIMS[k].figure: k for k in CLAIMS}
    steps = st.pills("Steps (the paper's claims)", list(figures), selection_mode="multi", key="lecture.new.steps",
                     default=[CLAIMS[k].figure for k in (base.tour.only or CLAIMS)], disabled=busy,
                     format_func=lambda f: f"{f}: {lecture.QUESTIONS[figures[f]].topic}")
    twins = st.toggle("Compare with untrained twins (what training changed)", base.tour.control == "random",
                      key="lecture.new.twins", disabled=busy)
    only = tuple(figures[f] for f in steps) if 0 < len(steps) < len(CLAIMS) else None
    tour = replace(base.tour, images=int(images), batch_size=int(batch), only=only,
                   control="random" if twins else "none")
    return classroom.settings(models, base.data, tour, base.bootstrap, base.seed)


def ask(settings: classroom.LectureSettings) -> None:
    st.session_state[REQUEST] = settings


def prepared_now(store, settings: classroom.LectureSettings) -> bool:
    """Prepare the lecture the lecturer asked for (lab.compute: progress, Cancel) and keep it in the cache, as
    `vitlab lecture --prepare` does; True once it is kept."""
    underway = _underway()

    def make(run):
        underway[settings.key()] = time.time()
        try:
            models = [lab.model(spec, "auto", display=spec) for spec in settings.models]  # named as typed, as the CLI
            return classroom.prepare(models, lab.named_source(settings.data), settings, run)
        finally:
            underway.pop(settings.key(), None)

    made = lab.compute((REQUEST, settings), make, PREPARING, persist=False)
    lab.runs._memo().pop((REQUEST, settings), None)  # the kept lecture is read back from the cache like any other
    if made is None:
        return False
    classroom.keep(store, made)
    st.session_state.pop(REQUEST, None)
    return True


def first_visit(store, base: classroom.LectureSettings, why: str | None = None) -> None:
    """No lecture to teach (``why``: the one that was prepared and is gone): the lecturer prepares it here, or, on a
    server that only reads, the student learns that the lecturer has not prepared it yet."""
    st.title("Lecture")
    refused = classroom.cannot_prepare(store)
    if refused:
        st.info("The lecturer has not prepared this lecture yet. It opens here once it is prepared: reload this page "
                "then.")
        with st.expander("For the lecturer: how to prepare it", expanded=False):
            st.caption(f"This page cannot prepare it: {lab.md_plain(refused)}. From a terminal, into the cache this "
                       "server reads:")
            st.code(base.command(str(store.directory)), language="bash")
        return
    flag = f"lab.cancelled.{PREPARING}"
    if st.session_state.pop(flag, False):
        st.session_state.pop(REQUEST, None)
        st.info("Preparing was cancelled: nothing was kept. Change the settings or prepare it again.")
    others = {k: t for k, t in _underway().items() if REQUEST not in st.session_state}
    if others:
        st.info(f"A lecture is being prepared on this server (started {time.time() - min(others.values()):.0f} s "
                "ago): it opens here when it is ready.")
        st.button("Look again", key="lecture.again")
        return
    st.markdown(why or "No lecture is prepared on this server yet. Choose its settings and prepare it here: the "
                "whole tour runs once (a minute or two for 64 images on a small server), then every student's page "
                "only reads it.")
    settings = prepare_ui(st.session_state.get(REQUEST) or base)
    st.button("Prepare the lecture", key="lecture.go", type="primary", on_click=ask, args=(settings,),
              disabled=REQUEST in st.session_state)
    st.caption("or from a terminal, into the cache this server reads:")
    st.code(settings.command(str(store.directory)), language="bash")
    if REQUEST in st.session_state and prepared_now(store, st.session_state[REQUEST]):
        st.rerun()


def gone(entry: classroom.LectureEntry) -> str:
    """A listed lecture that is no longer in the cache, in words."""
    return (f"The lecture prepared {lab.md_plain(entry.made)} ({lab.md_plain(glossary.settings_words(entry.settings))})"
            " is no longer in this server's cache: the cache made room, or vitlab or one of its models changed "
            "since. Prepare it again here:")


st.html(STYLE)
store = lab.store()
with lab.guard():
    raw = lab.links.take_own(lecture.PLACE_KEYS)  # a reload's or a link's place: only on a session's first run
    entries = classroom.prepared(store)
    lab.links.own({})
    if not entries:
        sidebar_ui(None)
        first_visit(store, classroom.settings())
    else:
        wanted = [i for i, e in enumerate(entries) if e.settings.key()[:12] == raw.get("lecture")]
        if wanted and "lecture.pick" not in st.session_state:
            st.session_state["lecture.pick"] = wanted[0]
        entry = choose(entries)
        sidebar_ui(entry.settings)
        command = entry.settings.command(str(store.directory))
        try:
            lec, seconds, bad = _read(entry.settings, str(store.directory), entry.made)
        except NotPrepared:
            first_visit(store, entry.settings, gone(entry))
        else:
            if bad:
                not_shown(bad, command)
            else:
                key = entry.settings.key()
                begin(key)
                if raw:
                    restore(raw, key, lec.steps)
                path_ui(lec)
                keep_place(key, lec.steps)
                status(lec, seconds)
