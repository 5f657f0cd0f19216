"""Issue 46, hardening IV (this file: links and the app's text). A link is someone else's hand: it chooses what is
cheap and already here (zoo models, loaded models, settings, view state) and proposes the rest, which the person's
click does; every text that came from outside is shown through one escaping function. One test per case, each
failing on the main before the fix.
"""

from __future__ import annotations

import re
import socket
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "app"
sys.path.insert(0, str(APP))
sys.path.insert(0, str(ROOT / "tests"))  # test_share: opening a link in AppTest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402
from test_share import open_link  # noqa: E402 - a link opened in AppTest, as that file's tests do

TIMEOUT = 180
LINK = {"a": "zoo:vit-cls", "b": "zoo:resnet", "data": "fashion-mnist:test", "n": "16", "bs": "8", "device": "cpu"}
pytestmark = pytest.mark.usefixtures("app_cache")


def unescaped(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text).replace("\u2060", "")


def errors(at) -> list[str]:
    return [unescaped(e.value) for e in at.error]


def proposals(at) -> list[str]:
    return [unescaped(m.value) for m in at.markdown if "The link asks for" in m.value]


def registry() -> list[str]:
    import lab

    return [spec for spec, _ in lab.runs._loaded_registry().keys()]


# ------------------------------------------------------------------------- a link proposes what costs memory


def test_a_model_not_loaded_is_proposed_with_its_size_and_loaded_by_the_persons_click():
    spec = "test_vit@random:7"
    at = open_link("skips", {**LINK, "a": spec})
    assert spec not in registry() and at.session_state["lab.model_a"] == "zoo:vit-cls"
    asked = proposals(at)
    assert len(asked) == 1 and "model A" in asked[0] and spec in asked[0]
    import vitlab

    size = vitlab.models.size(spec)
    assert size.words in asked[0] and "random weights" in asked[0], asked  # its size, said before anything is built
    at.button(key="share.accept.model_a").click().run()
    assert not at.exception and at.session_state["lab.model_a"] == spec
    assert spec in registry() and not proposals(at)


def test_a_model_bigger_than_the_server_is_refused_with_its_size_and_never_built(monkeypatch):
    spec = "vit_7b_patch16_dinov3@random"
    at = open_link("skips", {**LINK, "b": spec})
    asked = proposals(at)
    assert len(asked) == 1 and "6.7 B parameters (25.0 GiB in float32)" in asked[0], asked
    assert "cannot be loaded on this server" in asked[0] and "this machine has" in asked[0]
    assert not any(b.key == "share.accept.model_b" for b in at.button)  # no click can build it
    assert at.session_state["lab.model_b"] == "zoo:resnet" and not any("vit_7b" in s for s in registry())


def test_a_linked_data_set_that_may_download_is_proposed_and_nothing_reaches_the_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a link reached the network")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    at = open_link("skips", {**LINK, "data": "cifar10:test"})
    asked = proposals(at)
    assert len(asked) == 1 and "cifar10:test" in asked[0] and "download" in asked[0], asked
    assert at.session_state["lab.source"] == "fashion-mnist:test"
    at.button(key="share.dismiss.source").click().run()
    assert not proposals(at) and at.session_state["lab.source"] == "fashion-mnist:test"


def test_a_pages_model_list_takes_cheap_models_proposes_the_rest_and_is_capped():
    at = open_link("logit_lens", {**LINK, "lens.models": '["zoo:vit-cls", "test_vit@random:3"]'})
    assert at.multiselect(key="lens.models").value == ["zoo:vit-cls"]
    asked = proposals(at)
    assert len(asked) == 1 and "test_vit@random:3" in asked[0] and "zoo:vit-cls" not in asked[0].split(":**")[1]
    assert "test_vit@random:3" not in registry()
    many = '[' + ", ".join(f'"zoo:vit-cls@random:{i}"' for i in range(9)) + ']'
    at = open_link("logit_lens", {**LINK, "lens.models": many})
    assert any("at most 8 models" in e for e in errors(at)), errors(at)


