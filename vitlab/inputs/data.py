"""Image sources and deterministic batching.

A source is named by a string:

- ``samples``: the natural photographs bundled in ``assets/samples`` (public domain, from scikit-image);
- ``fashion-mnist`` / ``fashion-mnist:test`` / ``fashion-mnist:train`` (Debian's ``dataset-fashion-mnist`` idx files,
  or the bundled test slice); ``fashion-mnist:test:/some/folder`` reads the idx files from that folder;
- ``cifar10[:train|test]``, ``cifar100[:train|test]`` through torchvision (downloaded only when online);
- any other string: a folder of images (recursive, sorted by path; class labels from sub-folder names).

Uploaded images (name, bytes) and lists of files make a :class:`FilesSource`. Images are decoded once per batch
and converted per model (EXIF orientation applied; RGB or greyscale as the model expects).
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from . import evaltransform, folders
from ..errors import VitlabError
from ..resources import assets_dir

ASSETS = assets_dir()  # the bundled samples, in the wheel and in an editable checkout alike
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm")
# image files a folder may hold that Pillow may not read (phones save HEIC; cameras RAW): listed, so that each is
# used when Pillow can read it (AVIF, with Pillow >= 11.3) or named as skipped with what to do (vitlab.inputs.images)
OTHER_IMAGE_SUFFIXES = (".heic", ".heif", ".avif", ".jxl", ".jp2", ".cr2", ".cr3", ".crw", ".nef", ".nrw", ".arw",
                        ".srf", ".sr2", ".dng", ".raf", ".orf", ".rw2", ".pef", ".srw", ".x3f", ".erf", ".kdc",
                        ".3fr", ".iiq", ".rwl", ".mrw", ".raw")
LISTED_SUFFIXES = frozenset(IMAGE_SUFFIXES + OTHER_IMAGE_SUFFIXES)


def display_name(text: str) -> str:
    """A file name as text that can be printed, written to JSON/CSV and shown in the app: bytes that are not UTF-8
    (kept by Python as surrogates, PEP 383) become ``\\xNN`` escapes."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def key_bytes(text: str) -> bytes:
    """A key's bytes for hashing, for any name the file system allows (not-UTF-8 names hash by their bytes)."""
    return text.encode("utf-8", "surrogateescape")


class ImageSource(ABC):
    """Indexable images with stable per-item keys (for cache fingerprints) and optional labels."""

    name: str = "images"
    classes: list[str] | None = None
    may_fail: bool = False  # whether an item can fail to load (files); batches are then planned over readable ones
    # True where the labels are a named data set's own label indices (Fashion-MNIST, CIFAR), which a head trained on
    # that data set shares; a folder's labels index its sub-folders sorted by name (vitlab.analyses.readout)
    labels_in_dataset_order: bool = False

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def item_id(self, i: int) -> str:
        """Human-readable id (file name, dataset index)."""

    def item_key(self, i: int) -> str:
        """Changes whenever the item's content may have changed."""
        return self.item_id(i)

    @abstractmethod
    def load(self, i: int, min_side: int | None = None):
        """The i-th image as a PIL image; VitlabError when it cannot be read.

        ``min_side``: the shorter side the caller needs (files are shrunk to it while decoding, vitlab.inputs.images)."""

    def label(self, i: int) -> int | None:
        return None

    @property
    def has_labels(self) -> bool:
        return self.classes is not None


def _decode(data: bytes | str | Path, name: str, min_side: int | None = None):
    from .images import decode as safe_decode

    return safe_decode(data, name, min_side)


