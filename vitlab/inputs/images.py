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
- **Animations** (GIF, WebP, APNG) use their first frame, and a notice says so.
- **Extreme strips** (one side over :data:`MAX_ASPECT` times the other) keep their central part: a model's
  resize would otherwise blow a 10000×10 strip up to 248000×248 before cropping the centre anyway.

Whatever goes wrong in Pillow (truncated data, wrong magic, bombs, broken EXIF, unsupported codecs) becomes a
:class:`VitlabError` naming the file and the reason; the caller skips the file and reports it. Pillow's own
warnings about a file (``DecompressionBombWarning`` below :data:`MAX_PIXELS`, odd palettes, malformed MPO) are
silenced by one process-wide filter on Pillow's modules (:func:`_quiet_pillow`), not by ``catch_warnings`` around
each decode: that is not thread-safe (input workers leaving it out of order left a global "ignore everything"
behind).
"""

from __future__ import annotations

import io
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


def check_file(path: str | Path) -> None:
    """Raise a VitlabError unless ``path`` is a regular file that can be opened (never blocks on a FIFO)."""
    try:
        st = os.stat(path)
    except OSError as e:
        if os.path.islink(path):
            why = "a symbolic link loop" if e.errno == 40 else "a broken symbolic link"
            raise VitlabError(f"image '{path}': {why}") from None
        raise VitlabError(f"image '{path}' does not exist or cannot be read ({e.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a folder" if stat.S_ISDIR(st.st_mode) else "a pipe (FIFO)" if stat.S_ISFIFO(st.st_mode) else \
            "a device or socket"
        raise VitlabError(f"image '{path}': not a regular file but {kind}")
    if st.st_size == 0:
        raise VitlabError(f"image '{path}': empty file (0 bytes)")
    if not os.access(path, os.R_OK):
        raise VitlabError(f"image '{path}': permission denied")


def decode(data: bytes | str | Path, name: str, min_side: int | None = None):
    """An 8-bit ``L`` or ``RGB`` PIL image whose shorter side is at least ``min_side`` (when the image has it).

    Notices (first frame of an animation, float scaling, cropped strip, ignored EXIF) are in
    ``image.info["vitlab_notes"]``. Raises VitlabError with the reason when the file cannot be used.
    """
    from PIL import Image, UnidentifiedImageError

    if isinstance(data, (bytes, bytearray)):
        if not data:
            raise VitlabError(f"image '{name}': empty file (0 bytes)")
        if len(data) > MAX_UPLOAD_BYTES:
            raise VitlabError(f"image '{name}': {len(data) / 2**20:.0f} MiB, over the {MAX_UPLOAD_BYTES // 2**20} MiB "
                              "limit per file; shrink it first")
    _quiet_pillow()
    try:
        with Image.open(io.BytesIO(data) if isinstance(data, (bytes, bytearray)) else data) as img:
            return _decode_open(img, name, min_side or DEFAULT_MIN_SIDE)
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


def _decode_open(img, name: str, min_side: int):
    w, h = img.size
    if w < 1 or h < 1:
        raise VitlabError(f"image '{name}': has no pixels ({w}×{h})")
    if w * h > MAX_PIXELS:
        raise VitlabError(f"image '{name}': {w}×{h} is {w * h / 1e6:.0f} megapixels, over the limit of "
                          f"{MAX_PIXELS / 1e6:.0f} (possibly a decompression bomb); shrink it first")
    notes: list[str] = []
    frames = int(getattr(img, "n_frames", 1) or 1)
    if frames > 1:
        img.seek(0)
        notes.append(f"animated ({frames} frames): the first frame is used")
    factor = min(w, h) // max(1, min_side)
    if factor >= 2 and img.format == "JPEG":
        img.draft(None, (w // factor, h // factor))
    img.load()  # before EXIF: a PNG's EXIF may follow its pixels, and a failed read must not look like a load
    orientation = _orientation(img, notes)
    out = _to_8bit(img, min_side, notes)
    if orientation in _ORIENTATION:
        from PIL import Image

        out = out.transpose(getattr(Image.Transpose, _ORIENTATION[orientation]))
    out = _central_part(out, name, notes)
    if out is img:
        out = img.copy()  # detached from the file (closed on return) and from its metadata (EXIF can be 64 KB)
    out.info = {NOTES: notes}
    return out


def _orientation(img, notes: list[str]) -> int:
    try:
        return int(img.getexif().get(0x0112, 1) or 1)
    except Exception as e:  # noqa: BLE001 - a broken EXIF block only loses the orientation
        notes.append(f"EXIF unreadable ({type(e).__name__}): orientation ignored")
        return 1


def _reduce(img, min_side: int):
    factor = min(img.size) // max(1, min_side)
    return img.reduce(factor) if factor >= 2 else img


def _to_8bit(img, min_side: int, notes: list[str]):
    """Shrink first (memory), then scale the bit depth and flatten alpha: an L or RGB image."""
    from PIL import Image

    mode = img.mode
    if mode.startswith("I;16"):
        return _from_array(_box(np.asarray(img), min_side), 65535.0, notes)
    if mode in ("I", "F"):
        small = _reduce(img, min_side)
        arr = np.asarray(small, dtype=np.float64)
        return _from_array(arr, 1.0 if mode == "F" else 65535.0, notes, is_float=mode == "F")
    if mode == "P":
        img = img.convert("RGBA" if "transparency" in img.info else "RGB")
    elif mode in ("1", "PA"):
        img = img.convert("L" if mode == "1" else "RGBA")
    img = _reduce(img, min_side)
    if img.mode in ("RGBA", "LA", "RGBa", "La"):
        rgba = img.convert("RGBA")
        base = Image.new("RGBA", rgba.size, BACKGROUND + (255,))
        return Image.alpha_composite(base, rgba).convert("L" if img.mode.startswith("L") else "RGB")
    if img.mode in ("L", "RGB"):
        return img
    return img.convert("RGB")  # CMYK, YCbCr, LAB, HSV


def _box(arr: np.ndarray, min_side: int) -> np.ndarray:
    """Integer box downsampling of a 2-D array (what ``Image.reduce`` does, for modes it does not take)."""
    f = min(arr.shape[:2]) // max(1, min_side)
    if f < 2:
        return arr.astype(np.float64)
    h, w = arr.shape[0] // f * f, arr.shape[1] // f * f
    return arr[:h, :w].reshape(h // f, f, w // f, f).mean(axis=(1, 3))


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
