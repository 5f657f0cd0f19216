"""Issue 39, hardening III (this file: the names part; the cache and saved results are tested elsewhere). One test per
case, each failing on the main before the fix:

1 output names unique by construction (no ``with_suffix`` on a user string; names that differ only in punctuation
are renamed and said; the printed count is the count of files written); 2 a statistic with no defined cell is
"can't tell" with its reason; 3 upload names escaped for Markdown; 4 decode notes in the one-image path and the
one-image wording; 5 a capture belongs to one run (two threads, one model).
"""

from __future__ import annotations

import json
import re
import sys
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # test_app_uploads
sys.path.insert(0, str(ROOT / "app"))  # lab (the app's helpers)
from vitlab import cli  # noqa: E402
from vitlab.errors import VitlabError  # noqa: E402
from vitlab.inputs.outdir import MANIFEST  # noqa: E402


# ------------------------------------------------------------------------------------------ 1. output names

def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = cli.main(argv)
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def _written(out: Path, stdout: str) -> tuple[int, list[str]]:
    """(the count the command printed, the files it left in ``out`` besides run.json and the record)."""
    printed = int(re.search(r"^(\d+) files in ", stdout, re.M).group(1))
    files = sorted(p.name for p in out.iterdir() if p.name not in ("run.json", MANIFEST))
    return printed, files


def test_names_are_slugs_with_the_extension_added_and_collisions_renamed_and_said(tmp_path):
    from vitlab.inputs.outdir import OutputNames

    names = OutputNames(tmp_path)
    assert names.path("map_rollout:max:0.9", "png").name == "map_rollout_max_0.9.png"
    assert names.path("map_rollout:max:0.5", "png").name == "map_rollout_max_0.5.png"  # with_suffix gave _0 twice
    a = names.paths("cka_zoo:vit-cls", "png", "svg")
    b = names.paths("cka_zoo:vit-cls ", "png", "svg")  # the same slug: renamed, both extensions alike
    assert [p.name for p in a] == ["cka_zoo_vit-cls.png", "cka_zoo_vit-cls.svg"]
    assert b[0].stem == b[1].stem != a[0].stem and b[0].stem.startswith("cka_zoo_vit-cls_")
    c = names.path("CKA_zoo:vit-cls", "png")  # differs in case only: one file on macOS and Windows
    same = names.path("cka_zoo:vit-cls ", "png")  # the very same stem again: still a file of its own
    assert len({p.name.casefold() for p in [*a, *b, c, same]}) == 6
    assert names.path("run", "json").name != "run.json" and names.path(".vitlab-files", "json").name != MANIFEST
    assert len(names.notes) == 5 and all("would share the file name" in n for n in names.notes)
    assert "'cka_zoo:vit-cls '" in names.notes[0] and "'cka_zoo:vit-cls'" in names.notes[0]
    assert names.path("curves", "csv").name == "curves.csv"  # another extension of a taken stem is no collision


@pytest.mark.parametrize("model, methods", [("zoo:vit-cls", ("rollout:max:0.9", "rollout:max:0.5")),
                                            ("zoo:resnet", ("gradcam:layer3.0", "gradcam:layer3.1"))])
def test_attribution_methods_that_differ_after_a_dot_write_a_map_each(model, methods, tmp_path, capsys):
    out = tmp_path / "out"
    code, stdout, _ = _run(["attribution", "-m", model, "-n", "4", "-b", "4", "--methods", ",".join(methods),
                            "--bootstrap", "0", "--random-orders", "1", "--no-cache", "--device", "cpu",
                            "-o", str(out)], capsys)
    assert code == 0
    printed, files = _written(out, stdout)
    assert printed == len(files), (printed, files)
    maps = [f"map_{m.replace(':', '_')}" for m in methods]
    for stem in maps:
        assert {f"{stem}.png", f"{stem}.csv"} <= set(files), files
    a, b = (pd.read_csv(out / f"{stem}.csv") for stem in maps)
    assert not np.allclose(a.select_dtypes("number").to_numpy(), b.select_dtypes("number").to_numpy())