class FilesSource(ImageSource):
    """A list of image files, or of uploaded (name, bytes) pairs, with optional labels."""

    may_fail = True
    listing: str | None = None  # a folder's: fingerprint of its names, sizes and mtimes when listed (listing_key)

    def __init__(self, items: Sequence, labels: Sequence[int] | None = None, classes: Sequence[str] | None = None,
                 name: str = "files"):
        self.items = list(items)
        self.name = name
        self._labels = list(labels) if labels is not None else None
        self.classes = list(classes) if classes is not None else None

    def __len__(self) -> int:
        return len(self.items)

    def item_id(self, i: int) -> str:
        it = self.items[i]
        return display_name(it[0] if isinstance(it, tuple) else str(it))

    def item_key(self, i: int) -> str:
        it = self.items[i]
        if isinstance(it, tuple):
            return f"{it[0]}:{hashlib.sha1(it[1]).hexdigest()}"
        try:
            st = os.stat(it)
            return f"{it}:{st.st_size}:{st.st_mtime_ns}"
        except OSError:
            return f"{it}:missing"

    def load(self, i: int, min_side: int | None = None):
        from .images import check_file

        it = self.items[i]
        if isinstance(it, tuple):
            return _decode(it[1], display_name(it[0]), min_side)
        name = display_name(str(it))
        check_file(it, name)  # a FIFO named like an image would block open() forever; loops and dead links are named
        return _decode(it if isinstance(it, Path) else Path(it), name, min_side)

    def label(self, i: int) -> int | None:
        return None if self._labels is None else int(self._labels[i])


def _list_images(root: Path) -> list[Path]:
    """Every non-folder entry named like an image under ``root`` (:data:`LISTED_SUFFIXES`: also HEIC, AVIF and
    camera RAW files, which are then used or named as skipped), sorted: regular files, and also pipes, dead links
    and link loops, which then fail to load with their reason instead of vanishing (symlinked folders not followed:
    a loop cannot recurse). Names that are not UTF-8 are kept (sorted by their bytes)."""
    found = folders.walk(root, LISTED_SUFFIXES).files  # bounded in entries and seconds (vitlab.inputs.folders)
    return sorted(found, key=lambda p: key_bytes(str(p)))


def listing_key(text: str) -> str:
    """The app's key of a source: for a folder the server may read (``folders.check_folder``), a fingerprint of its
    listing (names, sizes, mtimes: changes when an image is added, removed or renamed), from the listing
    remembered by :func:`folder_source`, so a rerun walks nothing; for other sources (data sets, 'samples'), and for a
    folder that cannot be opened (the page says why when it opens it), the text itself."""
    text = str(text).strip()
    if text == "samples" or text.partition(":")[0] in DATASET_HEADS:
        return text
    try:
        source = folder_source(folders.check_folder(text))
    except VitlabError:
        return text
    return f"{text}#{source.listing}"


def _folder_listing(root: Path) -> tuple[FilesSource | VitlabError, folders.Dirs]:
    """A folder's source and the folders walked, for :func:`folders.cached`; listed once per change of the folder."""
    walked = folders.walk(root, LISTED_SUFFIXES)
    files = sorted(walked.files, key=lambda p: key_bytes(str(p)))
    if not files:
        return VitlabError(f"folder '{display_name(str(root))}' holds no images ({', '.join(IMAGE_SUFFIXES)})"
                           ), walked.dirs
    h = hashlib.sha256(key_bytes(str(root.resolve())))
    for p in files:
        try:
            st = os.stat(p)
            h.update(key_bytes(f"{p}\0{st.st_size}\0{st.st_mtime_ns}\0"))
        except OSError as e:
            h.update(key_bytes(f"{p}\0{e.errno}\0"))
    rel = [f.relative_to(root) for f in files]
    if all(len(r.parts) >= 2 for r in rel):
        classes = sorted({r.parts[0] for r in rel})
        index = {c: k for k, c in enumerate(classes)}
        source = FilesSource(files, [index[r.parts[0]] for r in rel], classes, name=str(root))
    else:
        source = FilesSource(files, name=str(root))
    source.listing = h.hexdigest()[:16]
    return source, walked.dirs


def folder_source(path: str | Path) -> FilesSource:
    """Images under ``path`` (recursive, sorted); class labels from first-level sub-folders when all have one.

    The listing is bounded (``VITLAB_FOLDER_FILES`` entries, ``VITLAB_FOLDER_SECONDS``) and remembered until a folder
    in it changes (:mod:`vitlab.inputs.folders`): the same folder again gives the same source object, shared."""
    root = Path(path).expanduser()
    if not root.is_dir():
        raise VitlabError(
            f"data source '{path}' is neither a folder nor a known data set "
            "(samples, fashion-mnist[:train|test], cifar10, cifar100)"
        )
    return folders.cached(root, _folder_listing)


