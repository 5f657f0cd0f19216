"""Issue 46, "a link chooses any folder": the app reads image folders only under VITLAB_FOLDERS (never '/', never a
'..'), a folder's listing is bounded in entries and seconds (app and CLI), and a folder is listed once per change,
not on every rerun (vitlab.inputs.folders)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from PIL import Image

import vitlab
from vitlab.inputs import folders

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "app"
MODELS = {"lab.model_a": "test_vit@random", "lab.model_b": "test_vit@random", "lab.images": 4, "lab.batch_size": 4}


def _images(folder: Path, n: int, start: int = 0) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for k in range(start, start + n):
        Image.new("RGB", (16, 16), (20 * k % 256, 90, 200)).save(folder / f"img{k}.png")
    return folder


@pytest.fixture(autouse=True)
def _fresh_listings():
    folders.forget()
    yield
    folders.forget()


@pytest.fixture()
def scans(monkeypatch):
    """Every os.scandir of a folder, by resolved path (os.walk calls it too: the old listing is counted as well)."""
    seen: list[Path] = []
    real = os.scandir

    def counting(path="."):
        seen.append(Path(os.fspath(path)).resolve())
        return real(path)

    monkeypatch.setattr(os, "scandir", counting)
    return seen


# ------------------------------------------------------------------------------------------ which folders


def test_check_folder_takes_a_folder_under_the_roots_and_refuses_the_rest(tmp_path, monkeypatch):
    inside, outside = _images(tmp_path / "in" / "cats", 1).parent, _images(tmp_path / "out", 1)
    monkeypatch.setenv("VITLAB_FOLDERS", str(inside))
    assert folders.check_folder(str(inside / "cats")) == (inside / "cats").resolve()
    cases = {
        "/": "is the root of the file system",
        f"{inside}/cats/..": "holds a '..'",
        f"{inside}/../in/cats": "holds a '..'",
        str(outside): "is outside the folders this server reads (VITLAB_FOLDERS: ",
        str(outside / "missing"): "is outside the folders",  # outside is said before missing: nothing leaks
        str(inside / "missing"): "does not exist",
        str(inside / "cats" / "img0.png"): "is not a folder",
        "": "no folder given",
    }
    for text, words in cases.items():
        with pytest.raises(vitlab.VitlabError) as e:
            folders.check_folder(text)
        assert words in str(e.value), (text, str(e.value))
    message = str(pytest.raises(vitlab.VitlabError, folders.check_folder, str(outside)).value)
    assert str(outside) in message and str(inside) in message and "add it to VITLAB_FOLDERS" in message
    # a symbolic link inside the roots to a folder outside them is outside: links are resolved first
    (inside / "elsewhere").symlink_to(outside, target_is_directory=True)
    assert "is outside" in str(pytest.raises(vitlab.VitlabError, folders.check_folder, str(inside / "elsewhere")).value)
    # the root stays refused even when VITLAB_FOLDERS opens the whole disk on purpose; a folder under it is then read
    monkeypatch.setenv("VITLAB_FOLDERS", "/")
    assert "root of the file system" in str(pytest.raises(vitlab.VitlabError, folders.check_folder, "/").value)
    assert folders.check_folder(str(outside)) == outside.resolve()


def test_the_default_roots_are_home_and_the_working_folder_never_the_disk(monkeypatch, tmp_path):
    monkeypatch.delenv("VITLAB_FOLDERS", raising=False)
    monkeypatch.delenv("VITLAB_DATA", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert folders.allowed_roots() == (tmp_path.resolve(), Path.cwd().resolve())
    monkeypatch.setenv("VITLAB_DATA", str(tmp_path / "data"))  # the server's own default images are read too
    assert (tmp_path / "data").resolve() in folders.allowed_roots()
    monkeypatch.setenv("HOME", "/")  # a service whose home is '/' does not open the disk by default
    assert Path("/") not in folders.allowed_roots()


# ------------------------------------------------------------------------------------------ bounded listing


def test_a_listing_stops_past_its_entries_or_seconds_in_words(tmp_path, monkeypatch, capfd):
    from vitlab import cli

    folder = _images(tmp_path / "imgs", 8)
    monkeypatch.setenv("VITLAB_FOLDER_FILES", "5")
    with pytest.raises(vitlab.VitlabError, match=r"holds more than 5 entries .*choose a smaller folder"):
        vitlab.open_source(str(folder))
    # the command line reads any folder its user types, but within the same bound, said in words
    rc = cli.main(["cka", "-m", "test_vit@random", "-d", str(folder), "--device", "cpu", "--no-cache",
                   "-o", str(tmp_path / "o")])
    err = capfd.readouterr().err
    assert rc != 0 and "holds more than 5 entries" in err and "Traceback" not in err, err
    monkeypatch.setenv("VITLAB_FOLDER_FILES", "8")  # 8 entries are allowed: the bound is 'more than'
    assert len(vitlab.open_source(str(folder))) == 8
    monkeypatch.setenv("VITLAB_FOLDER_SECONDS", "1e-9")
    with pytest.raises(vitlab.VitlabError, match=r"took longer than 1e-09 s to list .*choose a smaller folder"):
        vitlab.open_source(str(folder))
    monkeypatch.setenv("VITLAB_FOLDER_SECONDS", "soon")
    with pytest.raises(vitlab.VitlabError, match="VITLAB_FOLDER_SECONDS must be a number of seconds above 0"):
        vitlab.open_source(str(folder))


def test_a_too_big_folder_is_not_walked_again_until_it_changes(tmp_path, monkeypatch, scans):
    folder = _images(tmp_path / "imgs", 8)
    monkeypatch.setenv("VITLAB_FOLDER_FILES", "5")
    for _ in range(3):
        with pytest.raises(vitlab.VitlabError, match="holds more than 5 entries"):
            vitlab.open_source(str(folder))
    assert scans.count(folder.resolve()) == 1
    for k in range(4):
        (folder / f"img{k}.png").unlink()
    assert len(vitlab.open_source(str(folder))) == 4 and scans.count(folder.resolve()) == 2


# ------------------------------------------------------------------------------------------ the app


def _app(source: str):
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    sys.path.insert(0, str(APP))
    at = AppTest.from_file(str(APP / "Home.py"), default_timeout=180)
    for k, v in {**MODELS, "lab.source": source}.items():
        at.session_state[k] = v
    return at


def _errors(at) -> list[str]:
    return [e.value.replace("\\", "") for e in at.error]  # md_plain's escapes off, to read the words


@pytest.mark.parametrize("case", ["root", "dotdot", "outside"])
def test_the_sidebar_refuses_a_folder_it_may_not_read_and_lists_nothing(case, tmp_path, monkeypatch, scans):
    inside, outside = _images(tmp_path / "in", 4), _images(tmp_path / "out", 4)
    monkeypatch.setenv("VITLAB_FOLDERS", str(inside))
    typed, words, target = {
        "root": ("/", "is the root of the file system", Path("/")),
        "dotdot": (f"{inside}/../out", "holds a '..'", outside.resolve()),
        "outside": (str(outside), "is outside the folders this server reads", outside.resolve()),
    }[case]
    at = _app(str(inside))
    at.run()
    assert not _errors(at), _errors(at)
    at.sidebar.text_input(key="w.folder").set_value(typed).run()  # typed (or linked) into the sidebar's box
    assert not at.exception, [e.message for e in at.exception]
    assert any(words in e for e in _errors(at)), _errors(at)
    assert target not in scans and Path("/") not in scans, sorted(set(scans))


def test_the_localization_reference_folder_refuses_dotdot_and_lists_nothing(tmp_path, monkeypatch, scans):
    inside, outside = _images(tmp_path / "in", 4), _images(tmp_path / "out", 4)
    monkeypatch.setenv("VITLAB_FOLDERS", str(inside))
    at = _app(str(inside))
    at.session_state["loc.ref"] = "folder"
    at.session_state["loc.ref.folder"] = f"{inside}/../out"
    at.run()
    at.switch_page("views/localization.py").run()
    assert not at.exception, [e.message for e in at.exception]
    assert at.text_input(key="loc.ref.folder").value == f"{inside}/../out"
    assert any("holds a '..': type the folder's own path" in e for e in _errors(at)), _errors(at)
    assert outside.resolve() not in scans, sorted(set(scans))


def test_a_folder_is_listed_once_across_reruns_and_again_when_it_changes(tmp_path, monkeypatch, scans):
    folder = _images(tmp_path / "in" / "photos", 4)
    monkeypatch.setenv("VITLAB_FOLDERS", str(tmp_path / "in"))
    at = _app(str(folder))
    at.run()
    assert not _errors(at), _errors(at)
    assert any("4 images" in m.value for m in at.main.markdown)
    at.run()
    at.run()
    assert scans.count(folder.resolve()) == 1  # three runs (each asks for the source and its key several times)
    _images(folder, 1, start=4)  # a new file: the folder's time changes, so it is listed again, once
    at.run()
    at.run()
    assert scans.count(folder.resolve()) == 2
    assert any("5 images" in m.value for m in at.main.markdown), [m.value for m in at.main.markdown]
    at.sidebar.button(key="w.folder.reload").click().run()  # "Reload folder": listed again at once
    assert scans.count(folder.resolve()) == 3
