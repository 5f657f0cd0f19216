"""Fashion-MNIST (Xiao, Rasul & Vollgraf 2017; MIT licence, Zalando SE) read straight from its IDX files.

torchvision's reader cannot use Debian's `dataset-fashion-mnist` folder (its checksums differ and it wants
to download), and the IDX format is a few lines of numpy, so vitlab reads it itself. A slice of the test
set (the first `BUNDLED_N` images) ships in `assets/fashion-mnist/` so that the offline default works
with no package installed; the full set is used whenever it is found.

Shapes: images (N, 28, 28) uint8, labels (N,) int64.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from vitlab.errors import VitlabError

CLASSES: tuple[str, ...] = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)

SYSTEM_DIR = Path("/usr/share/datasets/fashion-mnist")
BUNDLED_N = 1000  # the first 1000 test images, in the dataset's own order

_PREFIX = {"train": "train", "test": "t10k"}
_INSTALL_HINT = "install it with `apt-get install dataset-fashion-mnist`, or pass the folder holding its IDX files"


def bundled_dir() -> Path:
    """The folder of the bundled test slice (IDX gz files and the dataset's licence)."""
    from ..resources import assets_dir

    return assets_dir() / "fashion-mnist"


def _file(folder: Path, split: str, kind: str) -> Path | None:
    """The IDX file of `split` ('train'|'test') and `kind` ('images'|'labels') in `folder`, gzip'd or not."""
    stem = f"{_PREFIX[split]}-{kind}-idx{3 if kind == 'images' else 1}-ubyte"
    for name in (stem + ".gz", stem):
        if (folder / name).is_file():
            return folder / name
    return None


def _has_split(folder: Path, split: str) -> bool:
    return _file(folder, split, "images") is not None and _file(folder, split, "labels") is not None


def find_dir(path: str | Path | None = None) -> Path | None:
    """The folder holding the full data set: `path` if given (must exist), else Debian's, else None."""
    if path is not None:
        folder = Path(path).expanduser()
        if not folder.is_dir():
            raise VitlabError(f"Fashion-MNIST folder '{folder}' does not exist; pass the folder holding its IDX files")
        return folder
    if SYSTEM_DIR.is_dir() and (_has_split(SYSTEM_DIR, "test") or _has_split(SYSTEM_DIR, "train")):
        return SYSTEM_DIR
    return None


def read_idx(path: Path) -> np.ndarray:
    """Read one IDX file (gzip'd or not) into an array of its stored shape and dtype (uint8 for Fashion-MNIST)."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise VitlabError(f"cannot read IDX file '{path}': {e}; reinstall the data set") from e
    # IDX header: two zero bytes, a type code (0x08 = uint8), the number of dimensions, then big-endian int32 sizes.
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise VitlabError(f"'{path}' is not an IDX file of unsigned bytes; reinstall the data set")
    ndim = raw[3]
    shape = tuple(int(s) for s in np.frombuffer(raw, dtype=">i4", count=ndim, offset=4))
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(shape)):
        raise VitlabError(
            f"'{path}' holds {data.size} bytes of data but its header says {shape}; the file is truncated"
        )
    return data.reshape(shape)


def _source(split: str, path: str | Path | None) -> Path:
    if split not in _PREFIX:
        raise VitlabError(f"Fashion-MNIST split '{split}' is unknown; use 'train' or 'test'")
    folder = find_dir(path)
    if folder is not None and _has_split(folder, split):
        return folder
    if path is not None:
        raise VitlabError(f"Fashion-MNIST folder '{path}' has no {split} IDX files; {_INSTALL_HINT}")
    if split == "test" and _has_split(bundled_dir(), "test"):
        return bundled_dir()
    raise VitlabError(f"the Fashion-MNIST {split} set was not found; {_INSTALL_HINT}")


def load(split: str = "test", path: str | Path | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Images (N, 28, 28) uint8 and labels (N,) int64 of `split`.

    From `path` if given, else Debian's folder, else (test split only) the bundled first 1000 test images.
    """
    folder = _source(split, path)
    images = read_idx(_file(folder, split, "images"))
    labels = read_idx(_file(folder, split, "labels")).astype(np.int64)
    if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
        raise VitlabError(
            f"Fashion-MNIST {split} files in '{folder}' disagree: images {images.shape}, labels {labels.shape}"
        )
    return images, labels


def describe(split: str = "test", path: str | Path | None = None) -> str:
    """A string naming the data actually loaded, for fingerprints: 'fashion-mnist:SPLIT:FOLDER:N'."""
    folder = _source(split, path)
    n = read_idx(_file(folder, split, "labels")).shape[0]
    return f"fashion-mnist:{split}:{folder}:{n}"


def write_idx(path: Path, array: np.ndarray) -> None:
    """Write a uint8 array as a gzip'd IDX file (used to make the bundled slice); mtime 0 keeps it reproducible."""
    array = np.ascontiguousarray(array, dtype=np.uint8)
    header = bytes([0, 0, 0x08, array.ndim]) + np.asarray(array.shape, dtype=">i4").tobytes()
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as f:
        f.write(header + array.tobytes())


def make_bundle(n: int = BUNDLED_N, path: str | Path | None = None) -> Path:
    """Write the first `n` test images and labels of the full set into `bundled_dir()`."""
    folder = find_dir(path)
    if folder is None or not _has_split(folder, "test"):
        raise VitlabError(f"making the bundled slice needs the full Fashion-MNIST test set; {_INSTALL_HINT}")
    images, labels = load("test", folder)
    out = bundled_dir()
    out.mkdir(parents=True, exist_ok=True)
    write_idx(out / "t10k-images-idx3-ubyte.gz", images[:n])
    write_idx(out / "t10k-labels-idx1-ubyte.gz", labels[:n].astype(np.uint8))
    return out
