"""Peak memory of decoding 32 uploads of 12000×12000 PNGs: vitlab's safe decoding vs the decode it replaced;
and (``--worst``) the worst single files under the caps: strips, 16-bit, palettes, 300,000-page TIFFs.

    PYTHONPATH=. python bench/decode_bench.py [--uploads 32] [--side 12000] [--baseline-images 2]
    PYTHONPATH=. python bench/decode_bench.py --worst [--against /path/to/an/older/checkout] [--timeout 120]

``--worst`` decodes each file of ``tests/bad_inputs.HOSTILE_SIZES`` (made on the spot, all under the 150-megapixel
and 50 MiB caps) in a fresh subprocess, as an upload (bytes in memory) for a 224-pixel model, and prints the peak
resident memory above the memory resident just before (the kernel's peak is reset then, ``/proc/self/clear_refs``)
and the seconds. ``--against`` runs the same files with vitlab imported from another checkout (e.g. the main before
issue 24), stopped after ``--timeout`` seconds.

Each variant runs in a fresh subprocess and reports its peak resident memory (``VmHWM``) above the memory resident
just before decoding (``VmRSS``: libraries imported, upload bytes in memory), so the figures are the decode's own.

- **vitlab** (``vitlab.inputs.data.decode`` of one batch of all uploads, shrunk to what a 224-pixel model needs): one
  full-size image exists at a time, and the batch holds only small ones.
- **baseline** (the decode before issue 10: ``Image.open`` + ``load`` + ``exif_transpose``, every image of a
  batch held at full size until the model's transform): measured on 1..``--baseline-images`` images (the full 32
  would need over 17 GiB) and projected from the growth per held image.

The PNGs are a smooth RGB gradient (small files, ~0.4 MB each, as in the issue); every upload differs in one
pixel so that no two are the same bytes.
"""

from __future__ import annotations

import argparse
import io
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def make_png(side: int) -> bytes:
    import numpy as np
    from PIL import Image

    ramp = np.linspace(0, 255, side, dtype=np.float32)
    rgb = np.empty((side, side, 3), np.uint8)
    rgb[..., 0] = ramp[None, :]
    rgb[..., 1] = ramp[:, None]
    rgb[..., 2] = 128
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, "PNG", compress_level=6)
    return buf.getvalue()


def _uploads(png: bytes, n: int) -> list[tuple[str, bytes]]:
    # a distinct tail per upload (after IEND, ignored by decoders) so that no two uploads share bytes
    return [(f"scan{k:02d}.png", png + f"#{k}".encode()) for k in range(n)]


