"""Issue 24, hardening II: one test per item (each fails on the main before the fix).

1 ``--out`` removes and writes only its own files; 2 the cache heals without throwing a good cache away and
``cache clear`` removes only the cache; 3 no image hangs a run or uses gigabytes; 4 no good image is lost and no
image file is silently ignored; 5 the app is local wherever it is started. The catalogue of hostile inputs across
these classes is in tests/test_hardening.py (``test_catalogue_*``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import vitlab
from vitlab import analyses, cli
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
    row = analyses.register(analyses.Analysis(
        "tiny-out", "Tiny", "-", "one", TinyOptions, _tiny_engine, "writes a few CSVs (a test row)",
        tables=lambda r: {f"pair_{k}": pd.DataFrame({"k": [k]}) for k in range(r.pairs)}, shards=False,
        cache=False, docs="similarity"))
    yield row
    del analyses.ANALYSES["tiny-out"]
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
