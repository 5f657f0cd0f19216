"""Safe image decoding: any file a user hands in either becomes a small 8-bit L/RGB image or a one-line reason.

Images come from folders and uploads the lab does not control, so decoding assumes nothing:

- **Size limits.** The header is read first; an image over :data:`MAX_PIXELS` is refused before a pixel is decoded
  (a 23 KB PNG can declare 14000×14000). An upload over :data:`MAX_UPLOAD_BYTES` is refused unread.
- **Shrink at decode.** A model needs at most a few hundred pixels a side, so the image is shrunk while it is
  decoded (JPEG ``draft``: the decoder itself skips detail) or right after (``Image.reduce``, an integer box filter)
  to the smallest size whose shorter side still covers ``min_side``. Only one full-size image exists at a time,
  and never a batch of them (bench/decode_bench.py).
- **Bit depth.** 16-bit (``I;16``) and 32-bit integer (``I``) images are scaled by 1/257 (0..65535 -> 0..255);
  Pillow's own ``convert("L")`` clips them at 255 (all white). Float (``F``) images in 0..1 are scaled by 255,
  others are stretched from their [min, max] (said in a notice).
- **Alpha** (RGBA, LA, P with transparency) is composited on :data:`BACKGROUND` (white), so hidden colours under
  transparent pixels never reach the model.
- **Animations** (GIF, WebP, APNG) use their first frame, and a notice says so. Whether there is a second frame is
  one bounded ``seek(1)``, never Pillow's ``n_frames`` (which walks every page of a TIFF or GIF).
- **Extreme strips** (one side over :data:`MAX_ASPECT` times the other) keep their central part: a model's
  resize would otherwise blow a 10000×10 strip up to 248000×248 before cropping the centre anyway. The part is cut
  right after decoding, in the file's own mode, before any conversion: a 10×15,000,000 LA, RGBA or 16-bit strip
  (a 300 KB PNG under the pixel cap) costs its decoded size once, not gigabytes.
- **Memory.** What exists at full size is the decoded image in its stored mode (at most 4 bytes a pixel, so
  600 MB at the 150-megapixel cap); conversions that expand it (palette to RGBA, 16-bit to float) run a band of
  rows at a time. Any file under the caps decodes within 1 GiB of extra memory (bench/decode_bench.py).

Whatever goes wrong in Pillow (truncated data, wrong magic, bombs, broken EXIF, unsupported codecs) becomes a
:class:`VitlabError` naming the file and the reason; the caller skips the file and reports it. Pillow's own
warnings about a file (``DecompressionBombWarning`` below :data:`MAX_PIXELS`, odd palettes, malformed MPO) are
silenced by one process-wide filter on Pillow's modules (:func:`_quiet_pillow`), not by ``catch_warnings`` around
each decode: that is not thread-safe (input workers leaving it out of order left a global "ignore everything"
behind).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
import math
import os
import stat
import warnings
from pathlib import Path

import numpy as np

from ..errors import VitlabError

PILLOW_WARNINGS = r"PIL\."  # warnings.filterwarnings module pattern: warnings Pillow raises from its own modules
MAX_PIXELS = 150_000_000  # 150 megapixels: a 12000×12000 scan decodes; a 14000×14000 bomb does not
MAX_UPLOAD_BYTES = 50 * 2**20  # 50 MiB per uploaded file, as .streamlit/config.toml's server.maxUploadSize
MAX_ASPECT = 16  # longer side / shorter side beyond which only the central part is kept
BACKGROUND = (255, 255, 255)  # what transparent pixels become
DEFAULT_MIN_SIDE = 1024  # shorter side kept when the caller does not say what it needs (previews, overlays)
NOTES = "vitlab_notes"  # key in ``Image.info`` under which decode notices travel with the image

# EXIF orientation -> the transpose that undoes it (the same table as PIL.ImageOps.exif_transpose)
_ORIENTATION = {2: "FLIP_LEFT_RIGHT", 3: "ROTATE_180", 4: "FLIP_TOP_BOTTOM", 5: "TRANSPOSE", 6: "ROTATE_270",
                7: "TRANSVERSE", 8: "ROTATE_90"}


def needed_side(data_config: dict) -> int:
    """The shorter side an image must keep for a model's eval transform (resize to input / crop_pct, then crop)."""
    size = data_config.get("input_size", (3, 224, 224))
    crop = float(data_config.get("crop_pct") or 1.0)
    return int(math.ceil(max(size[-2:]) / min(1.0, crop)))


