"""Issue 24, hardening II: one test per item (each fails on the main before the fix).

1 ``--out`` removes and writes only its own files; 2 the cache heals without throwing a good cache away and
``cache clear`` removes only the cache; 3 no image hangs a run or uses gigabytes; 4 no good image is lost and no
image file is silently ignored; 5 the app is local wherever it is started. The catalogue of hostile inputs across
these classes is in tests/test_hardening.py (``test_catalogue_*``).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bad_inputs
from vitlab import cli, table
from vitlab.inputs import images as vitlab_images
from vitlab.options import DataOptions, option

ROOT = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------------------------------ 1. --out

@dataclass(frozen=True)
class TinyOptions(DataOptions):
    images: int | None = option(2, "number of images", short="-n")
    pairs: int = option(2, "how many extra CSVs to write")


@dataclass
class TinyResult:
    pairs: int

    def headline(self) -> list[str]:
        return [f"{self.pairs} pairs"]


DURING_RUN: list = []  # callables run while the command computes (a user saving into --out, say)


def _tiny_engine(loaded, source, opts, run):
    for act in DURING_RUN:
        act()
    return TinyResult(opts.pairs)


@pytest.fixture
def tiny():
    row = table.register(table.Analysis(
        "tiny-out", "Tiny", "-", "one", TinyOptions, _tiny_engine, "writes a few CSVs (a test row)",
        tables=lambda r: {f"pair_{k}": pd.DataFrame({"k": [k]}) for k in range(r.pairs)}, shards=False,
        cache=False, docs="similarity"))
    yield row
    del table.ANALYSES["tiny-out"]
    DURING_RUN.clear()


def _tiny(out: Path, pairs: int = 2) -> int:
    return cli.main(["tiny-out", "-m", "test_vit@random", "--device", "cpu", "--pairs", str(pairs), "-o", str(out)])


def test_1_files_saved_into_out_during_a_run_are_never_removed(tiny, tmp_path, capfd):
    out = tmp_path / "home"
    out.mkdir()
    # what a user (or another program: a shell history, the disk cache) writes into the folder while vitlab runs
    DURING_RUN.append(lambda: [(out / n).write_text("mine") for n in (".bash_history", "cache.db", "notes.txt")])
    assert _tiny(out, 3) == 0
    DURING_RUN.clear()
    assert _tiny(out, 1) == 0  # writes fewer files: its own stale pair_1/pair_2 go, the user's stay
    assert {p.name for p in out.iterdir()} == {".bash_history", "cache.db", "notes.txt", "pair_0.csv", "run.json",
                                               ".vitlab-files.json"}
    record = json.loads((out / ".vitlab-files.json").read_text())
    assert sorted(record["files"]) == ["pair_0.csv", "run.json"]  # exactly what the writers returned, and run.json
    assert "Traceback" not in capfd.readouterr().err


def test_1_a_file_the_user_replaced_after_the_run_is_theirs(tiny, tmp_path):
    out = tmp_path / "o"
    assert _tiny(out, 2) == 0
    (out / "pair_1.csv").write_text("my own table, saved over vitlab's\n")
    assert _tiny(out, 1) == 0
    assert (out / "pair_1.csv").read_text().startswith("my own table")


def test_1_symbolic_links_in_out_are_replaced_never_followed(tiny, tmp_path):
    out, outside = tmp_path / "o", tmp_path / "outside"
    out.mkdir()
    outside.mkdir()
    for name in ("run.json", ".vitlab-files.json", "pair_0.csv"):
        (outside / name).write_text("precious")
        (out / name).symlink_to(outside / name)
    assert _tiny(out, 1) == 0
    assert all((outside / n).read_text() == "precious" for n in ("run.json", ".vitlab-files.json", "pair_0.csv"))
    assert not any((out / n).is_symlink() for n in ("run.json", ".vitlab-files.json", "pair_0.csv"))
    assert json.loads((out / "run.json").read_text())["command"] == "tiny-out"


@pytest.mark.parametrize("record", ['{"files": 5}', '{"files": "abc"}', '["a"]', "{not json", '{"files": ["a"]}'])
def test_1_a_record_vitlab_did_not_write_is_ignored_with_a_notice(tiny, tmp_path, capfd, record):
    out = tmp_path / "o"
    out.mkdir()
    for name in "abc":
        (out / name).write_text("user file")
    (out / ".vitlab-files.json").write_text(record)
    assert _tiny(out, 1) == 0
    err = capfd.readouterr().err
    assert "Traceback" not in err and "ignored" in err and ".vitlab-files.json" in err
    assert all((out / n).read_text() == "user file" for n in "abc")
    assert (out / "pair_0.csv").is_file()


def test_1_a_well_formed_record_cannot_reach_outside_out_or_through_links(tiny, tmp_path):
    out, outside = tmp_path / "o", tmp_path / "outside"
    out.mkdir()
    outside.mkdir()
    victim = outside / "victim.txt"
    victim.write_text("precious")
    st = victim.stat()
    (out / "link.txt").symlink_to(victim)
    (out / "sub").symlink_to(outside, target_is_directory=True)
    entry = [st.st_size, st.st_mtime_ns]
    files = {"../outside/victim.txt": entry, str(victim): entry, "link.txt": entry, "sub/victim.txt": entry,
             "./link.txt": entry}
    (out / ".vitlab-files.json").write_text(json.dumps({"format": "vitlab-outputs/2", "files": files}))
    assert _tiny(out, 1) == 0
    assert victim.read_text() == "precious" and (out / "link.txt").is_symlink()


def test_1_out_naming_a_file_is_refused_before_any_model_runs(tiny, tmp_path, capfd, monkeypatch):
    from vitlab import models

    def no_model(*a, **k):
        raise AssertionError("a model was loaded before --out was checked")

    monkeypatch.setattr(models, "load", no_model)
    target = tmp_path / "results.txt"
    target.write_text("keep me")
    for out in (target, target / "sub"):
        assert _tiny(out) == 2
        err = capfd.readouterr().err
        assert "Traceback" not in err and "not a folder" in err and err.count("\n") == 1
    assert target.read_text() == "keep me"


# ------------------------------------------------------------------------------------------ 2. the cache

def _images(root: Path, n: int = 8, bad: int = 0) -> Path:
    from PIL import Image

    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for k in range(n):
        Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(root / f"img{k:02d}.png")
    for k in range(bad):
        (root / f"bad{k}.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(30))  # a PNG signature, then nothing
    return root


def _cka(folder: Path, cache_dir: Path, out: Path, *extra: str) -> int:
    return cli.main(["cka", "-m", "test_vit@random", "-d", str(folder), "-b", "8", "--device", "cpu", "--cache-dir",
                     str(cache_dir), "-o", str(out), "--bootstrap", "0", *extra])


def _unwritable(monkeypatch, message: str) -> None:
    """Make every attempt to open a diskcache for writing fail as sqlite does on a full disk or a read-only
    folder (chmod cannot stop root, so the failure is raised where sqlite raises it)."""
    import sqlite3

    import diskcache

    def refuse(self, *a, **k):
        raise sqlite3.OperationalError(message)

    monkeypatch.setattr(diskcache.Cache, "__init__", refuse)


@pytest.mark.parametrize("message", ["database or disk is full", "attempt to write a readonly database",
                                     "database is locked"])
def test_2_a_cache_that_cannot_be_written_is_read_not_moved_aside(tmp_path, monkeypatch, capfd, message):
    folder, cache_dir = _images(tmp_path / "imgs"), tmp_path / "cache"
    assert _cka(folder, cache_dir, tmp_path / "a") == 0
    first = json.loads((tmp_path / "a" / "run.json").read_text())
    assert first["batches_computed"] == 1
    capfd.readouterr()
    _unwritable(monkeypatch, message)
    assert _cka(folder, cache_dir, tmp_path / "b") == 0
    err = capfd.readouterr().err
    again = json.loads((tmp_path / "b" / "run.json").read_text())
    assert again["batches_from_cache"] == 1 and again["batches_computed"] == 0  # the good cache was read
    assert not list(cache_dir.glob("damaged-*")) and (cache_dir / "cache.db").is_file()
    assert err.count("cannot write to the cache") == 1 and message in err and "Traceback" not in err
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "a" / "cka.csv"), pd.read_csv(tmp_path / "b" / "cka.csv"))
    assert cli.main(["cache", "info", "--cache-dir", str(cache_dir)]) == 0
    out = capfd.readouterr()
    assert "entries" in out.out and "read-only" in out.out and "Traceback" not in out.err
    assert cli.main(["cache", "clear", "--cache-dir", str(cache_dir)]) == 2  # it cannot be changed: said, not a trace
    err = capfd.readouterr().err
    assert "cannot clear the cache" in err and err.count("\n") == 1 and (cache_dir / "cache.db").is_file()


def test_2_a_read_only_cache_folder_is_read(tmp_path, capfd):
    folder, cache_dir = _images(tmp_path / "imgs"), tmp_path / "cache"
    assert _cka(folder, cache_dir, tmp_path / "a") == 0
    if os.geteuid() == 0:
        pytest.skip("root writes into a read-only folder anyway; the monkeypatched variant above covers this")
    files = [cache_dir, *cache_dir.rglob("*")]
    for p in files:
        p.chmod(0o555 if p.is_dir() else 0o444)
    try:
        capfd.readouterr()
        assert _cka(folder, cache_dir, tmp_path / "b") == 0
        err = capfd.readouterr().err
        assert json.loads((tmp_path / "b" / "run.json").read_text())["batches_from_cache"] == 1
        assert err.count("cannot write to the cache") == 1 and not list(cache_dir.glob("damaged-*"))
        assert cli.main(["cache", "clear", "--cache-dir", str(cache_dir)]) == 2
        assert "cannot clear the cache" in capfd.readouterr().err
    finally:
        for p in files:
            p.chmod(0o755 if p.is_dir() else 0o644)


def test_2_a_cache_that_cannot_be_opened_at_all_is_one_warning_and_results_are_written(tmp_path, monkeypatch, capfd):
    folder, cache_dir = _images(tmp_path / "imgs"), tmp_path / "nothing-here"
    _unwritable(monkeypatch, "unable to open database file")
    assert _cka(folder, cache_dir, tmp_path / "o") == 0
    err = capfd.readouterr().err
    assert (tmp_path / "o" / "cka.csv").is_file() and "Traceback" not in err
    assert err.count("goes on uncached") == 1 and not list(cache_dir.glob("damaged-*"))


@pytest.mark.parametrize("value", ["1e10", "1e300", "inf"])
def test_2_a_huge_cache_budget_is_one_line(value, monkeypatch, capfd, tmp_path):
    monkeypatch.setenv("VITLAB_CACHE_GB", value)
    assert cli.main(["cache", "info", "--cache-dir", str(tmp_path)]) == 2
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and f"VITLAB_CACHE_GB={value!r}" in err and "Traceback" not in err


def _user_things(d: Path) -> dict[str, str]:
    things = {"00/holiday.jpg": "photo", "a1/notes.txt": "notes", "damaged-photos/cat.png": "cat",
              "ab/cd/readme.txt": "mine", "damaged-7/cache.db": "not the cache's", "photo.db": "mine"}
    for rel, text in things.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(text)
    return things


@pytest.mark.parametrize("damaged", [False, True])
def test_2_cache_clear_removes_only_what_the_cache_made(tmp_path, capfd, damaged):
    from vitlab.inputs.cache import Store

    d = tmp_path / "cache"
    store = Store(d)
    store.put("big", {"a": np.zeros(40000)})  # over diskcache's inline limit: a value file in a shard folder
    store.put("small", {"a": np.ones(3)})
    store.close()
    values = [p for p in d.rglob("*.val")]
    assert values
    things = _user_things(d)
    if damaged:
        (d / "cache.db").write_bytes(b"garbage, not sqlite" * 50)
        Store(d).close()  # moves it aside (recorded) and starts an empty cache
        assert (d / "damaged-0" / "cache.db").is_file()
        (d / "cache.db").write_bytes(b"garbage, not sqlite" * 50)  # damaged again: clear without opening it
    capfd.readouterr()
    assert cli.main(["cache", "clear", "--cache-dir", str(d)]) == 0
    assert "Traceback" not in capfd.readouterr().err
    assert all((d / rel).read_text() == text for rel, text in things.items())
    assert not (d / "damaged-0").exists() and not any(p.exists() for p in values)
    if damaged:
        assert not (d / "cache.db").exists()
    else:  # a readable cache is emptied in place
        assert Store(d).info()["entries"] == 0


def test_2_cache_clear_refuses_a_folder_that_holds_no_cache(tmp_path, capfd):
    d = tmp_path / "photos"
    things = _user_things(d)
    assert cli.main(["cache", "clear", "--cache-dir", str(d)]) == 2
    err = capfd.readouterr().err
    assert "holds no vitlab cache" in err and err.count("\n") == 1
    assert all((d / rel).read_text() == text for rel, text in things.items())
    assert not (d / "cache.db").exists()


def test_2_a_pickled_entry_in_the_cache_is_never_loaded(tmp_path):
    import diskcache

    from vitlab.inputs.cache import Store

    d, flag = tmp_path / "cache", tmp_path / "pwned"
    with diskcache.Cache(str(d)) as c:  # a planted entry under a key vitlab would read
        c.set("a:k", Planted(str(flag)))
    store = Store(d)
    assert store.get("k") is None and not flag.exists()


class Planted:
    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (Path(self.path).write_text, ("code ran",))


# ------------------------------------------------------------------------------------------ 3. decoding bounds

def test_3_a_many_page_tiff_is_not_walked_to_count_its_pages(monkeypatch):
    from bad_inputs import tiff_pages
    from PIL import TiffImagePlugin

    from vitlab.inputs import images

    seeks: list[int] = []
    real = TiffImagePlugin.TiffImageFile._seek
    monkeypatch.setattr(TiffImagePlugin.TiffImageFile, "_seek", lambda self, f: (seeks.append(f), real(self, f))[1])
    img = images.decode(tiff_pages(3000), "pages.tif")
    assert img.size == (1, 1) and img.info[images.NOTES] == ["animated (several frames): the first frame is used"]
    assert max(seeks) <= 1  # one bounded look at the second page, not 3000


def test_3_a_gif_second_frame_is_found_without_decoding_the_first(monkeypatch):
    import io

    from PIL import GifImagePlugin, Image

    from vitlab.inputs import images

    seeks: list[int] = []
    real = GifImagePlugin.GifImageFile._seek
    monkeypatch.setattr(GifImagePlugin.GifImageFile, "_seek", lambda self, f, *a: (seeks.append(f),
                                                                                   real(self, f, *a))[1])
    for frames in (1, 2, 5):
        buf = io.BytesIO()
        first, *rest = [Image.new("RGB", (300, 200), (40 * k, 0, 0)) for k in range(frames)]
        first.save(buf, "GIF", save_all=True, append_images=rest)
        img = images.decode(buf.getvalue(), "a.gif")
        assert bool(img.info[images.NOTES]) == (frames > 1)
    assert max(seeks, default=0) == 0


# the decoded size of a 10×3,000,000 strip in Pillow (4 bytes a pixel, a row pointer and a block per row) is ~140 MiB;
# converting it at full size (alpha on white, 16-bit to float) took 4-8x that before issue 24
STRIP_MIB = 320


def test_3_strips_of_every_mode_decode_within_their_decoded_size(tmp_path):
    import subprocess
    import sys

    from bad_inputs import png_strip

    cases = {"la": ("LA", 10, 3_000_000), "rgba": ("RGBA", 10, 3_000_000), "i16": ("I;16", 10, 3_000_000),
             "palette": ("P", 3_000_000, 10)}
    for name, (mode, w, h) in cases.items():
        (tmp_path / f"{name}.png").write_bytes(png_strip(w, h, mode))
    code = ("import json, sys; from pathlib import Path; from vitlab.inputs import images\n"
            "def st(f): return next(int(x.split()[1]) for x in Path('/proc/self/status').read_text().splitlines() "
            "if x.startswith(f + ':')) / 1024\n"
            "out = {}\n"
            "for p in sorted(Path(sys.argv[1]).glob('*.png')):\n"
            "    data = p.read_bytes(); Path('/proc/self/clear_refs').write_text('5'); before = st('VmRSS')\n"
            "    img = images.decode(data, p.name, 248)\n"
            "    out[p.stem] = [st('VmHWM') - before, list(img.size), img.mode, img.info[images.NOTES]]\n"
            "print(json.dumps(out))\n")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    got = json.loads(done.stdout.strip().splitlines()[-1])
    for name, (peak, size, mode, notes) in got.items():
        assert peak < STRIP_MIB, (name, peak)
        assert sorted(size) == [10, 160] and "strip" in notes[0], (name, size, notes)
    assert got["la"][2] == "L" and got["rgba"][2] == "RGB" and got["palette"][2] == "RGB"


# ------------------------------------------------------------------------------------------ 4. no good image lost

def test_4_every_readable_image_is_used_and_a_rerun_finds_the_cache(tmp_path, capfd):
    folder = _images(tmp_path / "imgs", 19, bad=5)
    assert _cka(folder, tmp_path / "cache", tmp_path / "a") == 0
    cap = capfd.readouterr()
    err = cap.err
    run = json.loads((tmp_path / "a" / "run.json").read_text())
    assert run["images"] == 19 and not run["dropped_batches"], err  # batches of 8, 8 and 3 + the short one's 3
    assert sorted(Path(s).name for s in run["skipped_images"]) == [f"bad{k}.png" for k in range(5)]
    assert "CKA over 19 images" in cap.out
    assert _cka(folder, tmp_path / "cache", tmp_path / "b") == 0
    again = json.loads((tmp_path / "b" / "run.json").read_text())
    assert again["batches_computed"] == 0 and again["batches_from_cache"] == run["batches_computed"] == 2
    assert again["skipped_images"] == run["skipped_images"]


def test_4_image_files_pillow_cannot_read_are_named_with_what_to_do(tmp_path, capfd):
    folder = _images(tmp_path / "imgs", 8)
    for name in ("photo.heic", "photo.HEIF", "shot.cr2", "raw.dng", "scan.jxl"):
        (folder / name).write_bytes(b"\0\0\0\x18ftypheic" + bytes(64))
    assert _cka(folder, tmp_path / "cache", tmp_path / "o") == 0
    err = capfd.readouterr().err
    run = json.loads((tmp_path / "o" / "run.json").read_text())
    reasons = {Path(r["image"]).name: r["reason"] for r in run["skipped_reasons"]}
    assert set(reasons) == {"photo.heic", "photo.HEIF", "shot.cr2", "raw.dng", "scan.jxl"} and run["images"] == 8
    assert "HEIC" in reasons["photo.heic"] and "convert it to JPEG or PNG" in reasons["photo.heic"]
    assert "camera RAW" in reasons["raw.dng"] and "export it as JPEG or PNG" in reasons["shot.cr2"]
    assert "photo.heic" in err


def test_4_file_names_that_are_not_utf8_work(tmp_path, capfd):
    folder = _images(tmp_path / "imgs", 7)
    raw = os.fsencode(folder)
    try:
        os.rename(os.fsencode(folder / "img00.png"), raw + b"/caf\xe9-\xff.png")  # Latin-1 bytes: not UTF-8
        with open(raw + b"/bad-\xfe.png", "wb") as f:
            f.write(b"not a png")
    except OSError as e:
        pytest.skip(f"this file system refuses names that are not UTF-8 ({e})")
    assert _cka(folder, tmp_path / "cache", tmp_path / "o") == 0
    err = capfd.readouterr().err
    assert "Traceback" not in err and "UnicodeEncodeError" not in err
    run = json.loads((tmp_path / "o" / "run.json").read_text(encoding="utf-8"))
    assert run["images"] == 7 and [Path(s).name for s in run["skipped_images"]] == ["bad-\\xfe.png"]
    assert len(pd.read_csv(tmp_path / "o" / "cka.csv")) > 0


def test_4_a_short_last_batch_joins_the_one_before():
    from vitlab.inputs.data import FilesSource, plan_batches

    src = FilesSource([f"{k}.png" for k in range(19)])
    assert [len(b.indices) for b in plan_batches(src, range(19), 8, 4)] == [8, 11]
    assert [len(b.indices) for b in plan_batches(src, range(19), 8)] == [8, 8, 3]  # per-image statistics
    assert [len(b.indices) for b in plan_batches(src, range(3), 8, 4)] == [3]  # nothing to join: dropped, named


# ------------------------------------------------------------------------------------------ 5. the app

def test_5_vitlab_app_is_local_from_any_folder_and_passes_arguments_through(tmp_path, monkeypatch):
    calls: list[list[str]] = []
    monkeypatch.setattr(cli.app, "serve", lambda cmd: calls.append(cmd) or 0)  # serve(): the child, signals forwarded
    monkeypatch.chdir(tmp_path)  # no .streamlit/config.toml here
    assert cli.main(["app"]) == 0
    cmd = calls[-1]
    assert cmd[1:4] == ["-m", "streamlit", "run"] and Path(cmd[4]) == ROOT / "app" / "serve.py"
    flags = dict(zip(cmd[5::2], cmd[6::2]))
    assert flags["--server.address"] == "localhost" and flags["--browser.gatherUsageStats"] == "false"
    assert flags["--server.maxUploadSize"] == str(vitlab_images.MAX_UPLOAD_BYTES // 2**20)
    assert cli.main(["app", "--server.address", "0.0.0.0", "--server.port=8502"]) == 0  # on purpose: the user's wins
    cmd = calls[-1]
    assert cmd.count("--server.address") == 1 and cmd[cmd.index("--server.address") + 1] == "0.0.0.0"
    assert cmd[-1] == "--server.port=8502"
    with pytest.raises(SystemExit):
        cli.main(["cache", "info", "--server.address", "x"])  # other commands still refuse unknown flags


def test_5_the_readme_starts_the_app_with_vitlab_app_and_no_icon_is_fetched():
    import re

    readme = (ROOT / "README.md").read_text()
    first = next(line.strip() for line in readme.splitlines() if line.startswith("    "))
    assert first == "python -m pip install -e . && vitlab app"
    for page in (ROOT / "app").rglob("*.py"):
        # a Material favicon is fetched from fonts.gstatic.com by the browser (FACTS.md); emoji or files are not
        assert not re.search(r"page_icon\s*=\s*['\"]:material/", page.read_text()), page
