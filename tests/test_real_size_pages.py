"""Issue 51, "real size": pages whose defaults fit the models given. Localization draws a layer the model's grid
allows (ResNet-50's first stage, 56x56, has more positions than a map holds), says in words when it measures more
images than were chosen, and its checks use the images it says; the logit lens reads the sidebar's models; the
similarity page names its own control where a model has no CLS token.

Real-size models are sized here on the meta device (no weights, no images): ViT-B/16, ViT-L/16, Mixer-B/16,
ResNet-50, ResNet-152. The pages run on timm's tiny test models, whose ResNet has the same problem as ResNet-50 at
its 160-px input (a 40x40 first stage).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "app"
sys.path.insert(0, str(APP))

import vitlab
from vitlab import localization as loc
from vitlab.charts.words import layer_in_words
from vitlab.errors import VitlabError
from vitlab.inputs import taps

TIMEOUT = 600


def meta_model(name: str, **kwargs):
    import timm
    import torch

    with torch.device("meta"):
        return timm.create_model(name, **kwargs)


def activation_grids(loaded, names: list[str], size=None) -> dict:
    """The grids read off a real forward of one blank image (the reference the shape-only grids must equal)."""
    import torch

    size = size or loaded.data_config["input_size"]
    with taps.capture(loaded.model, names) as got, torch.inference_mode():
        loaded.model(torch.zeros(1, *size))
    return {t: tuple(got[t].shape[-2:]) for t in names}


# ------------------------------------------------------------------------------------------ grids without images


@pytest.mark.parametrize("spec, size", [("resnet50@random:0", None), ("resnet50@random:0", (3, 100, 90)),
                                        ("zoo:resnet", None), ("test_resnet@random:0", None)])
def test_a_cnns_grids_before_any_image_equal_its_activations(spec, size):
    """The meta-device forward gives every block's grid exactly, odd input sizes and the zoo's stem surgery (no
    max-pool: timm's feature_info still says reduction 4) included."""
    m = vitlab.load(spec, "cpu")
    grids = loc.layer_grids(m.model, size or m.data_config["input_size"])
    assert grids == activation_grids(m, list(grids), size)
    assert next(m.model.parameters()).device.type == "cpu"  # the model itself is untouched


def test_resnet50s_default_layers_skip_its_56x56_stage_and_say_why():
    m = vitlab.load("resnet50@random:0", "cpu")
    grids = loc.layer_grids(m.model, m.data_config["input_size"])
    assert grids["layer1.0"] == (56, 56) and grids["layer2.0"] == (28, 28) and grids["layer4.2"] == (7, 7)
    layers = loc.default_layers(m.model, m.data_config["input_size"])
    assert layers == ["layer2.0", "layer3.2", "layer4.2"]  # first drawable, middle of the drawable, last
    assert all(grids[t][0] * grids[t][1] <= loc.MAX_POSITIONS for t in layers)
    assert loc.undrawable_note(m) == ("resnet50@random:0: stage 1 blocks 0-2 (56x56 grid, 3,136 positions) are not "
                                      "drawn: a localization map holds at most 1,024 positions (one CKA per token "
                                      "and position)")


@pytest.mark.parametrize("name, first, last, grid", [
    ("vit_base_patch16_224", "blocks.0.resid_post", "blocks.11.resid_post", (14, 14)),
    ("vit_large_patch16_224", "blocks.0.resid_post", "blocks.23.resid_post", (14, 14)),
    ("mixer_b16_224", "blocks.0.resid_post", "blocks.11.resid_post", (14, 14)),
    ("resnet152", "layer2.0", "layer4.2", (28, 28)),
    ("resnetv2_50x1_bit", "stages.1.blocks.0", "stages.3.blocks.2", (28, 28)),
])
def test_paper_sized_models_default_to_drawable_layers(name, first, last, grid):
    """On the meta device, at the size timm builds them for (224 px): ViT-B/16, ViT-L/16, Mixer-B/16 (14x14), and
    ResNet-152 and BiT-R50x1, whose first stage (56x56) is skipped."""
    model = meta_model(name)
    layers = loc.default_layers(model)
    grids = loc.layer_grids(model)
    assert layers[0] == first and layers[-1] == last and len(layers) == 3
    assert grids[first] == grid
    assert all(grids[t][0] * grids[t][1] <= loc.MAX_POSITIONS for t in layers)


def test_a_model_with_no_drawable_block_is_refused_in_words_before_any_image():
    model = meta_model("vit_base_patch16_224", img_size=640)  # 40x40 = 1,600 positions in every block
    with pytest.raises(VitlabError, match=r"every block has more grid positions than a localization map can hold "
                                          r"\(at most 1024; its last block has a 40x40 grid, 1,600 positions\)"):
        loc.default_layers(model)


# ------------------------------------------------------------------------------------------ the pages


from streamlit.testing.v1 import AppTest

pytestmark = pytest.mark.usefixtures("app_cache")
TINY = {"lab.model_a": "test_vit@random:0", "lab.model_b": "test_resnet@random:0", "lab.source": "fashion-mnist:test",
        "lab.batch_size": 16}


def start(page: str, **state) -> AppTest:
    at = AppTest.from_file(str(APP / "Home.py"), default_timeout=TIMEOUT)
    for k, v in state.items():
        at.session_state[k] = v
    at.run()
    at.switch_page(f"views/{page}.py").run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def shown(element) -> str:
    """An element's words as read: the escapes of md_plain and its joiners removed."""
    return re.sub(r"\\([^\w\s])", r"\1", element.value).replace("\u2060", "")


def lead_data(at) -> list[str]:
    return [c.value.split("Data: ", 1)[1] for c in at.caption if "Data: " in c.value]


def test_localization_draws_a_cnn_whose_first_stage_is_too_fine_and_says_which_images_it_ran():
    """test_resnet's first stage is 40x40 at 160 px (as ResNet-50's 56x56): the page draws it from its second stage,
    names the stage it leaves out, and, asked for 32 images, says before running that it measures 64 (the reference
    set at its smallest) and that its Fig 9 and 10 checks use those 64."""
    at = start("localization", **{**TINY, "lab.images": 32, "loc.ref.images": 64})
    assert not at.error, [e.value for e in at.error]
    warned = list(map(shown, at.warning))
    assert any(w.startswith("**This page runs on 64 images, more than the 32 you chose.**") and
               "the Fig 9 and Fig 10 checks above them are measured on 64 images of the reference set" in w for w in warned), warned
    data = lead_data(at)
    assert len(data) == 2 and all(d.startswith("64 images in 4 batches of 16") for d in data), data
    assert any("stage 1 block 0 (40x40 grid, 1,600 positions) is not drawn" in c for c in map(shown, at.caption))
    at.radio(key="loc.slot").set_value("B").run()
    assert not at.error, [e.value for e in at.error]
    resnet = vitlab.load("test_resnet@random:0", "cpu")
    grids = activation_grids(resnet, taps.default_taps(resnet.model))
    tap = {layer_in_words(t): t for t in grids}  # the picker shows a layer in words
    layers = [tap[w] for w in at.selectbox(key="loc.layer").options]
    assert layers and "layer1.0" not in layers
    assert all(grids[t][0] * grids[t][1] <= loc.MAX_POSITIONS for t in layers), (layers, grids)

    # 64 chosen: the sidebar's own images, no words about more, and the checks on the same 64
    at.session_state["lab.images"] = 64
    at.session_state["w.images"] = 64
    at.run()
    assert not at.error and not at.exception, [e.value for e in at.error]
    assert not any("This page runs on" in w.value for w in at.warning)
    assert all(d.startswith("64 images in 4 batches of 16") for d in lead_data(at)), lead_data(at)


def test_logit_lens_reads_the_sidebars_models_and_says_a_random_head_answers_nothing():
    at = start("logit_lens", **{**TINY, "lab.images": 8, "lab.batch_size": 8})
    assert not at.error, [e.value for e in at.error]
    assert "Read out: the sidebar's models A (test_vit@random:0) and B (test_resnet@random:0)." in map(shown, at.caption)
    models = {r["model"] for r in chart_rows(at.get("vega_lite_chart")[0]) if "model" in r}
    assert models == {"test_vit@random:0", "test_resnet@random:0"}
    infos = list(map(shown, at.info))
    for spec in ("test_vit@random:0", "test_resnet@random:0"):
        assert any(i.startswith(f"{spec} has random weights: its final norm and head are untrained") for i in infos)
    # a model added on the page is read out beside them, and named
    at.multiselect(key="lens.models").set_value(["zoo:vit-cls"]).run()
    models = {r["model"] for r in chart_rows(at.get("vega_lite_chart")[0]) if "model" in r}
    assert models == {"test_vit@random:0", "test_resnet@random:0", "zoo:vit-cls"}
    assert any(c.endswith("and zoo:vit-cls added here.") for c in map(shown, at.caption))
    assert not any(i.startswith("zoo:vit-cls has random weights") for i in map(shown, at.info))


def chart_rows(chart) -> list[dict]:
    import pyarrow as pa

    rows = []
    for d in chart.proto.datasets:
        rows += pa.ipc.open_stream(d.data.data).read_all().to_pandas().to_dict("records")
    return rows


def test_similarity_names_its_representation_picker_when_a_model_has_no_cls_token():
    at = start("similarity", **{**TINY, "lab.images": 8, "lab.batch_size": 4})
    assert not at.error, [e.value for e in at.error]
    at.selectbox(key="sim.tokens").set_value("cls").run()
    errors = list(map(shown, at.error))
    assert any(e.startswith("test_resnet@random:0 has no CLS token (it is a CNN): choose 'all tokens' or 'mean of "
                            "tokens (GAP)' in the Representation picker above") for e in errors), errors
    assert not any("--tokens" in e for e in errors)
    assert not at.exception


# ------------------------------------------------------------------------------------------ memory of the interval


def _random_accumulator(batches: int, cells: int, prefix: int = 1):
    import numpy as np

    from vitlab.stats.evidence import BootstrapCKA

    rng = np.random.default_rng(0)
    tokens = prefix + cells
    acc = BootstrapCKA([str(t) for t in range(tokens)], [str(g) for g in range(cells)])
    for _ in range(batches):
        xy = rng.normal(size=(tokens, cells)) + 3 * np.eye(tokens, cells, -prefix)  # own patch tends to win
        acc.add(xy, rng.uniform(1, 2, tokens), rng.uniform(1, 2, cells), 4)
    return acc


def test_the_rates_leave_one_batch_out_equal_the_whole_stack_to_the_last_bit():
    import numpy as np

    from vitlab.analyses.localization import _jackknife_rates
    from vitlab.stats import evidence as ev

    acc = _random_accumulator(batches=7, cells=36)
    keep = np.ones(36, dtype=bool)
    keep[5] = False
    whole = ev.localized_rate(acc.replicates(ev.jackknife_indices(acc.batches)), 1, keep)
    assert np.array_equal(_jackknife_rates(acc, 37, 1, keep), whole)


def test_the_rates_interval_needs_memory_linear_in_batches_not_quadratic():
    """The whole stack of leave-one-out sums is T times the per-batch terms (20 GB for ResNet-50's 28x28 stage over 64
    batches); one replicate at a time needs about the terms once more."""
    import tracemalloc

    import numpy as np

    from vitlab.analyses.localization import _jackknife_rates

    acc = _random_accumulator(batches=40, cells=100)
    terms = sum(a.nbytes for a in acc.terms_xy)
    tracemalloc.start()
    try:
        _jackknife_rates(acc, 101, 1, np.ones(100, dtype=bool))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * terms, (peak, terms)  # the whole stack: 39 x terms
