"""Links that reopen a view and the code behind every view (issue 41; app/lab/links.py, vitlab/cli/recipe.py).

- every row's command parses, with vitlab's own CLI parser, into the very options it was made from;
- a link's hostile values (unknown model, huge counts, path traversal, script, wrong types, unknown keys) get the
  page's clear error in words, never a crash, never a value the sidebar would refuse;
- each analysis page's shown command and Python call (read from the page, not re-made here) write the CSV the page
  offers for download.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import re
import shlex
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.runtime import media_file_manager  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

from vitlab import cli, table  # noqa: E402
from vitlab.cli import recipe  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "app"
for p in (str(ROOT), str(APP)):
    if p not in sys.path:
        sys.path.insert(0, p)
ZOO_READY = all((ROOT / "assets" / "zoo" / f"{n}.safetensors").is_file() for n in ("vit-cls", "resnet"))
LINK = ({"a": "zoo:vit-cls", "b": "zoo:resnet", "data": "fashion-mnist:test", "n": "32", "bs": "16"} if ZOO_READY
        else {"a": "test_vit@random", "b": "test_resnet@random", "data": "samples", "n": "8", "bs": "4"})
TIMEOUT = 300

pytestmark = pytest.mark.usefixtures("app_cache")


def _models(row):
    return {"one": ["zoo:vit-cls"], "pair": ["zoo:vit-cls", "zoo:resnet"], "many": ["zoo:vit-cls", "my model"],
            "pairs": [("zoo:vit-cls", "zoo:vit-cls@random")]}[row.arity]


def _changed(row):
    """The row's options with every field that has a plain type moved off its default."""
    values = {}
    for f in dataclasses.fields(row.options):
        base = str(f.type).split("|")[0].strip()
        choices = f.metadata.get("choices")
        if choices and len(choices) > 1:
            values[f.name] = next(c for c in choices if c != f.default)
        elif f.name == "sketch_dims":  # a forced sketch must be at least as wide as svd_dims (check_params)
            values[f.name] = 64
        elif base == "int" and not choices:
            values[f.name] = (f.default or 3) + 1
        elif base == "str" and f.metadata.get("required"):
            values[f.name] = "block1"
        elif base == "bool":
            values[f.name] = not f.default
    return row.options(**values)


@pytest.mark.parametrize("name", list(table.ANALYSES))
def test_every_rows_command_parses_back_into_its_options(name):
    row = table.ANALYSES[name]
    opts = _changed(row)
    models = _models(row)
    words = shlex.split(recipe.command_line(row, models, "/data/my images", opts, "cpu", out="/tmp/o"))
    assert words[:2] == ["vitlab", name]
    parser = argparse.ArgumentParser()
    cli.add_analysis(parser.add_subparsers(), row)
    args = parser.parse_args(words[1:])
    assert cli.options_from_args(row, args) == opts
    assert (args.data, args.device, args.out) == ("/data/my images", "cpu", "/tmp/o")
    if row.arity == "pairs":
        assert [tuple(p) for p in args.pair] == models
    else:
        given = args.model if isinstance(args.model, list) else [args.model]
        assert given + ([args.other] if row.arity == "pair" else []) == models


@pytest.mark.parametrize("name", list(table.ANALYSES))
def test_every_rows_python_call_reaches_its_options_and_engine_through_import_vitlab(name):
    import ast
    import functools

    import vitlab

    row = table.ANALYSES[name]
    code = recipe.python_call(row, _models(row), "samples", _changed(row), "t")
    calls = {t.id: node.value.func for node in ast.parse(code).body if isinstance(node, ast.Assign)
             for t in node.targets if isinstance(node.value, ast.Call)}
    resolve = lambda dotted: functools.reduce(getattr, dotted.split(".")[1:], vitlab)  # noqa: E731
    assert resolve(ast.unparse(calls["opts"])) is row.options
    assert resolve(ast.unparse(calls["result"])) is row.engine


