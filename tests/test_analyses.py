"""The table of analyses: every row is complete, and one new row (a toy engine function) is all it takes to get a
CLI command with flags, outputs and run.json, an app page entry and a line in the docs index."""

from __future__ import annotations

import dataclasses
import inspect
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import vitlab
from vitlab import table
from vitlab.cli import build_parser, main
from vitlab.inputs.data import iter_images, select, to_tensor
from vitlab.options import DataOptions, option

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", list(table.ANALYSES))
def test_every_row_is_complete(name):
    a = table.ANALYSES[name]
    assert a.arity in table.ARITIES and a.title and a.help and a.figure
    assert dataclasses.is_dataclass(a.options) and a.options.__dataclass_params__.frozen
    for f in dataclasses.fields(a.options):
        assert f.metadata.get("help"), f"{name}: option {f.name} has no help"
    positional = [p.name for p in inspect.signature(a.engine).parameters.values() if p.kind != p.KEYWORD_ONLY]
    assert positional[-2:] == ["opts", "run"]
    if a.page:
        assert (ROOT / "app" / "views" / f"{a.page}.py").is_file()


def test_the_tour_steps_are_the_rows_claims_and_cover_every_claim_once():
    from vitlab import tour

    steps = table.tour_steps()
    assert sorted(steps) == sorted(tour.CLAIMS) and len(steps) == len(set(steps))
    assert table.ANALYSES["cka"].claims == ("cka",) and not table.ANALYSES["attention-parity"].claims


def test_every_row_is_a_command_with_its_option_flags():
    parser = build_parser()
    sub = next(x for x in parser._actions if x.dest == "command")
    for name, a in table.ANALYSES.items():
        flags = {o for act in sub.choices[name]._actions for o in act.option_strings}
        for f in dataclasses.fields(a.options):
            assert (f.metadata.get("flag") or "--" + f.name.replace("_", "-")) in flags, (name, f.name)
        assert {"--data", "--out", "--device"} <= flags and ("--no-cache" in flags) == a.cache


# ---------------------------------------------------------------- a toy analysis, added as one row


@dataclass(frozen=True)
class BrightnessOptions(DataOptions):
    images: int | None = option(6, "number of images", short="-n")
    channel: int = option(0, "input channel to average")
    gamma: float = option(1.0, "gamma applied before averaging")


@dataclass
class BrightnessResult:
    model: str
    values: np.ndarray  # (n,) per image
    gamma: float

    def to_frame(self):
        return pd.DataFrame({"model": self.model, "image": np.arange(len(self.values)), "brightness": self.values})

    def headline(self) -> list[str]:
        return [f"{self.model}: mean brightness {self.values.mean():.4f} over {len(self.values)} images"]


def brightness(loaded, source, opts: BrightnessOptions, run: vitlab.Run) -> BrightnessResult:
    """Mean of one input channel of each image as the model sees it (after its transform), raised to gamma."""
    values = [float(np.mean(np.abs(to_tensor([img], loaded)[0, opts.channel].numpy()) ** opts.gamma))
              for _, img in iter_images(source, select(source, opts.images, opts.shuffle))]
    run.info.batches_computed += 1
    return BrightnessResult(loaded.label, np.array(values), opts.gamma)


def brightness_chart(result, opts) -> dict:
    import altair as alt

    return {"brightness": alt.Chart(result.to_frame()).mark_bar().encode(x="image:O", y="brightness:Q")}


@pytest.fixture
def toy():
    row = table.register(table.Analysis(
        "brightness", "Input brightness", "-", "one", BrightnessOptions, brightness,
        "mean input brightness per image (a toy)", tables=lambda r: {"brightness": r.to_frame()},
        charts=brightness_chart, record=lambda r, o: {"mean": float(r.values.mean())}, shards=False,
        docs="similarity"))
    yield row
    del table.ANALYSES["brightness"]