class ArraySource(ImageSource):
    """In-memory uint8 images (N, h, w) or (N, h, w, 3) with labels: Fashion-MNIST, CIFAR."""

    def __init__(self, images: np.ndarray, labels: np.ndarray | None, classes: Sequence[str] | None, name: str):
        self.images = images
        self.labels = labels
        self.classes = list(classes) if classes is not None else None
        self.name = name

    def __len__(self) -> int:
        return len(self.images)

    def item_id(self, i: int) -> str:
        return f"{self.name}#{i}"

    def load(self, i: int, min_side: int | None = None):
        from PIL import Image

        return Image.fromarray(self.images[i])

    def label(self, i: int) -> int | None:
        return None if self.labels is None else int(self.labels[i])


def _fashion_mnist(split: str, folder: str | None) -> ArraySource:
    from . import fmnist

    if split not in ("train", "test"):
        raise VitlabError(f"fashion-mnist split must be 'train' or 'test', not '{split}'")
    images, labels = fmnist.load(split, folder)
    source = ArraySource(images, labels, fmnist.CLASSES, name=fmnist.describe(split, folder))
    source.labels_in_dataset_order = True
    return source


def _cifar(which: str, split: str) -> ArraySource:
    from .hub import hub_reachable

    if split not in ("train", "test"):
        raise VitlabError(f"{which} split must be 'train' or 'test', not '{split}'")
    try:
        import torchvision.datasets as tvd
    except ImportError as e:
        raise VitlabError(f"{which} needs torchvision: pip install torchvision") from e
    root = Path(os.environ.get("VITLAB_DATA_DIR", Path.home() / ".cache" / "vitlab" / "datasets"))
    cls = tvd.CIFAR10 if which == "cifar10" else tvd.CIFAR100
    try:
        ds = cls(str(root), train=split == "train", download=False)
    except RuntimeError:
        if not hub_reachable():
            raise VitlabError(
                f"{which} is not in {root} and this machine is offline: go online once (it is then kept), "
                "or put the extracted data set there"
            ) from None
        ds = cls(str(root), train=split == "train", download=True)
    source = ArraySource(np.asarray(ds.data), np.asarray(ds.targets), ds.classes, name=f"{which}:{split}")
    source.labels_in_dataset_order = True
    return source


DATASET_HEADS = ("fashion-mnist", "fmnist", "cifar10", "cifar100")


def open_source(text: str, *, checked: bool = False) -> ImageSource:
    """Open a data source by name (see the module docstring). ``checked``: every folder the name reads (a folder of
    images, Fashion-MNIST's idx folder) must be one the app may read (``folders.check_folder``: under
    ``VITLAB_FOLDERS``, no root, no '..'); the app sets it, the command line reads what its user types."""
    text = str(text).strip()
    head, _, rest = text.partition(":")
    if text == "samples":
        return folder_source(ASSETS / "samples")
    if head in ("fashion-mnist", "fmnist"):
        split, _, folder = rest.partition(":")
        if folder and checked:
            folder = str(folders.check_folder(folder))
        return _fashion_mnist(split or "test", folder or None)
    if head in ("cifar10", "cifar100"):
        return _cifar(head, rest or "test")
    return folder_source(folders.check_folder(text) if checked else text)


def uploads_source(uploads: Sequence[tuple[str, bytes]]) -> FilesSource:
    """Uploaded images as a source; the order is the order given. Files over ``images.MAX_UPLOAD_BYTES`` or that do
    not decode are skipped (and named) when their batch is decoded."""
    if not uploads:
        raise VitlabError("no images uploaded")
    return FilesSource([(n, bytes(b)) for n, b in uploads], name="uploads")


