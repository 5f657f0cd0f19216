"""A catalogue of malformed inputs (tests/bad_inputs.py: 34 files) through every way images come in: the folder
source, ``vitlab cka`` on a folder, and the app's upload path. No traceback anywhere, every skipped file named with
its reason, every valid one used (and animations and strips used with a notice)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bad_inputs import FOLDER_ONLY, catalogue_bytes, make_catalogue  # noqa: E402

import vitlab  # noqa: E402
from vitlab.inputs import images  # noqa: E402
from vitlab.inputs.data import decode, folder_source, plan_batches  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def catalogue(tmp_path_factory):
    folder = tmp_path_factory.mktemp("catalogue")
    return folder, make_catalogue(folder)


def _split(expected: dict[str, str]) -> tuple[set[str], set[str], set[str]]:
    bad = {n for n, e in expected.items() if e == "skip"}
    noted = {n for n, e in expected.items() if e == "note"}
    return bad, noted, set(expected) - bad


def test_catalogue_is_big_and_varied(catalogue):
    _, expected = catalogue
    bad, noted, good = _split(expected)
    assert len(expected) >= 25 and len(bad) >= 12 and len(good) >= 15 and noted


def test_folder_source_skips_exactly_the_bad_files_with_reasons(catalogue):
    folder, expected = catalogue
    bad, noted, good = _split(expected)
    src = folder_source(folder)
    assert {Path(src.item_id(i)).name for i in range(len(src))} == set(expected)  # loops and FIFOs are listed too
    batch = decode(src, plan_batches(src, range(len(src)), len(src))[0], 224)
    skipped = {Path(n).name: why for n, why in batch.skipped}
    assert set(skipped) == bad
    for name, why in skipped.items():
        assert name in why and len(why) > len(str(folder / name)) + 5, why  # names the file and says why
    assert {Path(n).name for n in batch.ids} == good
    assert {Path(n).name for n, _ in batch.notices} >= noted
    for img in batch.images:
        assert img.mode in ("L", "RGB") and max(img.size) <= 16 * min(img.size)


@pytest.mark.parametrize("name", sorted(n for n in catalogue_bytes()))
def test_every_catalogue_file_decodes_or_names_its_reason(name):
    data, expected = catalogue_bytes()[name]
    if expected == "skip":
        with pytest.raises(vitlab.VitlabError, match=name.replace(".", r"\.")):
            images.decode(data, name, 224)
    else:
        img = images.decode(data, name, 224)
        assert img.mode in ("L", "RGB")
        assert bool(img.info[images.NOTES]) == (expected == "note")


@pytest.mark.parametrize("kind", ["threads", "processes"])
def test_vitlab_cka_on_the_catalogue_names_every_skip_and_uses_every_valid_image(catalogue, tmp_path, capfd, kind):
    from vitlab import cli

    folder, expected = catalogue
    bad, noted, good = _split(expected)
    out = tmp_path / "out"
    rc = cli.main(["cka", "-m", "test_vit@random", "-d", str(folder), "-n", "100", "-b", "64", "--device", "cpu",
                   "-o", str(out), "--workers", "2", "--worker-kind", kind, "--no-cache"])
    err = capfd.readouterr().err
    assert rc == 0, err
    assert "Traceback" not in err
    run = json.loads((out / "run.json").read_text())
    assert run["input_workers"] == {"count": 2, "kind": kind}
    assert vitlab.pipeline._default_kind is None  # main() gives the process its defaults back
    assert {Path(s["image"]).name for s in run["skipped_reasons"]} == bad
    assert run["images"] == len(good) and not run["dropped_batches"]
    assert {Path(s["image"]).name for s in run["notices"]} >= noted
    for name in bad:
        assert f"{name}'" in err  # each skipped file is named on stderr, with its reason beside it
    frame = __import__("pandas").read_csv(out / "cka.csv")
    assert np.isfinite(frame["cka"]).all()


def test_app_upload_path_names_every_bad_upload_and_uses_the_rest():
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    sys.path.insert(0, str(ROOT / "app"))
    files = catalogue_bytes()
    bad = {n for n, (_, e) in files.items() if e == "skip"}
    at = AppTest.from_file(str(ROOT / "app" / "Home.py"), default_timeout=180)
    at.session_state["lab.source"] = "uploads"
    at.session_state["lab.model_a"] = at.session_state["lab.model_b"] = "test_vit@random"
    at.run()
    uploads = [(n, data, "application/octet-stream") for n, (data, _) in files.items()]
    at.sidebar.file_uploader(key="w.uploads").set_value(uploads).run()
    assert not at.exception, [e.message for e in at.exception]
    # as shown: the names are escaped for Markdown (lab.md_plain), so read them with the escapes removed
    warning = re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", " ".join(w.value for w in at.sidebar.warning)).replace("\u2060", "")
    assert f"{len(bad)} of {len(files)} uploads cannot be used" in warning
    for name in bad:
        assert f"'{name}'" in warning, name
    for name in set(files) - bad:
        assert f"'{name}'" not in warning, name
    assert len(at.session_state["lab.uploads"]) == len(files)
    # the engine side of the same path: every valid upload decodes, in the uploads' order
    src = vitlab.uploads_source([(n, d) for n, d, _ in uploads])
    batch = decode(src, plan_batches(src, range(len(src)), len(src))[0], 224)
    assert {n for n, _ in batch.skipped} == bad and set(batch.ids) == set(files) - bad


def test_folder_only_entries_are_in_the_catalogue(catalogue):
    _, expected = catalogue
    assert set(FOLDER_ONLY) <= set(expected)
