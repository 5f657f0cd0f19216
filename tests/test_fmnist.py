"""The IDX reader against known facts of Fashion-MNIST, and the bundled test slice."""

import gzip

import numpy as np
import pytest

from vitlab.inputs import fmnist
from vitlab.errors import VitlabError

FULL = fmnist.find_dir()
needs_full = pytest.mark.skipif(FULL is None, reason="Debian's dataset-fashion-mnist is not installed")


def test_bundled_slice_is_the_first_1000_test_images():
    x, y = fmnist.load("test", fmnist.bundled_dir())
    assert x.shape == (1000, 28, 28) and x.dtype == np.uint8
    assert y.shape == (1000,) and y.dtype == np.int64
    # class counts of the first 1000 test labels (README of the bundle)
    assert np.bincount(y, minlength=10).tolist() == [107, 105, 111, 93, 115, 87, 97, 95, 95, 95]
    assert (fmnist.bundled_dir() / "LICENSE").read_text().count("Zalando SE") == 1
    assert y[:10].tolist() == [9, 2, 1, 1, 6, 1, 4, 6, 5, 7]  # the data set's first test labels
    assert len(fmnist.CLASSES) == 10 and fmnist.CLASSES[9] == "Ankle boot"


@needs_full
def test_full_test_set_facts():
    x, y = fmnist.load("test")
    assert x.shape == (10000, 28, 28) and x.dtype == np.uint8
    assert np.bincount(y).tolist() == [1000] * 10
    xb, yb = fmnist.load("test", fmnist.bundled_dir())
    np.testing.assert_array_equal(x[:1000], xb)
    np.testing.assert_array_equal(y[:1000], yb)
    assert fmnist.describe("test") == f"fashion-mnist:test:{FULL}:10000"


@needs_full
def test_train_labels_are_balanced():
    # the labels only (the images take a second): 6000 per class
    y = fmnist.read_idx(FULL / "train-labels-idx1-ubyte.gz")
    assert y.shape == (60000,) and np.bincount(y).tolist() == [6000] * 10


def test_uncompressed_files_and_explicit_folder(tmp_path):
    for name in ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        (tmp_path / name).write_bytes(gzip.decompress((fmnist.bundled_dir() / f"{name}.gz").read_bytes()))
    x, y = fmnist.load("test", tmp_path)
    xb, yb = fmnist.load("test", fmnist.bundled_dir())
    np.testing.assert_array_equal(x, xb)
    np.testing.assert_array_equal(y, yb)
    assert fmnist.describe("test", tmp_path) == f"fashion-mnist:test:{tmp_path}:1000"


def test_write_read_round_trip(tmp_path):
    a = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    fmnist.write_idx(tmp_path / "a.gz", a)
    np.testing.assert_array_equal(fmnist.read_idx(tmp_path / "a.gz"), a)


def test_errors_say_what_to_do(tmp_path, monkeypatch):
    with pytest.raises(VitlabError, match="does not exist"):
        fmnist.load("test", tmp_path / "missing")
    with pytest.raises(VitlabError, match="apt-get install dataset-fashion-mnist"):
        fmnist.load("train", tmp_path)
    with pytest.raises(VitlabError, match="'train' or 'test'"):
        fmnist.load("val")
    (tmp_path / "t10k-images-idx3-ubyte").write_bytes(b"not an idx file")
    (tmp_path / "t10k-labels-idx1-ubyte").write_bytes(b"\x00\x00\x08\x01\x00\x00\x00\x05ab")
    with pytest.raises(VitlabError, match="not an IDX file"):
        fmnist.load("test", tmp_path)
    # no system data set: the test split falls back to the bundled slice, the train split says what to install
    monkeypatch.setattr(fmnist, "SYSTEM_DIR", tmp_path / "nowhere")
    assert fmnist.find_dir() is None
    assert fmnist.load("test")[0].shape == (1000, 28, 28)
    assert fmnist.describe("test").endswith(":1000")
    with pytest.raises(VitlabError, match="apt-get install dataset-fashion-mnist"):
        fmnist.load("train")