def test_two_models_named_alike_keep_their_own_charts(tmp_path, capsys):
    out = tmp_path / "out"
    code, stdout, _ = _run(["cka", "-m", "zoo:vit-cls", "-m", "zoo:vit-cls ", "-n", "8", "-b", "4", "--bootstrap", "0",
                            "--no-cache", "--device", "cpu", "-o", str(out)], capsys)
    assert code == 0
    printed, files = _written(out, stdout)
    assert printed == len(files) == 1 + 4 * 2, files  # cka.csv and four pairs' heatmaps as PNG and SVG
    run = json.loads((out / "run.json").read_text())
    assert [m["spec"] for m in run["models"]] == ["zoo:vit-cls", "zoo:vit-cls#2"]  # the spec ignores the space


def _checkpoints(folder: Path) -> list[str]:
    import timm
    import torch
    from safetensors.torch import save_file

    folder.mkdir()
    specs = []
    for seed, name in enumerate(("run 1.safetensors", "run_1.safetensors")):
        torch.manual_seed(seed)
        save_file(timm.create_model("test_vit", pretrained=False).state_dict(), folder / name)
        specs.append(f"test_vit@{folder.name}/{name}")  # relative: a short label (a long one is cut and hashed)
    return specs


def test_checkpoints_whose_names_differ_in_punctuation_keep_their_own_charts(tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    monkeypatch.chdir(tmp_path)
    a, b = _checkpoints(tmp_path / "ck")
    code, stdout, err = _run(["cka", "-m", a, "-m", b, "-n", "8", "-b", "4", "--bootstrap", "0", "--no-cache",
                              "--device", "cpu", "-o", str(out)], capsys)
    assert code == 0
    printed, files = _written(out, stdout)
    charts = [f for f in files if f.endswith(".png")]
    assert printed == len(files) == 1 + 4 * 2 and len(charts) == 4, files
    assert len({(out / f).read_bytes() for f in charts}) == 4  # four different heatmaps, none overwritten
    run = json.loads((out / "run.json").read_text())
    said = [w for w in run["warnings"] if "would share the file name" in w]
    assert len(said) == 3 and err.count("would share the file name") == 3  # renamed, and said


# ------------------------------------------------------------------------------------------ 2. undefined cells

def test_a_rate_over_tokens_with_no_defined_cell_is_undefined_not_chance():
    from vitlab.stats import evidence as ev

    nan = np.full((5, 4), np.nan)  # a CLS row and 4 spatial tokens, every cell undefined
    assert np.isnan(ev.localized_rate(nan, 1))
    part = nan.copy()
    part[1] = [0.9, 0.1, 0.2, 0.3]  # token 0 defined and at home; tokens 1-3 have no defined cell: not counted
    part[2, 0] = 0.5  # token 1 defined, best at position 0: a miss
    assert ev.localized_rate(part, 1) == 0.5
    both = np.stack([nan, part])  # resamples: vectorised the same way
    assert np.isnan(ev.localized_rate(both, 1)[0]) and ev.localized_rate(both, 1)[1] == 0.5


def _black(folder: Path, n: int = 32) -> Path:
    from PIL import Image

    folder.mkdir()
    for i in range(n):
        Image.new("RGB", (28, 28)).save(folder / f"black{i:02d}.png")
    return folder


def test_the_tour_on_all_black_images_cannot_tell_fig_9_and_says_why(tmp_path, capsys):
    out = tmp_path / "out"
    code, stdout, _ = _run(["tour", "-m", "zoo:vit-cls", "-m", "zoo:resnet", "-d", str(_black(tmp_path / "black")),
                            "-n", "32", "-b", "8", "--only", "localization", "--no-cache", "--device", "cpu",
                            "-o", str(out)], capsys)
    assert code == 0
    row = pd.read_csv(out / "tour.csv").set_index("figure").loc["Fig 9"]
    assert row["pattern"] == "can't tell" and row["learned"] == "can't tell", row
    assert np.isnan(row["statistic"]) and np.isnan(row["lo"]) and np.isnan(row["hi"])
    assert "256 of its 256 token-by-position CKA cells are undefined" in row["evidence"], row["evidence"]
    assert "Fig 9     pattern can't tell" in stdout and "0 not shown, 1 can't tell" in stdout


def test_the_tour_on_all_black_images_cannot_tell_figs_1_2_from_round_off(tmp_path, capsys):
    """Identical images: every layer's features are flat up to float32 round-off, so no CKA is defined (a Gram of
    centring noise gave ±1 and ±1/3 and a 'shown' answer before: cka.drop_roundoff)."""
    out = tmp_path / "out"
    code, _, _ = _run(["tour", "-m", "zoo:vit-cls", "-m", "zoo:resnet", "-d", str(_black(tmp_path / "black")),
                       "-n", "32", "-b", "8", "--only", "cka", "--no-cache", "--device", "cpu", "-o", str(out)], capsys)
    assert code == 0
    row = pd.read_csv(out / "tour.csv").set_index("figure").loc["Figs 1-2"]
    assert row["pattern"] == "can't tell" and row["learned"] == "can't tell", row
    assert np.isnan(row["statistic"]) and np.isnan(row["lo"]) and np.isnan(row["hi"])


# ------------------------------------------------------------------------------------------ 3. Markdown in names

WEIRD = "[x](http://e.com) **b**.png"


def _unescape(md: str) -> str:
    """What Markdown shows for ``md`` when it holds only backslash escapes: the text with the escapes removed."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", md).replace("\u2060", "")  # and the invisible joiners


def _is_plain(md: str) -> bool:
    """No Markdown alive: rendered as Streamlit would (GFM with bare links, maths), one paragraph of text and nothing
    else; and no unescaped '[' (Streamlit's ':red[x]' directives, which a CommonMark renderer does not know)."""
    import html

    pytest.importorskip("markdown_it")
    dollarmath = pytest.importorskip("mdit_py_plugins.dollarmath")
    from markdown_it import MarkdownIt

    rendered = MarkdownIt("gfm-like").use(dollarmath.dollarmath_plugin).render(md).replace("\u2060", "")
    return rendered == f"<p>{html.escape(_unescape(md), quote=False)}</p>\n" and not re.search(r"(?<!\\)\[", md)


def test_markdown_escape_shows_a_name_as_typed():
    import lab

    for name in [WEIRD, "a_b_c.png", "`code`.png", ":red[x].png", "$x$.png", "www.e.com.png", "<b>x</b>.png",
                 "- list.png", "1. one.png", "vit-cls.png"]:
        md = lab.md_plain(name)
        assert _unescape(md) == name and _is_plain(md), (name, md)
    assert lab.md_plain("two\nlines.png") == "two lines.png"


def _png(color=(200, 40, 40)) -> bytes:
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (40, 40), color).save(buf, "PNG")
    return buf.getvalue()


def _gif() -> bytes:
    import io

    from PIL import Image

    buf = io.BytesIO()
    a, b = Image.new("RGB", (40, 40), (10, 200, 10)), Image.new("RGB", (40, 40), (10, 10, 200))
    a.save(buf, "GIF", save_all=True, append_images=[b], duration=100, loop=0)
    return buf.getvalue()


@pytest.mark.usefixtures("app_cache")
def test_the_upload_view_escapes_names_and_shows_decode_notes():
    from test_app_uploads import captions, image_picker, start

    at = start(**{"lab.source": "fashion-mnist:test", "lab.images": 64})
    at.file_uploader(key="loc.upload").set_value([(WEIRD, _png(), "image/png"), ("anim.gif", _gif(), "image/gif")])
    at.run()
    assert not at.error and not at.exception, [e.value for e in at.error]
    caps = captions(at)
    assert len(caps) == 3, caps
    for cap in caps[1:]:  # the gradient's and the attention's captions name the image: shown whole, as typed
        bare = re.sub(r"\\[!-/:-@\[-`{-~]", "", cap)  # what is left once the escaped characters are taken out
        assert WEIRD in _unescape(cap) and WEIRD not in cap, cap
        assert "](" not in bare and "**" not in bare and "://" not in bare, cap
    notes = [c.value for c in at.caption if "first frame" in c.value]
    assert notes and "anim" in notes[0], [c.value for c in at.caption]
    assert image_picker(at).options == [WEIRD, "anim.gif"]  # a select box shows options as plain text



# ------------------------------------------------------------------------------------------ 4. one image

def test_token_gradient_says_what_the_decoder_did_also_from_the_cache(tmp_path, capsys):
    from PIL import Image

    folder = tmp_path / "one"
    folder.mkdir()
    (folder / "anim.gif").write_bytes(_gif())
    Image.new("RGB", (20, 800), (50, 90, 200)).save(folder / "strip.png")
    for index, note in ((0, "first frame is used"), (1, "strip: its central")):
        for _ in range(2):  # computed, then from the cache
            out = tmp_path / f"out{index}"
            code, _, err = _run(["token-gradient", "-m", "zoo:vit-cls", "-d", str(folder), "--index", str(index),
                                 "--device", "cpu", "--cache-dir", str(tmp_path / "cache"), "-o", str(out)], capsys)
            assert code == 0 and note in err, err
            notices = json.loads((out / "run.json").read_text())["notices"]
            assert len(notices) == 1 and note in notices[0]["notice"], notices


def test_one_image_is_worded_as_one_and_cka_says_it_needs_a_batch_of_four():
    from vitlab.stats.evidence import BootstrapCKA
    from vitlab.tour import checks as T
    from vitlab.tour import measure
    from vitlab.tour.report import images_in_words

    with pytest.raises(VitlabError, match="no batch of 4 or more readable images: CKA's unbiased estimator"):
        measure._jk(BootstrapCKA(["a", "b"], ["a", "b"]))
    check = T.cant_tell("cka", "why")
    one = check.__class__(**{**check.__dict__, "images": 1, "batches": 1, "batch_size": 1})
    assert one.data_text == "1 image in 1 batch of 1"
    assert T.cant_tell("cka", "x").__class__(**{**check.__dict__, "images": 64, "batches": 2,
                                                   "batch_size": 32}).data_text == "64 images in 2 batches of 32"
    assert images_in_words("fashion-mnist:test", 1) == "Fashion-MNIST test set, first 1 image"


# ------------------------------------------------------------------------------------------ 5. captures

def test_two_runs_on_one_model_from_two_threads_equal_their_single_thread_results():
    """Token norms (batches of 16) while attribution (batches of 64) forwards the same model outside a capture: its
    forwards fired the first run's hooks ('stack expects each tensor to be equal size')."""
    import vitlab
    from vitlab.analyses import attribution as at
    from vitlab.analyses import token_norms as tn
    from vitlab.engine.context import Run

    m = vitlab.load("zoo:vit-cls", "cpu")
    src = vitlab.open_source("fashion-mnist:test")
    o1 = tn.TokenNormOptions(images=32, batch_size=16, skip_attention=True)
    o2 = at.FaithfulnessOptions(images=8, batch_size=64, random_orders=1, methods=("rollout",))
    jobs = {"norms": lambda: tn.token_norms(m, src, o1, Run(bootstrap=0, workers=0)).to_frame(),
            "faithfulness": lambda: at.faithfulness(m, src, o2, Run(bootstrap=0, workers=0)).to_frame()}
    alone = {k: f() for k, f in jobs.items()}
    for _ in range(2):
        got, errors = {}, []

        def work(k):
            try:
                got[k] = jobs[k]()
            except Exception as e:  # noqa: BLE001 - the test reports it
                errors.append(f"{k}: {e}")

        threads = [threading.Thread(target=work, args=(k,)) for k in jobs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        for k in jobs:
            a, b = alone[k].select_dtypes("number").to_numpy(), got[k].select_dtypes("number").to_numpy()
            np.testing.assert_allclose(b, a, rtol=0, atol=1e-6, err_msg=k)