def test_a_new_row_is_a_cli_command_with_flags_outputs_and_run_json(toy, tmp_path, capsys):
    out = tmp_path / "b"
    assert main(["brightness", "-m", "test_vit@random", "-n", "3", "--gamma", "2", "--no-cache", "-o", str(out)]) == 0
    frame = pd.read_csv(out / "brightness.csv")
    loaded = vitlab.load("test_vit@random", "cpu")
    source = vitlab.open_source("samples")
    want = [np.mean(np.abs(loaded.transform(source.load(i).convert("RGB"))[0].numpy().astype(np.float64)) ** 2)
            for i in range(3)]
    np.testing.assert_allclose(frame["brightness"], want, rtol=1e-6)
    meta = json.loads((out / "run.json").read_text())
    assert meta["command"] == "brightness" and meta["gamma"] == 2.0 and meta["images"] == 3
    assert meta["mean"] == pytest.approx(np.mean(want), rel=1e-6) and meta["batches_computed"] == 1
    assert "mean brightness" in capsys.readouterr().out


def test_a_bad_flag_value_is_refused_by_the_parser(toy):
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["brightness", "-m", "test_vit@random", "--channel", "x"])
    assert e.value.code == 2


def test_a_new_row_has_a_docs_line_and_runs_from_the_table(toy):
    assert "| `vitlab brightness` | mean input brightness per image |" in table.markdown()
    assert table.ANALYSES["brightness"].call(vitlab.load("test_vit@random", "cpu"), vitlab.open_source("samples"),
                                                BrightnessOptions(images=2), vitlab.Run()).values.shape == (2,)


def test_every_command_prints_its_help(capsys):
    """argparse formats help with %: a row whose help holds '95 %' must still print (every row, every flag)."""
    import pytest

    from vitlab import cli

    parser = cli.build_parser()
    names = list(parser._subparsers._group_actions[0].choices)
    assert set(vitlab.ANALYSES) <= set(names) and "report" in names
    for name in ["", *names]:
        with pytest.raises(SystemExit) as done:
            cli.main([name, "--help"] if name else ["--help"])
        assert done.value.code == 0, name
        assert "usage: vitlab" in capsys.readouterr().out


def test_a_new_row_gets_an_app_page_that_draws_it_and_no_tour_step(toy):
    import sys

    sys.path.insert(0, str(ROOT / "app"))
    from streamlit.testing.v1 import AppTest

    entry = next(p for p in table.pages() if p.url == "brightness")
    assert (entry.file, entry.title, entry.rows) == (table.GENERIC_PAGE, "Input brightness", ("brightness",))
    assert "brightness" not in table.tour_steps()
    at = AppTest.from_file(str(ROOT / "app" / "Home.py"), default_timeout=180)
    for k, v in {"lab.model_a": "test_vit@random", "lab.model_b": "test_resnet@random", "lab.source": "samples",
                 "lab.images": 4, "lab.batch_size": 4}.items():
        at.session_state[k] = v
    at.run()
    urls = {info.get("url_pathname"): h for h, info in at._registered_pages.items()}
    assert "brightness" in urls, sorted(u for u in urls if u)  # the navigation has its page
    at._page_hash = urls["brightness"]  # open it as its navigation link would
    at.run()
    assert not at.exception and not at.error, ([e.message for e in at.exception], [e.value for e in at.error])
    assert at.title[0].value == "Input brightness"
    assert {w.label for w in at.number_input} >= {"channel", "gamma"}
    chart = list(at.get("vega_lite_chart"))
    before = [c.value for c in at.caption if "mean brightness" in c.value]
    assert len(chart) == 1 and len(before) == 1
    at.number_input(key="brightness.gamma").set_value(2.0).run()
    after = [c.value for c in at.caption if "mean brightness" in c.value]
    assert len(after) == 1 and after != before  # the widget drove the engine
    assert not at.exception and [t.value for t in at.title] == ["Input brightness"], [t.value for t in at.title]
    assert any("over 4 images" in c.value for c in at.caption), "|".join(c.value for c in at.caption)