def _status_mib(field: str) -> float:
    """VmRSS (resident now) or VmHWM (peak resident) of this process, from /proc (Linux), in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(variant: str, png_path: str, n: int) -> None:
    """Decode ``n`` uploads with ``variant`` and print one JSON line of memory figures."""
    import PIL.Image
    from PIL import Image, ImageOps

    from vitlab.inputs import data

    png = Path(png_path).read_bytes()
    uploads = _uploads(png, n)
    before = _status_mib("VmRSS")  # resident now: imports and the upload bytes (a transient import peak may be
    # higher than this, and the decode can reuse that memory: the peak-minus-now difference is the decode's own)
    t0 = time.perf_counter()
    if variant == "baseline":
        PIL.Image.MAX_IMAGE_PIXELS = None  # the old decode only warned below 2x Pillow's limit
        held = []
        for _, b in uploads:
            img = Image.open(io.BytesIO(b))
            img.load()
            held.append(ImageOps.exif_transpose(img))
        sizes = [im.size for im in held]
    else:
        src = data.uploads_source(uploads)
        batch = data.decode(src, data.plan_batches(src, range(n), n)[0], min_side=248)  # a 224 model's need
        assert not batch.skipped, batch.skipped
        sizes = [im.size for im in batch.images]
    peak = _status_mib("VmHWM")
    print(json.dumps({"variant": variant, "images": n, "peak_mib": peak, "before_mib": before,
                      "decode_mib": peak - before, "seconds": time.perf_counter() - t0,
                      "size": sizes[0]}))


def worst_child(path: str, root: str) -> None:
    """Decode one file (as upload bytes) with the vitlab found first on sys.path; one JSON line of figures."""
    sys.path.insert(0, root)
    from vitlab.inputs import images

    data = Path(path).read_bytes()
    try:
        Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM: the peak from here on is the decode's
    except OSError:
        pass
    before = _status_mib("VmRSS")
    t0 = time.perf_counter()
    try:
        img = images.decode(data, Path(path).name, min_side=248)
        what = f"{img.mode} {img.size[0]}×{img.size[1]}" + (f"; {img.info[images.NOTES]}" if img.info.get(
            images.NOTES) else "")
    except images.VitlabError as e:
        what = f"skipped: {e}"
    print(json.dumps({"peak_mib": _status_mib("VmHWM") - before, "seconds": time.perf_counter() - t0,
                      "result": what}))


def worst(root: Path, timeout: float) -> list[dict]:
    """Every hostile file decoded with the vitlab under ``root``: [{name, file_mib, peak_mib, seconds, result}]."""
    sys.path.insert(0, str(ROOT / "tests"))
    from bad_inputs import HOSTILE_SIZES

    rows = []
    for name, (make, _) in HOSTILE_SIZES.items():
        path = Path("/tmp") / f"vitlab_worst_{name}"
        if not path.is_file():
            path.write_bytes(make())
        row = {"name": name, "file_mib": path.stat().st_size / 2**20}
        try:
            done = subprocess.run([sys.executable, __file__, "--worst-child", str(path), str(root)], text=True,
                                  capture_output=True, timeout=timeout, cwd="/tmp",
                                  env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})
            row.update(json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else
                       {"peak_mib": float("nan"), "seconds": float("nan"), "result": done.stderr.strip()[-200:]})
        except subprocess.TimeoutExpired:
            row.update({"peak_mib": float("nan"), "seconds": timeout, "result": f"stopped after {timeout:.0f} s"})
        rows.append(row)
    return rows


def print_worst(rows: list[dict], label: str) -> None:
    print(f"\n{label}")
    print(f"{'file':34s} {'MiB':>6s} {'peak +MiB':>10s} {'seconds':>8s}  result")
    for r in rows:
        print(f"{r['name']:34s} {r['file_mib']:6.1f} {r['peak_mib']:10.0f} {r['seconds']:8.2f}  {r['result'][:90]}")
    worst_peak = max((r["peak_mib"] for r in rows if r["peak_mib"] == r["peak_mib"]), default=float("nan"))
    print(f"worst: +{worst_peak:.0f} MiB, {max(r['seconds'] for r in rows):.1f} s")


def run_child(variant: str, png_path: Path, n: int) -> dict:
    done = subprocess.run([sys.executable, __file__, "--child", variant, str(png_path), str(n)], capture_output=True,
                          text=True, check=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--uploads", type=int, default=32)
    ap.add_argument("--side", type=int, default=12000)
    ap.add_argument("--baseline-images", type=int, default=2)
    ap.add_argument("--worst", action="store_true", help="the worst single files under the caps (see above)")
    ap.add_argument("--against", default=None, help="--worst: also run with vitlab from this checkout")
    ap.add_argument("--timeout", type=float, default=120.0, help="--worst: seconds before a decode is stopped")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    ap.add_argument("--worst-child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], args.child[1], int(args.child[2]))
        return
    if args.worst_child:
        worst_child(*args.worst_child)
        return
    if args.worst:
        print_worst(worst(ROOT, args.timeout), f"vitlab ({ROOT}): one decode per file, min_side 248")
        if args.against:
            print_worst(worst(Path(args.against), args.timeout), f"baseline ({args.against})")
        return
    png_path = Path("/tmp") / f"vitlab_decode_bench_{args.side}.png"
    if not png_path.is_file():
        png_path.write_bytes(make_png(args.side))
    size_mb = png_path.stat().st_size / 1e6
    print(f"{args.uploads} uploads of {args.side}×{args.side} RGB PNGs, {size_mb:.2f} MB each "
          f"({args.uploads * size_mb:.1f} MB of files)")
    new = run_child("vitlab", png_path, args.uploads)
    olds = [run_child("baseline", png_path, k) for k in range(1, args.baseline_images + 1)]
    # the baseline holds every image: its peak grows by one held image per upload (slope from 1..k images)
    per_image = (olds[-1]["decode_mib"] - olds[0]["decode_mib"]) / max(1, len(olds) - 1)
    projected = olds[0]["decode_mib"] + per_image * (args.uploads - 1)
    print(f"vitlab (safe decode, shrink at decode): peak {new['decode_mib']:.0f} MiB above the "
          f"{new['before_mib']:.0f} MiB resident before decoding, for all {args.uploads} (each kept at "
          f"{new['size'][0]}×{new['size'][1]}), {new['seconds']:.1f} s")
    for o in olds:
        print(f"baseline (held at full size), {o['images']} image(s): peak {o['decode_mib']:.0f} MiB above the "
              f"{o['before_mib']:.0f} MiB before, {o['seconds']:.1f} s")
    print(f"baseline projected to {args.uploads}: {olds[0]['decode_mib']:.0f} + {args.uploads - 1} x "
          f"{per_image:.0f} MiB = {projected / 1024:.1f} GiB")
    verdict = "under" if new["decode_mib"] < 1024 else "OVER"
    print(f"vitlab stays {verdict} 1 GiB: {new['decode_mib']:.0f} MiB vs {projected:.0f} MiB "
          f"({projected / max(new['decode_mib'], 1):.0f}x less)")


if __name__ == "__main__":
    main()
