"""A catalogue of malformed and awkward image files, generated on the spot (nothing binary is checked in).

``make_catalogue(folder)`` writes every file and returns ``{name: expected}`` where expected is ``"ok"`` (the
file must be used), ``"skip"`` (it must be skipped and named with its reason) or ``"note"`` (used, with a notice).
Files that only a folder can hold (symbolic link loops, a FIFO) are listed in ``FOLDER_ONLY``.
"""

from __future__ import annotations

import io
import os
import struct
import zlib
from pathlib import Path

import numpy as np
from PIL import Image

FOLDER_ONLY = ("loop.png", "dangling.jpg", "fifo.png", "no_access.png")


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def declared_png(width: int, height: int) -> bytes:
    """A tiny greyscale PNG whose header declares width×height (its data holds one row: a decompression bomb)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    idat = zlib.compress(b"\0" * (min(width, 4096) + 1), 9)
    return b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr) + _png_chunk(b"IDAT", idat) + _png_chunk(b"IEND", b"")


def _save(img: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def _photo(w: int = 64, h: int = 48, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    base = np.linspace(0, 255, w)[None, :, None] * np.ones((h, 1, 3))
    return Image.fromarray(np.clip(base + rng.normal(0, 20, (h, w, 3)), 0, 255).astype(np.uint8))


def catalogue_bytes() -> dict[str, tuple[bytes, str]]:
    """{file name: (bytes, expected)} for every regular file of the catalogue (uploadable)."""
    photo = _photo()
    png = _save(photo, "PNG")
    jpg = _save(photo, "JPEG", quality=90)
    grad16 = Image.fromarray((np.arange(64 * 64).reshape(64, 64) * 16).astype(np.uint16))
    rgba = np.zeros((40, 40, 4), np.uint8)
    rgba[..., 0] = 255  # bright red hidden under alpha 0 on the left half
    rgba[:, 20:, 3] = 255
    frames = [Image.new("RGB", (32, 32), c) for c in ((255, 0, 0), (0, 255, 0), (0, 0, 255))]
    gif = io.BytesIO()
    frames[0].save(gif, "GIF", save_all=True, append_images=frames[1:], duration=50)
    webp = io.BytesIO()
    frames[0].save(webp, "WEBP", save_all=True, append_images=frames[1:], duration=50)
    exif = Image.Exif()
    exif[0x010E] = "x" * 60000  # ImageDescription: a ~60 KB EXIF block (near the JPEG APP1 limit)
    orient = Image.Exif()
    orient[0x0112] = 6
    pal = photo.convert("P", palette=Image.Palette.ADAPTIVE, colors=16)
    pal.info["transparency"] = 0
    corrupt_idat = bytearray(png)
    start = png.index(b"IDAT") + 4
    corrupt_idat[start:start + 40] = os.urandom(40)
    wrong_magic = bytearray(png)
    wrong_magic[:8] = b"GIF00000"
    files = {
        "ok_rgb.png": (png, "ok"),
        "ok_photo.jpg": (jpg, "ok"),
        "png_named_jpg.jpg": (png, "ok"),  # content decides the format, not the name
        "gray16.png": (_save(grad16, "PNG"), "ok"),
        "cmyk.jpg": (_save(photo.convert("CMYK"), "JPEG"), "ok"),
        "rgba.png": (_save(Image.fromarray(rgba, "RGBA"), "PNG"), "ok"),
        "la.png": (_save(photo.convert("LA"), "PNG"), "ok"),
        "palette_transparent.png": (_save(pal, "PNG"), "ok"),
        "bilevel.bmp": (_save(photo.convert("1"), "BMP"), "ok"),
        "float.tif": (_save(Image.fromarray(np.linspace(0, 1, 32 * 32, dtype=np.float32).reshape(32, 32)), "TIFF"),
                      "ok"),
        "int32.tif": (_save(Image.fromarray(np.arange(32 * 32, dtype=np.int32).reshape(32, 32) * 60), "TIFF"), "ok"),
        "one_pixel.png": (_save(Image.new("RGB", (1, 1), (9, 99, 199)), "PNG"), "ok"),
        "huge_exif.jpg": (_save(photo, "JPEG", exif=exif.tobytes()), "ok"),
        "rotated_exif.jpg": (_save(photo, "JPEG", exif=orient.tobytes()), "ok"),
        "large_3000.png": (_save(Image.new("RGB", (3000, 2000), (40, 80, 120)), "PNG"), "ok"),
        "animated.gif": (gif.getvalue(), "note"),
        "animated.webp": (webp.getvalue(), "note"),
        "strip_wide.png": (_save(Image.new("L", (10000, 10), 128), "PNG"), "note"),
        "strip_tall.png": (_save(Image.new("RGB", (10, 10000), (1, 2, 3)), "PNG"), "note"),
        "truncated.png": (png[: len(png) // 2], "skip"),
        "truncated.jpg": (jpg[: len(jpg) // 3], "skip"),
        "wrong_magic.png": (bytes(wrong_magic), "skip"),
        "corrupt_idat.png": (bytes(corrupt_idat), "skip"),
        "bomb_14000.png": (declared_png(14000, 14000), "skip"),
        "over_cap_12500.png": (declared_png(12500, 12500), "skip"),  # only a warning for Pillow; over vitlab's cap
        "zero_width.png": (declared_png(0, 10), "skip"),
        "empty.png": (b"", "skip"),
        "text.jpg": (b"this is not a picture, just words\n" * 20, "skip"),
        "html.gif": (b"<html><body>nope</body></html>", "skip"),
        "random.webp": (np.random.default_rng(3).integers(0, 256, 5000, dtype=np.uint8).tobytes(), "skip"),
    }
    return files


def make_catalogue(folder: Path) -> dict[str, str]:
    """Write the catalogue into ``folder``; returns {name: 'ok' | 'note' | 'skip'}."""
    folder.mkdir(parents=True, exist_ok=True)
    expected = {}
    for name, (data, what) in catalogue_bytes().items():
        (folder / name).write_bytes(data)
        expected[name] = what
    os.symlink("loop.png", folder / "loop.png")  # points at itself: ELOOP
    os.symlink(folder / "gone.png", folder / "dangling.jpg")
    os.mkfifo(folder / "fifo.png")  # open() would block forever
    noaccess = folder / "no_access.png"
    noaccess.write_bytes(catalogue_bytes()["ok_rgb.png"][0])
    noaccess.chmod(0)
    expected.update({"loop.png": "skip", "dangling.jpg": "skip", "fifo.png": "skip"})
    # root reads a mode-000 file anyway: then it is a valid image and must be used
    expected["no_access.png"] = "ok" if os.access(noaccess, os.R_OK) else "skip"
    return expected