def check_file(path: str | Path, name: str | None = None) -> None:
    """Raise a VitlabError unless ``path`` is a regular file that can be opened (never blocks on a FIFO); messages
    call it ``name`` (default: the path)."""
    shown = str(path) if name is None else name
    try:
        st = os.stat(path)
    except OSError as e:
        if os.path.islink(path):
            why = "a symbolic link loop" if e.errno == 40 else "a broken symbolic link"
            raise VitlabError(f"image '{shown}': {why}") from None
        raise VitlabError(f"image '{shown}' does not exist or cannot be read ({e.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a folder" if stat.S_ISDIR(st.st_mode) else "a pipe (FIFO)" if stat.S_ISFIFO(st.st_mode) else \
            "a device or socket"
        raise VitlabError(f"image '{shown}': not a regular file but {kind}")
    if st.st_size == 0:
        raise VitlabError(f"image '{shown}': empty file (0 bytes)")
    if not os.access(path, os.R_OK):
        raise VitlabError(f"image '{shown}': permission denied")


# image formats Pillow reads only with a plugin it does not ship (or not at all): refused by name, with what to do,
# before a byte is read (a DNG is a TIFF to Pillow, which would decode its small preview instead of the photo)
_CONVERT = "convert it to JPEG or PNG first"
UNREADABLE_FORMATS = {
    **dict.fromkeys((".heic", ".heif"), f"HEIC/HEIF (what phones save) is not readable by Pillow; {_CONVERT} (on a "
                                        "Mac: Preview, File > Export; elsewhere: heif-convert)"),
    ".avif": f"AVIF is not readable by this Pillow (Pillow >= 11.3 built with libavif reads it); {_CONVERT}",
    ".jxl": f"JPEG XL is not readable by Pillow; {_CONVERT} (djxl)",
    ".jp2": f"JPEG 2000 is not readable by this Pillow (it needs OpenJPEG); {_CONVERT}",
    **dict.fromkeys((".cr2", ".cr3", ".crw", ".nef", ".nrw", ".arw", ".srf", ".sr2", ".dng", ".raf", ".orf", ".rw2",
                     ".pef", ".srw", ".x3f", ".erf", ".kdc", ".3fr", ".iiq", ".rwl", ".mrw", ".raw"),
                    "a camera RAW file, which vitlab does not develop; export it as JPEG or PNG from your photo "
                    "software (or dcraw, darktable)"),
}
_RAW = UNREADABLE_FORMATS[".dng"]


def unreadable_format(name: str) -> str | None:
    """Why a file named ``name`` cannot be used, judged by its name alone (HEIC, RAW, ...), or None."""
    suffix = Path(name).suffix.lower()
    why = UNREADABLE_FORMATS.get(suffix)
    if why is None:
        return None
    from PIL import Image

    if why is not _RAW and suffix in Image.registered_extensions():
        return None  # this Pillow reads it (AVIF with libavif, a HEIF plugin registered by the user)
    return why


def decode(data: bytes | str | Path, name: str, min_side: int | None = None):
    """An 8-bit ``L`` or ``RGB`` PIL image whose shorter side is at least ``min_side`` (when the image has it).

    Notices (first frame of an animation, float scaling, cropped strip, ignored EXIF) are in
    ``image.info["vitlab_notes"]``. Raises VitlabError with the reason when the file cannot be used.
    """
    from PIL import Image, UnidentifiedImageError

    why = unreadable_format(name)
    if why:
        raise VitlabError(f"image '{name}': {why}")
    if isinstance(data, (bytes, bytearray)):
        if not data:
            raise VitlabError(f"image '{name}': empty file (0 bytes)")
        if len(data) > MAX_UPLOAD_BYTES:
            raise VitlabError(f"image '{name}': {len(data) / 2**20:.0f} MiB, over the {MAX_UPLOAD_BYTES // 2**20} MiB "
                              "limit per file; shrink it first")
    _quiet_pillow()
    try:
        with Image.open(io.BytesIO(data) if isinstance(data, (bytes, bytearray)) else data) as img:
            return _decode_open(img, name, min_side or DEFAULT_MIN_SIDE, data)
    except VitlabError:
        raise
    except UnidentifiedImageError as e:
        raise VitlabError(f"image '{name}': {_unidentified_hint(name, data)}") from e
    except Image.DecompressionBombError as e:
        raise VitlabError(f"image '{name}': too many pixels, over the limit of {MAX_PIXELS / 1e6:.0f} megapixels "
                          f"(possibly a decompression bomb; Pillow: {e})") from e
    except MemoryError as e:
        raise VitlabError(f"image '{name}': too large to decode in this machine's memory") from e
    except Exception as e:  # noqa: BLE001 - Pillow raises anything on hostile files; the image is skipped, named
        raise VitlabError(f"image '{name}': unreadable or truncated ({type(e).__name__}: {e})") from e


def _quiet_pillow() -> None:
    """Ignore the warnings Pillow raises from its own modules, process-wide: added when missing (a test harness or
    ``warnings.resetwarnings`` may have removed it), so it costs one list scan per image. Pillow's deprecation
    warnings name the caller's module, not Pillow's, and stay visible."""
    for f in warnings.filters:
        if f[0] == "ignore" and f[2] is Warning and getattr(f[3], "pattern", f[3]) == PILLOW_WARNINGS:
            return
    warnings.filterwarnings("ignore", module=PILLOW_WARNINGS)


def _unidentified_hint(name: str, data) -> str:
    from PIL import Image

    suffix = Path(name).suffix.lower()
    if suffix and suffix in Image.registered_extensions():
        return f"not a valid {suffix.lstrip('.').upper()} file (its content is not an image of that format)"
    if suffix:
        return f"Pillow cannot read '{suffix}' files; convert it to PNG or JPEG"
    return "not an image file"


def _decode_open(img, name: str, min_side: int, source=None):
    w, h = img.size
    if w < 1 or h < 1:
        raise VitlabError(f"image '{name}': has no pixels ({w}×{h})")
    if w * h > MAX_PIXELS:
        raise VitlabError(f"image '{name}': {w}×{h} is {w * h / 1e6:.0f} megapixels, over the limit of "
                          f"{MAX_PIXELS / 1e6:.0f} (possibly a decompression bomb); shrink it first")
    notes: list[str] = []
    frames = _frames(img, source)
    if frames != 1:
        img.seek(0)
        notes.append(f"animated ({frames or 'several'} frames): the first frame is used")
    factor = min(w, h) // max(1, min_side)
    if factor >= 2 and img.format == "JPEG":
        img.draft(None, (w // factor, h // factor))
    img.load()  # before EXIF: a PNG's EXIF may follow its pixels, and a failed read must not look like a load
    orientation = _orientation(img, notes)
    # the central part of a strip is cut first, while the image is in its stored mode: alpha compositing, palette
    # expansion and float conversion of a 10×15,000,000 strip at full size cost gigabytes (bench/decode_bench.py)
    out = _to_8bit(_central_part(img, name, notes), min_side, notes)
    if orientation in _ORIENTATION:
        from PIL import Image

        out = out.transpose(getattr(Image.Transpose, _ORIENTATION[orientation]))
    if out is img:
        out = img.copy()  # detached from the file (closed on return) and from its metadata (EXIF can be 64 KB)
    out.info = {NOTES: notes}
    return out


def _frames(img, source=None) -> int | None:
    """1 for a still image; the number of frames when the file's header says it (APNG, WebP); None ("several")
    when finding it would mean walking the file. Pillow's ``n_frames`` walks every page of a TIFF (300,000 chained
    pages: minutes) and decodes every frame of a GIF; here a GIF's blocks are skipped without decoding
    (:func:`_gif_second_frame`) and other formats take one bounded ``seek(1)``."""
    known = img.__dict__.get("n_frames", img.__dict__.get("_n_frames"))
    if isinstance(known, int):
        return max(1, known)
    if img.format == "GIF" and source is not None:
        return None if _gif_second_frame(source) else 1
    if not hasattr(img, "seek"):
        return 1
    try:
        img.seek(1)
    except Exception:  # noqa: BLE001 - no second frame (EOFError), or a damaged one: the first is still an image
        return 1
    return None


def _gif_second_frame(source) -> bool:
    """Whether a GIF holds a second image, found by skipping blocks by their lengths: Pillow's ``seek(1)`` decodes
    the first frame to find the second (13 s for 144 megapixels on a loaded core)."""
    f = io.BytesIO(source) if isinstance(source, (bytes, bytearray)) else open(source, "rb")  # noqa: SIM115
    with f:
        head = f.read(13)
        if len(head) < 13:
            return False
        if head[10] & 0x80:
            f.seek(3 * (2 << (head[10] & 7)), 1)  # the global colour table
        images = 0
        while True:
            kind = f.read(1)
            if kind == b"\x21":  # extension: a label, then sub-blocks
                f.read(1)
            elif kind == b"\x2c":  # image: descriptor, local colour table, LZW code size, then sub-blocks
                images += 1
                if images == 2:
                    return True
                desc = f.read(9)
                if len(desc) < 9:
                    return False
                if desc[8] & 0x80:
                    f.seek(3 * (2 << (desc[8] & 7)), 1)
                f.read(1)
            else:  # the trailer, the end of the data, or garbage
                return False
            while True:
                size = f.read(1)
                if not size or size == b"\0":
                    break
                f.seek(size[0], 1)


def _orientation(img, notes: list[str]) -> int:
    try:
        return int(img.getexif().get(0x0112, 1) or 1)
    except Exception as e:  # noqa: BLE001 - a broken EXIF block only loses the orientation
        notes.append(f"EXIF unreadable ({type(e).__name__}): orientation ignored")
        return 1


def _reduce(img, min_side: int):
    factor = min(img.size) // max(1, min_side)
    if factor >= 2 and img.mode in ("LA", "RGBA", "PA"):
        return _banded(img, img.mode, min_side)  # Pillow premultiplies alpha into a full-size copy first
    return img.reduce(factor) if factor >= 2 else img


BAND_PIXELS = 4_000_000  # pixels converted at a time when a mode must be expanded before it can be shrunk


def _banded(img, mode: str, min_side: int):
    """``img.convert(mode)`` shrunk like :func:`_reduce`, converted a band of rows at a time: a 150-megapixel
    palette image never exists as full-size RGBA (600 MB) or a 16-bit one as full-size float64 (1.2 GB)."""
    from PIL import Image

    w, h = img.size
    f = max(1, min(w, h) // max(1, min_side))
    rows = max(f, BAND_PIXELS // max(1, w) // f * f)
    parts = []
    for y in range(0, h, rows):
        band = img.crop((0, y, w, min(h, y + rows)))
        band = band.convert(mode) if band.mode != mode else band
        parts.append(band.reduce(f) if f >= 2 else band)
    out = Image.new(mode, (parts[0].size[0], sum(p.size[1] for p in parts)))
    y = 0
    for p in parts:
        out.paste(p, (0, y))
        y += p.size[1]
    return out


def _to_8bit(img, min_side: int, notes: list[str]):
    """Shrink first (memory), then scale the bit depth and flatten alpha: an L or RGB image."""
    from PIL import Image

    mode = img.mode
    if mode.startswith("I;16"):
        return _from_array(_box(img, min_side), 65535.0, notes)
    if mode in ("I", "F"):
        small = _reduce(img, min_side)
        arr = np.asarray(small, dtype=np.float64)
        return _from_array(arr, 1.0 if mode == "F" else 65535.0, notes, is_float=mode == "F")
    if mode == "P":
        img = _banded(img, "RGBA" if "transparency" in img.info else "RGB", min_side)
    elif mode in ("1", "PA"):
        img = _banded(img, "L" if mode == "1" else "RGBA", min_side)
    img = _reduce(img, min_side)
    if img.mode in ("RGBA", "LA", "RGBa", "La"):
        rgba = img.convert("RGBA")
        base = Image.new("RGBA", rgba.size, BACKGROUND + (255,))
        return Image.alpha_composite(base, rgba).convert("L" if img.mode.startswith("L") else "RGB")
    if img.mode in ("L", "RGB"):
        return img
    return img.convert("RGB")  # CMYK, YCbCr, LAB, HSV


def _box(img, min_side: int) -> np.ndarray:
    """Integer box downsampling of a single-channel image that ``Image.reduce`` does not take (16-bit), as float64,
    a band of rows at a time (the full-size image never exists as an array)."""
    w, h = img.size
    f = max(1, min(w, h) // max(1, min_side))
    w2, h2 = w // f * f, h // f * f
    rows = max(f, BAND_PIXELS // max(1, w) // f * f)
    parts = []
    for y in range(0, h2, rows):
        band = np.asarray(img.crop((0, y, w2, min(h2, y + rows))))
        parts.append(band.reshape(band.shape[0] // f, f, w2 // f, f).mean(axis=(1, 3)) if f >= 2
                     else band.astype(np.float64))
    return np.concatenate(parts, axis=0)


def _from_array(arr: np.ndarray, full_scale: float, notes: list[str], is_float: bool = False):
    """(h, w) values -> 8-bit L: ``full_scale`` maps to 255 when the values fit in [0, full_scale], else min-max."""
    from PIL import Image

    arr = np.asarray(arr, dtype=np.float64)
    if arr.ndim != 2:
        raise VitlabError(f"unexpected array shape {arr.shape} for a single-channel image")
    if not np.all(np.isfinite(arr)):
        notes.append("non-finite values (NaN/inf) shown as 0")
        arr = np.where(np.isfinite(arr), arr, 0.0)
    lo, hi = (float(arr.min()), float(arr.max())) if arr.size else (0.0, 0.0)
    if lo >= 0 and hi <= full_scale:
        scaled = arr * (255.0 / full_scale)
    else:
        notes.append(f"{'float' if is_float else 'integer'} values in [{lo:.4g}, {hi:.4g}] stretched to 0..255")
        scaled = (arr - lo) * (255.0 / (hi - lo)) if hi > lo else np.zeros_like(arr)
    return Image.fromarray(np.clip(np.rint(scaled), 0, 255).astype(np.uint8), "L")


def _central_part(img, name: str, notes: list[str]):
    w, h = img.size
    short, long_ = min(w, h), max(w, h)
    if long_ <= MAX_ASPECT * short:
        return img
    keep = MAX_ASPECT * short
    box = ((w - keep) // 2, 0, (w - keep) // 2 + keep, h) if w > h else (0, (h - keep) // 2, w, (h - keep) // 2 + keep)
    notes.append(f"a {w}×{h} strip: its central {box[2] - box[0]}×{box[3] - box[1]} is used")
    return img.crop(box)


@dataclass(frozen=True)
class ModelInput:
    """What a model's eval transform does to one image: the steps in words and the part of the original it keeps.

    ``box``: (left, top, right, bottom) in the original's pixels, the region that ends up in the model's input
    (the whole image when nothing is cropped)."""

    original: tuple[int, int]  # (W, H)
    size: tuple[int, int]  # (W, H) of the model's input
    steps: tuple[str, ...]
    box: tuple[float, float, float, float]
    aspect_kept: bool

    @property
    def text(self) -> str:
        return "; ".join(self.steps)


def describe_model_input(transform, in_chans: int, size: tuple[int, int]) -> ModelInput:
    """Walk a torchvision eval transform (``LoadedModel.transform``: Resize, CenterCrop, ToTensor, Normalize) for an
    image of ``size`` (W, H) and say what the model gets: each geometric step with its sizes, the colour mode
    (``in_chans`` 1: grey), and the box of the original the input covers. Steps it does not know are named as they
    are (their geometry is then not followed)."""
    W, H = (int(v) for v in size)
    w, h = float(W), float(H)
    left, top, right, bottom = 0.0, 0.0, float(W), float(H)  # the kept box, in original pixels
    steps, aspect = [f"{W}×{H} → grey (1 channel)" if in_chans == 1 else f"{W}×{H} → RGB"], True
    for t in getattr(transform, "transforms", [transform]):
        name = type(t).__name__
        if name == "Resize":
            s = t.size
            if isinstance(s, int) or (isinstance(s, (list, tuple)) and len(s) == 1):
                side = int(s if isinstance(s, int) else s[0])
                k = side / min(w, h)
                nw, nh = int(w * k) if w > h else side, int(h * k) if h > w else side  # torchvision truncates
                steps.append(f"shorter side resized to {side} px ({w:.0f}×{h:.0f} → {nw}×{nh}, aspect kept)")
            else:
                nh, nw = int(s[0]), int(s[1])
                kept = abs(nw / nh - w / h) < 0.01
                aspect = aspect and kept
                steps.append(f"resized to {nw}×{nh} ({'aspect kept' if kept else 'aspect not kept: stretched'})")
            w, h = float(nw), float(nh)
        elif name == "CenterCrop":
            s = t.size if isinstance(t.size, (list, tuple)) else (t.size, t.size)
            ch, cw = int(s[0]), int(s[-1])
            if cw < w or ch < h:
                sx, sy = (right - left) / w, (bottom - top) / h  # original pixels per current pixel
                dx, dy = max(0.0, (w - cw) / 2), max(0.0, (h - ch) / 2)
                cut = []
                if dx:
                    cut.append(f"{100 * (w - cw) / w:.0f} % of the width cut (left and right)")
                if dy:
                    cut.append(f"{100 * (h - ch) / h:.0f} % of the height cut (top and bottom)")
                steps.append(f"centre-cropped to {cw}×{ch}: {', '.join(cut)}")
                left, right = left + dx * sx, right - dx * sx
                top, bottom = top + dy * sy, bottom - dy * sy
                w, h = float(min(cw, w)), float(min(ch, h))
            else:
                steps.append(f"centre crop {cw}×{ch}: nothing cut")
        elif name in ("ToTensor", "MaybeToTensor", "Normalize", "PILToTensor", "ConvertImageDtype"):
            continue
        else:
            steps.append(f"then {name}")
    steps.append(f"the model sees {int(w)}×{int(h)} {'grey' if in_chans == 1 else 'colour'}")
    return ModelInput((W, H), (int(w), int(h)), tuple(steps), (left, top, right, bottom), aspect)
