"""The attention-distance spectrum of zoo ViTs, block by block, against uniform attention and the untrained twin.

For each model and its untrained twin (same architecture, random init seed 0), runs `vitlab attention-distance`
on the Fashion-MNIST test images and prints, per block, the most local and the most global head with their 95 %
intervals (over images), uniform attention on the same grid, and the spread (most global - most local) as a
fraction of uniform. This is the table behind docs/zoo.md's "Do local heads form at 196 tokens?" (Raghu et al.
2021, Fig 3: lower blocks mix local and global heads).

    python bench/zoo_heads.py                                  # vit-cls-14, vit-gap-14, vit-cls, with twins
    python bench/zoo_heads.py -m zoo:vit-cls-14 --images 1024
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import tempfile
from pathlib import Path


def spectrum(models: list[str], images: int, data: str) -> list[dict]:
    with tempfile.TemporaryDirectory() as out:
        cmd = ["vitlab", "attention-distance", "--data", data, "--images", str(images), "--out", out]
        for m in models:
            cmd += ["-m", m]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        with open(Path(out) / "attention_distance.csv", newline="") as f:
            return list(csv.DictReader(f))


def table(rows: list[dict]) -> list[str]:
    lines = ["| model | block | most local head, px [95 %] | most global head, px [95 %] | uniform px | spread / uniform |",
             "|---|---|---|---|---|---|"]
    models = list(dict.fromkeys(r["model"] for r in rows))
    for m in models:
        mine = [r for r in rows if r["model"] == m]
        for layer in sorted({int(r["layer"]) for r in mine}):
            heads = [r for r in mine if int(r["layer"]) == layer]
            lo = min(heads, key=lambda r: float(r["distance_px"]))
            hi = max(heads, key=lambda r: float(r["distance_px"]))
            uni = float(lo["uniform_px"])

            def fmt(r: dict) -> str:
                return (f"h{r['head']} {float(r['distance_px']):.2f} [{float(r['distance_lo']):.2f}, "
                        f"{float(r['distance_hi']):.2f}]")

            spread = (float(hi["distance_px"]) - float(lo["distance_px"])) / uni
            lines.append(f"| `{m}` | {layer} | {fmt(lo)} | {fmt(hi)} | {uni:.2f} | {spread:.2f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-m", "--model", action="append", help="zoo ViT spec (repeat); its twin is added")
    p.add_argument("--images", type=int, default=512)
    p.add_argument("--data", default="fashion-mnist:test")
    a = p.parse_args(argv)
    base = a.model or ["zoo:vit-cls-14", "zoo:vit-gap-14", "zoo:vit-cls"]
    models = [x for m in base for x in (m, f"{m}@random:0")]
    rows = spectrum(models, a.images, a.data)
    print(f"attention-distance spectrum, {a.images} images of {a.data}")
    print("\n".join(table(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