def check_uploads(uploads: Sequence[tuple[str, bytes]], min_side: int = 256
                  ) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Decode every upload once (shrunk, one at a time): ``(skipped, notices)`` as (name, reason) pairs, for
    showing what cannot be used right when it is uploaded."""
    from .images import NOTES

    skipped, notices = [], []
    for name, data in uploads:
        try:
            img = _decode(bytes(data), name, min_side)
        except VitlabError as e:
            skipped.append((name, str(e)))
            continue
        notices += [(name, note) for note in img.info.get(NOTES, ())]
        del img
    return skipped, notices


@dataclass(frozen=True)
class DataSpec:
    """Which images: the source, how many, in which order."""

    source: str = "samples"
    images: int | None = None  # None: all
    shuffle: int | None = None  # seed; None keeps the source order


def select(source: ImageSource, images: int | None = None, shuffle: int | None = None) -> list[int]:
    """Indices of the images used: the first ``images`` in order, or of a seeded permutation."""
    n = len(source)
    if n == 0:
        raise VitlabError(f"data source '{source.name}' is empty")
    order = np.arange(n) if shuffle is None else np.random.default_rng(shuffle).permutation(n)
    if images is not None:
        if images < 1:
            raise VitlabError(f"--images must be positive, not {images}")
        order = order[:images]
    return [int(i) for i in order]


@dataclass
class Batch:
    """One batch of decoded images; ``key`` fingerprints exactly these items (the cache key's data part)."""

    index: int
    indices: list[int]
    key: str
    images: list | None = None  # PIL images that decoded
    ids: list[str] | None = None
    labels: list[int] | None = None
    skipped: list[tuple[str, str]] | None = None  # (id, reason)
    notices: list[tuple[str, str]] | None = None  # (id, what was done to a usable image)
    of: int = 0  # batches in the stream that yielded it (vitlab.engine.run.stream; this rank's under torchrun)


def plan_batches(source: ImageSource, indices: Sequence[int], batch_size: int, min_batch: int = 1) -> list[Batch]:
    """Fixed chunks of ``indices``; images are decoded later, only for batches that need a forward pass.

    A last chunk shorter than ``min_batch`` (a statistic's least batch: 4 for the unbiased HSIC) joins the chunk
    before it, so that no image is left out for want of company (a batch is then at most ``batch_size +
    min_batch - 1`` images)."""
    if batch_size < 1:
        raise VitlabError(f"--batch-size must be positive, not {batch_size}")
    chunks = [list(indices[start:start + batch_size]) for start in range(0, len(indices), batch_size)]
    if len(chunks) > 1 and len(chunks[-1]) < min_batch:
        last = chunks.pop()
        chunks[-1] += last
    out = []
    for b, chunk in enumerate(chunks):
        h = hashlib.sha256()
        for i in chunk:
            h.update(key_bytes(source.item_key(i)))
            h.update(b"\0")
        out.append(Batch(b, chunk, h.hexdigest()[:24]))
    return out


def decode(source: ImageSource, batch: Batch, min_side: int | None = None) -> Batch:
    """Decode the images of ``batch`` (shrunk to ``min_side``, see vitlab.inputs.images); unreadable ones are recorded in
    ``batch.skipped`` and left out, decode notices (first frame of an animation, ...) in ``batch.notices``."""
    from .images import NOTES

    batch.images, batch.ids, batch.labels, batch.skipped, batch.notices = [], [], [], [], []
    for i in batch.indices:
        try:
            img = source.load(i, min_side)
        except VitlabError as e:
            batch.skipped.append((source.item_id(i), str(e)))
            continue
        batch.notices += [(source.item_id(i), note) for note in img.info.get(NOTES, ())]
        batch.images.append(img)
        batch.ids.append(source.item_id(i))
        batch.labels.append(source.label(i))
    if not source.has_labels:
        batch.labels = None
    return batch


def transform_image(img, loaded) -> "object":
    """One PIL image as the model expects it: (C, H, W) on the host. ``loaded.transform``, run by
    :mod:`vitlab.inputs.evaltransform` when it is timm's eval transform (the same tensor in fewer Python steps)."""
    mode = "L" if loaded.in_chans == 1 else "RGB"
    return evaltransform.apply(loaded.transform, img if img.mode == mode else img.convert(mode))


def to_tensor(images: list, loaded) -> "object":
    """Stack PIL images as the model expects them: (B, C, H, W) on the model's device."""
    import torch

    return torch.stack([transform_image(img, loaded) for img in images]).to(loaded.device)


def iter_images(source: ImageSource, indices: Sequence[int], skipped: list | None = None,
                min_side: int | None = None) -> Iterator[tuple[str, object]]:
    """``(id, image)`` of ``indices``; with a ``skipped`` list, unreadable images go there as (id, reason) and the
    rest still come (otherwise the first unreadable one raises)."""
    for i in indices:
        try:
            img = source.load(i, min_side)
        except VitlabError as e:
            if skipped is None:
                raise
            skipped.append((source.item_id(i), str(e)))
            continue
        yield source.item_id(i), img