def test_a_pages_choice_that_loads_hub_models_is_proposed_not_taken(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a link reached the network")

    monkeypatch.setattr(socket, "create_connection", refuse)
    at = open_link("checkpoints", {**LINK, "ckpt.preset": "hub-scale"})
    assert at.radio(key="ckpt.preset").value == "zoo"
    asked = proposals(at)
    assert len(asked) == 1 and "vit_base_patch32_224.augreg_in21k" in asked[0] and "88.2 M parameters" in asked[0]
    assert not any("vit_base" in spec for spec in registry())


def test_a_folder_in_a_pages_box_from_a_link_is_proposed_and_read_only_on_the_click(tmp_path, monkeypatch):
    monkeypatch.setenv("VITLAB_FOLDERS", str(tmp_path))
    outside = "/usr/share"
    at = open_link("localization", {**LINK, "n": "32", "loc.ref": "folder", "loc.ref.folder": str(tmp_path)})
    asked = proposals(at)
    assert len(asked) == 1 and str(tmp_path) in asked[0] and "folder" in asked[0], asked
    assert at.text_input(key="loc.ref.folder").value in ("", None)
    at.button(key="share.accept.loc.ref.folder").click().run()
    assert at.text_input(key="loc.ref.folder").value == str(tmp_path)
    at = open_link("localization", {**LINK, "n": "32", "loc.ref": "folder", "loc.ref.folder": outside})
    assert not proposals(at) and any("outside the folders this server reads" in e for e in errors(at)), errors(at)


# ------------------------------------------------------------------------- a value the page did not keep is named


def test_linked_values_out_of_range_or_not_an_option_get_their_link_line():
    at = open_link("skips", {**LINK, "skips.block": "500", "skips.which": "nonexistent"})
    shown = " | ".join(errors(at))
    assert "skips.block='500' is not one of this page's choices" in shown, shown
    assert "skips.which='nonexistent' is not one of this page's choices" in shown, shown


def test_a_copied_link_with_a_list_reopens_on_a_server_that_knows_the_page():
    """The second visit seeds the page's widgets before its first run (their kinds are known): a list among them."""
    view = {**LINK, "heads.blocks": "[1]", "heads.size": "2"}
    for _ in range(2):
        at = open_link("heads", view)
        assert not errors(at) and at.multiselect(key="heads.blocks").value == [1], errors(at)


def test_a_linked_token_is_kept_on_localization():
    at = open_link("localization", {**LINK, "n": "32", "loc.row": "1", "loc.col": "2"})
    assert (at.number_input(key="loc.row").value, at.number_input(key="loc.col").value) == (1, 2)
    assert not errors(at)


# ------------------------------------------------------------------------- text from outside is shown as written

HOSTILE = "https://evil.example/login **bold** $x^2$ <b>tag</b> _em_ [a](https://evil.example)"


def _renderer():
    pytest.importorskip("markdown_it")
    mdit_plugins = pytest.importorskip("mdit_py_plugins.dollarmath")
    from markdown_it import MarkdownIt

    return MarkdownIt("gfm-like").use(mdit_plugins.dollarmath_plugin)  # GFM bare links, tables, HTML, maths


def alive(md, text: str) -> list[str]:
    """What of :data:`HOSTILE` a Markdown text would render alive, as Streamlit's renderer (GFM, maths) would: its
    links, emphasis, maths and HTML (the app's own links and emphasis are not counted)."""
    html = md.render(text)
    found = re.findall(r'href="[^"]*evil\.example|<strong>bold</strong>|<em>em</em>|class="math[^>]*>x\^2|<b>tag'
                       r"|<script", html)
    return [f"{f} in {html[:300]!r}" for f in found]


def page_texts(at) -> list[str]:
    """Every text of the page drawn as Markdown: paragraphs, captions, alerts, titles, and widgets' labels and radio
    options."""
    texts = []
    for kind in ("markdown", "caption", "error", "warning", "info", "success", "title", "header", "subheader"):
        texts += [e.value for e in at.get(kind)]
    for kind in ("radio", "selectbox", "multiselect", "text_input", "number_input", "checkbox", "toggle", "button"):
        for w in at.get(kind):
            texts.append(getattr(w, "label", "") or "")
            texts += [str(o) for o in getattr(w, "options", []) if kind == "radio"]
    return texts


PAGES = ("home", "similarity", "attention", "heads", "receptive", "skips", "localization", "probes", "logit_lens",
         "ablation", "attribution", "token_norms", "models", "checkpoints", "present", "lecture")


def test_every_page_shows_a_hostile_model_and_folder_name_as_written(tmp_path):
    md = _renderer()
    assert alive(md, HOSTILE)  # the renderer does see these alive when unescaped
    folder = tmp_path / "x https:⁄⁄evil.example **bold** $y$"
    folder.mkdir()
    found = []
    for page in PAGES:
        at = AppTest.from_file(str(APP / "Home.py"), default_timeout=TIMEOUT)
        at.session_state["lab.model_a"] = HOSTILE  # as typed by the person: the name is theirs, its words are text
        at.session_state["lab.source"] = str(folder / "missing")
        at.session_state["lab.images"], at.session_state["lab.batch_size"] = 8, 4
        (at if page == "home" else at.switch_page(f"views/{page}.py")).run()  # the page opened first, as by its URL
        assert not at.exception, (page, [e.message for e in at.exception])
        texts = page_texts(at)
        # the name is on the page, somewhere; but the Lecture page, whose sidebar shows the lecture's settings and
        # never the sidebar's models (a student's page names no spec)
        assert any("evil" in t for t in texts) != (page == "lecture"), page
        found += [f"{page}: {a}" for t in texts for a in alive(md, t)]
    assert not found, found


NAMED = "www.evil.example **bold** $x^2$ <b>tag _em_"  # no "/": a file name


def test_every_page_shows_a_hostile_checkpoint_and_folder_name_as_written_in_its_results(tmp_path, monkeypatch):
    """The same with names that load: a checkpoint file and a folder of images named as an attacker would, so every
    page computes and shows its results, captions and pickers with them."""
    import shutil

    from safetensors.torch import save_file

    import vitlab

    md = _renderer()
    model = vitlab.load("test_vit@random:1", "cpu").model
    ckpt = tmp_path / f"{NAMED}.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(ckpt))
    folder = tmp_path / NAMED
    folder.mkdir()
    for i, image in enumerate(sorted((ROOT / "assets" / "samples").iterdir())[:8]):
        shutil.copy(image, folder / f"{NAMED} {i}{image.suffix}")
    monkeypatch.setenv("VITLAB_FOLDERS", str(tmp_path))
    found, missing = [], []
    for page in PAGES:
        at = AppTest.from_file(str(APP / "Home.py"), default_timeout=TIMEOUT)
        settings = {"lab.model_a": f"test_vit@{ckpt}", "lab.model_b": "zoo:resnet", "lab.source": str(folder),
                    "lab.images": 4, "lab.batch_size": 4, "lab.device": "cpu"}
        for k, v in settings.items():
            at.session_state[k] = v
        (at if page == "home" else at.switch_page(f"views/{page}.py")).run()  # the page opened first, as by its URL
        assert not at.exception, (page, [e.message for e in at.exception])
        texts = page_texts(at)
        if not any("evil" in t for t in texts):
            missing.append(page)
        found += [f"{page}: {a}" for t in texts for a in alive(md, t)]
    assert not found, found
    assert len(missing) < len(PAGES) / 2, missing  # the names do reach most pages' words


def test_a_link_is_the_pages_first_run_on_a_server_that_never_drew_the_page():
    import lab

    lab.links._KINDS.pop("attr.orders", None)  # as on a fresh server: the widget's type not yet learned
    at = open_link("attribution", {**LINK, "attr.orders": "2"})
    assert at.number_input(key="attr.orders").value == 2
    views = [key[-1] for key in at.session_state["lab.memo"] if key[0] == "attribution"]
    assert [v.random_orders for v in views] == [2], views  # never the default 8 orders first


# ------------------------------------------------------------------------- while a proposal is open, nothing runs


def test_while_a_proposal_is_open_the_page_computes_nothing_and_use_all_takes_every_model(monkeypatch):
    """A link naming two costly models: the page runs neither its own models (which the link would replace) nor
    the first model taken with the old second, but waits, says so once, and runs once on both after "Use all"."""
    from vitlab.analyses import skips

    calls, real = [], skips.skip_ratios

    def counted(models, *args, **kwargs):
        calls.append([m.label for m in models])
        return real(models, *args, **kwargs)

    monkeypatch.setattr(skips, "skip_ratios", counted)
    a, b = "test_vit@random:17", "test_resnet@random:17"
    at = open_link("skips", {**LINK, "a": a, "b": b})
    assert len(proposals(at)) == 2 and not calls, calls
    waits = [unescaped(i.value) for i in at.info if "Waiting for your choice" in i.value]
    assert len(waits) == 1 and "model A" in waits[0] and "model B" in waits[0], waits
    assert any("waits for your choice" in unescaped(i.value) for i in at.info)  # the check's lead says why
    at.button(key="share.accept.model_a").click().run()  # one of two taken: still nothing runs
    assert len(proposals(at)) == 1 and not calls
    at.button(key="share.dismiss.model_b").click().run()  # the other dismissed: the page runs, once
    assert not proposals(at) and calls == [[a, "zoo:resnet"]], calls
    a, b = "test_vit@random:18", "test_resnet@random:18"  # (A above is now loaded here: a link may take it)
    at = open_link("skips", {**LINK, "a": a, "b": b})
    calls.clear()
    at.button(key="share.accept.all").click().run()
    assert not proposals(at) and calls == [[a, b]], calls
    assert not errors(at) and not at.exception
