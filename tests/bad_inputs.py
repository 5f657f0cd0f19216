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


# ---------------------------------------------------------------- hostile sizes (issue 24): small files, huge work

# PNG colour types and bytes per pixel of the strips: (colour type, bit depth, channels)
_PNG_MODES = {"L": (0, 8, 1), "LA": (4, 8, 2), "RGB": (2, 8, 3), "RGBA": (6, 8, 4), "I;16": (0, 16, 1),
              "RGBA;16": (6, 16, 4), "P": (3, 8, 1)}


def png_strip(width: int, height: int, mode: str = "LA", level: int = 9) -> bytes:
    """A valid PNG of width×height pixels (all zero, alpha 0), compressed as it is written: a 10×14,999,999 strip
    (under the 150-megapixel cap) is a ~300 KB file that decodes to hundreds of MB. Never held uncompressed."""
    ctype, depth, channels = _PNG_MODES[mode]
    row = b"\0" * (1 + width * channels * depth // 8)  # filter byte 0, then the row
    ihdr = struct.pack(">IIBBBBB", width, height, depth, ctype, 0, 0, 0)
    comp, parts = zlib.compressobj(level), []
    block = 1 << 22
    per = max(1, block // len(row))
    chunk = row * per
    left = height
    while left:
        n = min(per, left)
        parts.append(comp.compress(chunk if n == per else row * n))
        left -= n
    parts.append(comp.flush())
    extra = _png_chunk(b"PLTE", b"\0\0\0\xff\xff\xff") if ctype == 3 else b""
    return (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr) + extra + _png_chunk(b"IDAT", b"".join(parts))
            + _png_chunk(b"IEND", b""))


def tiff_pages(pages: int) -> bytes:
    """A little-endian TIFF of ``pages`` chained 1×1 greyscale pages (~100 bytes each): 300,000 pages is a ~29 MiB
    file (under the 50 MiB upload cap) whose page count Pillow finds only by walking every page."""
    entries = 8
    ifd_size = 2 + entries * 12 + 4
    out = bytearray(b"II*\0" + struct.pack("<I", 8))
    for k in range(pages):
        ifd = len(out)
        pixel = ifd + ifd_size
        nxt = 0 if k == pages - 1 else pixel + 2  # the next IFD after the pixel (and a pad byte: word aligned)
        tags = [(256, 3, 1, 1), (257, 3, 1, 1), (258, 3, 1, 8), (259, 3, 1, 1), (262, 3, 1, 1),
                (273, 4, 1, pixel), (278, 3, 1, 1), (279, 4, 1, 1)]
        out += struct.pack("<H", entries)
        for tag, kind, count, value in tags:
            out += struct.pack("<HHII", tag, kind, count, value) if kind == 4 else \
                struct.pack("<HHIHH", tag, kind, count, value, 0)
        out += struct.pack("<I", nxt) + bytes([(k * 37) % 256, 0])
    return bytes(out)


# name: (how to make the bytes, what must happen): each decodes within the caps' memory and a few seconds
HOSTILE_SIZES = {
    "strip_la_10x14999999.png": (lambda: png_strip(10, 14_999_999, "LA"), "note"),
    "strip_rgba_10x14999999.png": (lambda: png_strip(10, 14_999_999, "RGBA"), "note"),
    "strip_16bit_10x14999999.png": (lambda: png_strip(10, 14_999_999, "I;16"), "note"),
    "strip_palette_14999999x10.png": (lambda: png_strip(14_999_999, 10, "P"), "note"),
    "rgba16_12000x12000.png": (lambda: png_strip(12_000, 12_000, "RGBA;16"), "ok"),
    "pages_300000.tif": (lambda: tiff_pages(300_000), "note"),
    "animated_12000x12000.gif": (lambda: _big_gif(12_000), "note"),
    "float_12000x12000.tif": (lambda: _save(Image.new("F", (12_000, 12_000), 0.5), "TIFF",
                                            compression="tiff_deflate"), "ok"),
}


def _big_gif(side: int) -> bytes:
    """Two full-size frames: finding the second one means decoding the first."""
    frames = [Image.new("P", (side, side), k) for k in (1, 2)]
    return _save(frames[0], "GIF", save_all=True, append_images=frames[1:])


# ---------------------------------------------------------------- hostile shapes, names, --out folders, caches

# scaled-down hostile shapes for quick tests (the full-size ones are HOSTILE_SIZES, measured by the bench):
# name: (bytes maker, the shorter side of the result, whether a notice is due)
HOSTILE_SHAPES = {
    **{f"strip_{m.replace(';', '')}_{w}x{h}.png": ((lambda m=m, w=w, h=h: png_strip(w, h, m)), 10, True)
       for m in ("L", "LA", "RGB", "RGBA", "I;16", "RGBA;16", "P") for w, h in ((10, 200_000), (200_000, 10))},
    "line_1x100000.png": (lambda: png_strip(1, 100_000, "L"), 1, True),
    "pages_2000.tif": (lambda: tiff_pages(2000), 1, True),
    "square_3000.png": (lambda: png_strip(3000, 3000, "RGBA"), 250, False),  # 3000 // 12: what a 248 need keeps
}

# file names a file system allows (bytes): each image must be used, and named in printable text
HOSTILE_NAMES = [b"caf\xe9.png", b"\xff\xfe.png", b"line\nbreak.png", b"-rf.png", b".hidden.png",
                 b"quote's \"and\" space.png", b"e\xcc\x81t\xc3\xa9.png", b"x" * 240 + b".png", b"tab\there.jpg",
                 b"back\\slash.png", b"UPPER.PNG"]


def plant_out(case: str, out: Path, outside: Path) -> list[Path]:
    """Put hostile case ``case`` into the output folder ``out`` (``outside`` is a folder beside it); return the
    files outside vitlab's own that must be left exactly as they are."""
    import json

    victim = outside / "victim.txt"
    victim.write_text("precious")
    st = victim.stat()
    entry = [st.st_size, st.st_mtime_ns]
    record = out / ".vitlab-files.json"
    fmt = "vitlab-outputs/2"
    mine = out / "mine.txt"
    mine.write_text("the user's")
    if case == "symlinked run.json":
        (out / "run.json").symlink_to(victim)
    elif case == "symlinked record":
        record.symlink_to(victim)
    elif case == "symlinked output":
        (out / "pair_0.csv").symlink_to(victim)
    elif case == "record is a folder":
        record.mkdir()
    elif case == "record lists a number":
        record.write_text('{"files": 5}')
    elif case == "record lists a string":
        record.write_text('{"files": "mine.txt"}')
    elif case == "record is not json":
        record.write_bytes(b"\xff\xfe{not json")
    elif case == "record of the old format":
        record.write_text(json.dumps({"files": ["mine.txt"]}))
    elif case == "record reaches outside":
        record.write_text(json.dumps({"format": fmt, "files": {"../outside/victim.txt": entry, str(victim): entry}}))
    elif case == "record lists a link":
        (out / "link.txt").symlink_to(victim)
        record.write_text(json.dumps({"format": fmt, "files": {"link.txt": entry}}))
    elif case == "record lists a file through a linked folder":
        (out / "sub").symlink_to(outside, target_is_directory=True)
        record.write_text(json.dumps({"format": fmt, "files": {"sub/victim.txt": entry}}))
    elif case == "record lists the user's file with a wrong size":
        record.write_text(json.dumps({"format": fmt, "files": {"mine.txt": [99, mine.stat().st_mtime_ns]}}))
    else:
        raise KeyError(case)
    return [victim, mine]


OUT_CASES = ["symlinked run.json", "symlinked record", "symlinked output", "record is a folder",
             "record lists a number", "record lists a string", "record is not json", "record of the old format",
             "record reaches outside", "record lists a link", "record lists a file through a linked folder",
             "record lists the user's file with a wrong size"]

# what sqlite says when a cache cannot be written or opened: (message, whether an existing cache is still read)
CACHE_FAILURES = {"full disk": "database or disk is full", "read-only folder": "attempt to write a readonly database",
                  "cannot open": "unable to open database file", "locked": "database is locked",
                  "I/O error": "disk I/O error"}
