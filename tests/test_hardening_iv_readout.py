"""Issue 46, "the logit lens reads out what it cannot": a source's labels are read as a head's classes only when
they can be matched (by name, by class index, or a data set in its own order), and a model with no head has no
readout. One decision, vitlab.analyses.readout.class_match, used by the logit lens, attribution, head ablation and
the skip interventions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import vitlab
from vitlab.analyses import ablation, attribution, interventions
from vitlab.analyses import logit_lens as L
from vitlab.analyses import readout
from vitlab.engine.run import GramStatistic
from vitlab.errors import VitlabError
from vitlab.inputs import fmnist

ROOT = Path(__file__).resolve().parent.parent
ZOO = (ROOT / "assets" / "zoo" / "vit-cls.safetensors").is_file()
zoo = pytest.mark.skipif(not ZOO, reason="needs the zoo's vit-cls checkpoint")
N = 64


def _folder_name(name: str) -> str:
    return name.replace("/", "_")  # a folder cannot be named 'T-shirt/top'


def _write(fmnist_source, root: Path, folder_of) -> dict[str, int]:
    """The first N Fashion-MNIST test images as PNGs under ``root/<folder_of(label)>/``; file name -> true label."""
    truth = {}
    for i in range(N):
        y = fmnist_source.label(i)
        d = root / folder_of(y)
        d.mkdir(parents=True, exist_ok=True)
        fmnist_source.load(i).save(d / f"{i:04d}.png")
        truth[f"{i:04d}.png"] = y
    return truth


@pytest.fixture(scope="module")
def zoo_vit():
    return vitlab.load("zoo:vit-cls", "cpu")


@pytest.fixture(scope="module")
def renamed(tmp_path_factory, fmnist_source):
    root = tmp_path_factory.mktemp("renamed")
    truth = _write(fmnist_source, root, lambda y: _folder_name(fmnist.CLASSES[y]))
    return vitlab.open_source(str(root)), truth


@pytest.fixture(scope="module")
def lettered(tmp_path_factory, fmnist_source):
    """The same images in folders 'a'..'j' (as many classes as the head, none of its names)."""
    root = tmp_path_factory.mktemp("lettered")
    _write(fmnist_source, root, lambda y: "abcdefghij"[y])
    return vitlab.open_source(str(root))


@pytest.fixture(scope="module")
def headless():
    """test_vit with num_classes=0 (timm: no head, the output is the pooled features), whose forward must never
    run: every analysis refuses it first."""
    import timm
    import torchvision.transforms as T

    model = timm.create_model("test_vit", num_classes=0, img_size=28, patch_size=4, in_chans=1).eval()

    def no_forward(*a, **k):
        raise AssertionError("a forward pass ran on a model with no head")

    model.forward = no_forward
    loaded = vitlab.LoadedModel(vitlab.ModelSpec("test_vit", "random:0"), model, T.Compose([T.ToTensor()]),
                                {"input_size": (1, 28, 28)}, "headless-test-vit", "cpu")
    return loaded


@zoo
def test_class_named_folders_map_onto_the_head_by_name(zoo_vit, renamed, fmnist_source):
    src, truth = renamed
    # the folders sorted by name are not Fashion-MNIST's order ('Ankle boot' first): the premise of the defect
    assert src.classes[0] == "Ankle boot" and src.classes != [_folder_name(c) for c in fmnist.CLASSES]
    match = readout.class_match(zoo_vit, src)
    expected = [[_folder_name(c) for c in fmnist.CLASSES].index(name) for name in src.classes]  # a name lookup
    assert match.usable and match.mapping.tolist() == expected
    labels = [src.label(i) for i in range(len(src))]
    assert match.to_head(labels).tolist() == [truth[src.item_id(i).rsplit("/", 1)[-1]] for i in range(len(src))]


@zoo
def test_the_lens_on_renamed_folders_reads_what_it_reads_on_the_data_set(zoo_vit, renamed, fmnist_source, store):
    src, _ = renamed
    opts = L.LensOptions(images=N, batch_size=N)
    a = L.logit_lens([zoo_vit], src, opts, vitlab.Run(store=store)).results[0]
    b = L.logit_lens([zoo_vit], fmnist_source, opts, vitlab.Run(store=store)).results[0]
    assert not a.accuracy_note and a.images == b.images == N
    acc_a = [a.accuracy(i).value for i in range(len(a.layers))]
    acc_b = [b.accuracy(i).value for i in range(len(b.layers))]
    assert acc_a == acc_b and acc_a[-1] > 0.5  # the defect: 0.359 on the folders against 0.844, no warning
    assert a.chance() == b.chance()


def test_folders_named_by_class_index_or_imagenet_names_match(tmp_path, fmnist_source, tiny_vit):
    zoo_like = _zoo_like()
    _write(fmnist_source, tmp_path / "idx", lambda y: f"{y:02d}")  # '00' .. '09'
    m = readout.class_match(zoo_like, vitlab.open_source(str(tmp_path / "idx")))
    assert m.usable and m.how == "by class index"
    assert m.mapping.tolist() == sorted({fmnist_source.label(i) for i in range(N)})
    # ImageNet heads (timm names them offline): a synset id or a name of the description; 'crane' names two
    for name in ("tench", "n01443537"):
        (tmp_path / "inet" / name).mkdir(parents=True)
        fmnist_source.load(0).save(tmp_path / "inet" / name / "x.png")
    m = readout.class_match(tiny_vit, vitlab.open_source(str(tmp_path / "inet")))
    assert m.usable and m.mapping.tolist() == [1, 0]  # sorted: 'n01443537' (goldfish, 1), 'tench' (0)
    (tmp_path / "inet" / "crane").mkdir()
    fmnist_source.load(0).save(tmp_path / "inet" / "crane" / "x.png")
    m = readout.class_match(tiny_vit, vitlab.open_source(str(tmp_path / "inet")))
    assert not m.usable and "'crane' names more than one" in m.reason


def _zoo_like():
    """A random zoo:vit-cls (its head names Fashion-MNIST's classes), with no checkpoint needed."""
    return vitlab.load("zoo:vit-cls@random:0", "cpu")


def test_unmatched_folder_names_are_refused_naming_both_sets(lettered):
    m = readout.class_match(_zoo_like(), lettered)
    assert not m.usable
    for name in ("'T-shirt/top'", "'Trouser'", "'a'", "'b'"):
        assert name in m.reason, m.reason
    assert "name the sub-folders as the head's classes" in m.reason
    with pytest.raises(VitlabError, match=r"'T-shirt/top'.*'a', 'b'"):
        m.require("accuracy")


def test_names_unknown_refuse_a_folder_but_keep_the_data_set_order(lettered, fmnist_source):
    import timm

    model = timm.create_model("test_vit", num_classes=10, img_size=28, patch_size=4, in_chans=1).eval()
    loaded = vitlab.LoadedModel(vitlab.ModelSpec("test_vit", "random:0"), model, None, {"input_size": (1, 28, 28)},
                                "ten-classes", "cpu")
    assert readout.head_names(loaded) is None
    m = readout.class_match(loaded, lettered)  # sorted folder names, a head of unknown names: no way to tell
    assert not m.usable and "class names are unknown" in m.reason and "0..9" in m.reason
    m = readout.class_match(loaded, fmnist_source)  # today's behaviour where the data set's own order is the head's
    assert m.usable and m.mapping.tolist() == list(range(10))


# ---------------------------------------------------------------- each analysis: unmatched labels, no head


@zoo
def test_lens_gives_no_accuracy_for_unmatched_folders(zoo_vit, lettered, store):
    r = L.logit_lens([zoo_vit], lettered, L.LensOptions(images=16, batch_size=8), vitlab.Run(store=store)).results[0]
    assert "they cannot be matched" in r.accuracy_note and "'a'" in r.accuracy_note
    assert np.isnan(r.accuracy(0).value) and np.isfinite(r.agreement(0).value)


def test_attribution_of_the_label_refuses_unmatched_folders(lettered):
    opts = attribution.FaithfulnessOptions(target="label", methods=("random",), random_orders=1)
    with pytest.raises(VitlabError, match=r"target 'label'.*'T-shirt/top'.*'a'.*target 'pred'"):
        attribution.attribution(_zoo_like(), lettered, 0, opts)


def test_ablation_and_skip_removal_give_no_accuracy_for_unmatched_folders(lettered, store):
    vit = _zoo_like()
    res = ablation.head_ablation(vit, vit, lettered, ablation.AblationOptions(
        images=8, batch_size=8, blocks=(0,), ks=(1,), modes=("zero",), draws=1), vitlab.Run(store=store))
    assert res.accuracy_kind.startswith("agreement") and "cannot be matched" in res.accuracy_note
    assert "no accuracy" in res.headline()[1]
    rem = interventions.skip_removal(vit, lettered, interventions.RemoveSkipOptions(block=1, images=8, batch_size=8),
                                     vitlab.Run(store=store), gram=GramStatistic(("blocks.1.resid_post",)))
    assert rem.accuracy_before is None and "cannot be matched" in rem.accuracy_note
    assert "no accuracy" in rem.finding().ours


def test_every_readout_refuses_a_model_with_no_head_before_any_forward(headless, fmnist_source):
    no_head = r"has no classification head \(num_classes=0\)"
    with pytest.raises(VitlabError, match=no_head + r".*the logit lens needs a head"):
        L.logit_lens([headless], fmnist_source, L.LensOptions(images=8, batch_size=8))
    with pytest.raises(VitlabError, match=no_head + r".*attribution of a class"):
        attribution.attribution(headless, fmnist_source, 0, attribution.FaithfulnessOptions(methods=("random",)))
    with pytest.raises(VitlabError, match=no_head + r".*attribution of a class"):
        attribution.faithfulness(headless, fmnist_source, attribution.FaithfulnessOptions(images=2, methods=("random",)))
    with pytest.raises(VitlabError, match=no_head + r".*head ablation"):
        ablation.head_ablation(headless, headless, fmnist_source, ablation.AblationOptions(images=8, blocks=(0,)))
    with pytest.raises(VitlabError, match=no_head + r".*skip removal"):
        interventions.skip_removal(headless, fmnist_source, interventions.RemoveSkipOptions(block=0, images=8))
    with pytest.raises(VitlabError, match=no_head + r".*top-1 accuracy"):
        interventions.accuracy(headless, fmnist_source, list(range(8)))