def test_python_call_names_public_objects_and_quotes_what_it_is_given():
    import ast

    row, hostile = table.ANALYSES["skip-ratio"], "x'); import os; ('"
    code = recipe.python_call(row, ["zoo:vit-cls", hostile], "samples", row.options(images=8, batch_size=4),
                              "skip_ratio_summary")
    imports = [n for n in ast.walk(ast.parse(code)) if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert [a.name for n in imports for a in n.names] == ["vitlab"] and repr(hostile) in code  # stays a literal
    assert "opts = vitlab.skips.SkipOptions(images=8, batch_size=4)" in code
    assert "result = vitlab.skips.skip_ratios(models, source, opts," in code
    assert recipe.command_line(row, ["a;rm -rf /", "b"], "samples", row.options()).count("'a;rm -rf /'") == 1
    with pytest.raises(vitlab_error()):
        recipe.command_line(row, ["a", "b"], "uploads", row.options())


def vitlab_error():
    import vitlab

    return vitlab.VitlabError


# ------------------------------------------------------------------------------------------- AppTest: links


def open_link(page: str, params: dict) -> AppTest:
    at = AppTest.from_file(str(APP / "Home.py"), default_timeout=TIMEOUT)
    for k, v in params.items():
        at.query_params[k] = v
    at.switch_page(f"views/{page}.py").run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def errors(at) -> list[str]:
    """The page's errors as read on screen (Markdown escapes removed)."""
    return [re.sub(r"\\(.)", r"\1", e.value).replace("\u2060", "") for e in at.error]


def test_a_link_sets_the_sidebar_and_the_pages_widgets_and_is_written_back():
    at = open_link("skips", {**LINK, "skips.value": "cosine", "skips.block": "2"})
    assert not errors(at)
    assert (at.session_state["lab.model_a"], at.session_state["lab.images"]) == (LINK["a"], int(LINK["n"]))
    assert at.radio(key="skips.value").value == "cosine" and at.number_input(key="skips.block").value == 2
    assert {k: at.query_params[k] for k in ("a", "n", "skips.value", "skips.block")} == \
        {"a": LINK["a"], "n": LINK["n"], "skips.value": "cosine", "skips.block": "2"}
    link = at.code[0].value
    assert "skips.value=cosine" in link and f"n={LINK['n']}" in link and "/skips?" in link


HOSTILE = {
    "n": ("1000000000000", "not a whole number from 4 to 100000"),
    "bs": ("-3", "not a whole number from 4 to 4096"),
    "data": ("../../etc", "absolute path of a folder (without '..')"),
    "device": ("tpu; rm -rf /", "is not one of auto, cpu, cuda"),
    "a": ("zoo:vit-cls<script>alert(1)</script>", "'a' in the link holds one of"),
    "skips.block": ("abc", "is not a whole number; the page keeps its default"),
    "skips.value": ("x" * 5000, "longer than 1000"),
    "<img src=x onerror=alert(1)>": ("1", "is not a setting of vitlab's pages"),
    "lab.source": ("/etc", "is not a setting of vitlab's pages"),
    "skips.go": ("true", "this page has no setting 'skips.go'"),
    "nosuch.key": ("1", "this page has no setting 'nosuch.key'"),
    "b": ("![x](http://example.invalid/x.png)", "holds one of ` < > [ ]"),
    "skips.which": ("[x](javascript:alert(1))", "is not text without ` < > [ ]"),
}


def test_hostile_values_in_a_link_are_named_and_the_page_keeps_its_defaults():
    at = open_link("skips", {**LINK, **{k: v for k, (v, _) in HOSTILE.items()}})
    shown = " | ".join(errors(at))
    for key, (_, words) in HOSTILE.items():
        assert words in shown, (key, shown)
    import lab

    assert at.session_state["lab.images"] == int(LINK["n"]) if "n" not in HOSTILE else lab.env_settings()[0]["images"]
    assert at.session_state["lab.source"] == LINK["data"] and at.session_state["lab.device"] == "auto"
    assert at.number_input(key="skips.block").value == 1 and at.radio(key="skips.value").value == "ratio"
    assert "skips.go" not in at.query_params and "lab.source" not in at.query_params
    assert at.session_state["lab.model_b"] != HOSTILE["b"][0] and at.selectbox(key="skips.which").value == "attn"
    for e in at.error:  # shown as written: no Markdown link, image, HTML tag or code span comes alive
        assert not re.search(r"(?<!\\)[<\[`]", e.value), e.value


def test_a_link_with_an_unknown_model_gets_the_pages_own_error():
    at = open_link("skips", {**LINK, "a": "no_such_model_xyz"})
    assert any("no_such_model_xyz" in e for e in errors(at)), errors(at)
    assert not at.code or "no_such_model_xyz" not in at.code[-1].value  # no result, so no recipe for one


def test_a_link_too_long_to_be_a_view_is_ignored_whole():
    at = open_link("skips", {**LINK, **{f"k{i}": "1" for i in range(60)}})
    assert any("more than 48" in e for e in errors(at))
    import lab

    assert at.session_state["lab.images"] == lab.env_settings()[0]["images"] != int(LINK["n"])


# ------------------------------------------------------------------------------ the code behind each page

# page file, the download key of the CSV the box recomputes, whether that CSV is the whole table (else a part)
PAGES = {
    "skips": ("skips.lines", True, {}),
    "logit_lens": ("lens.chart", True, {"lens.models": '["zoo:vit-cls", "zoo:resnet"]'}),
    "attention": ("att.dist", True, {}),
    "heads": ("heads.chart", True, {}),
    "receptive": ("rf.chart", True, {}),
    "probes": ("probe.chart", True, {"probe.test": "50", "probe.draws": "2"}),
    "checkpoints": ("ckpt.chart", True, {"ckpt.preset": "sidebar", "b": "zoo:vit-cls-10pct"}),
    "models": ("mm.heat", False, {"mm.models": '["zoo:vit-cls", "zoo:resnet"]'}),
    "ablation": ("abl.delta_accuracy", False, {"abl.draws": "2"}),
    "token_norms": ("tn.flags", True, {}),
    "similarity": ("sim.ab", False, {}),
    "localization": ("loc.rate", True, {"n": "64"}),
    "attribution": ("attr.curves", True, {"attr.orders": "2"}),
}


@pytest.fixture()
def deferred(monkeypatch):
    """The download buttons' deferred files of a run, by id: what the browser gets when a button is clicked."""
    made: dict = {}
    original = media_file_manager.MediaFileManager.add_deferred

    def add(self, fn, *args, **kwargs):
        file_id = original(self, fn, *args, **kwargs)
        made[file_id] = fn
        return file_id

    monkeypatch.setattr(media_file_manager.MediaFileManager, "add_deferred", add)
    return made


def _rows(frame, columns) -> list[tuple]:
    import pandas as pd

    out = frame[columns].copy()
    for c in columns:
        if pd.api.types.is_float_dtype(out[c]):
            out[c] = out[c].round(9)
    return sorted(map(tuple, out.astype(str).itertuples(index=False)))


# the pages whose command and Python call run as a user runs them, each in a new process (`python -m vitlab`,
# `python -c`): that nothing of the test's process (imports, loaded models, the app's state) is needed; the other
# pages run the same words in this process (vitlab.cli.main, exec), which checks the same numbers for less
IN_NEW_PROCESSES = ("skips",)


def _run_command(words: list[str], cwd: Path, env: dict, new_process: bool) -> None:
    if new_process:
        done = subprocess.run([sys.executable, "-m", "vitlab", *words[1:]], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        return
    err = StringIO()
    with _chdir(cwd), contextlib.redirect_stderr(err):
        code = cli.main(words[1:])
    assert code == 0, err.getvalue()[-2000:]


def _run_python(code: str, cwd: Path, env: dict, new_process: bool) -> None:
    if new_process:
        done = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        return
    with _chdir(cwd):
        exec(compile(code, "<the page's Python call>", "exec"), {"__name__": "__main__"})  # noqa: S102


@contextlib.contextmanager
def _chdir(folder: Path):
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


@pytest.mark.skipif(not ZOO_READY, reason="the zoo's checkpoints are not in assets/zoo")
@pytest.mark.parametrize("page", list(PAGES))
def test_the_pages_command_and_python_call_write_the_csv_it_offers(page, deferred, tmp_path, monkeypatch):
    import pandas as pd

    import lab

    key, whole, view = PAGES[page]
    at = open_link(page, {**LINK, **view})
    assert not errors(at), errors(at)
    button = next(b for b in at.get("download_button") if b.proto.id.endswith(f"-dl.{key}.csv"))
    offered = pd.read_csv(StringIO(deferred[button.proto.deferred_file_id]().decode()))
    command, python = at.code[1].value, at.code[2].value
    env = {**os.environ, "PYTHONPATH": str(ROOT), "VITLAB_CACHE_DIR": lab.store().info()["directory"],
           "HF_HUB_OFFLINE": "1"}
    for k in ("VITLAB_CACHE_DIR", "HF_HUB_OFFLINE"):  # what the new processes get, this one too
        monkeypatch.setenv(k, env[k])
    new_process = page in IN_NEW_PROCESSES
    words = shlex.split(command)
    assert words[0] == "vitlab"
    _run_command(words, tmp_path, env, new_process)
    out = tmp_path / words[words.index("--out") + 1]
    script = tmp_path / "call"
    script.mkdir()
    _run_python(python, script, env, new_process)
    (csv,) = list(script.glob("*.csv"))
    assert (out / csv.name).is_file(), sorted(p.name for p in out.iterdir())
    for written in (pd.read_csv(out / csv.name), pd.read_csv(csv)):
        assert set(offered.columns) <= set(written.columns)
        mine, theirs = _rows(offered, list(offered.columns)), _rows(written, list(offered.columns))
        assert (mine == theirs) if whole else set(mine) <= set(theirs), (page, mine[:3], theirs[:3])
