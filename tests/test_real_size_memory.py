"""Memory grows with the batch, never with the images (DESIGN.md "One pass, many statistics"; issue 51).

Each measurement runs in its own process (so that no earlier test's heap is counted), loads the model, resets the
kernel's peak-RSS mark, runs the page's engine call on a new thread (as a Streamlit script run does) and reports the
peak resident memory above the loaded model. A run on 4x the images must not peak higher by more than a fraction of
what keeping the images' token maps would cost, computed here from the model's shapes.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODEL = "vit_small_patch16_224@random:0"  # the largest ViT whose passes fit the suite's time on 2 cores


def _status(field: str) -> int:
    return int(re.search(rf"{field}:\s+(\d+) kB", Path("/proc/self/status").read_text()).group(1)) * 1024


def _measure(what: str, images: int) -> dict:
    """In this process: load MODEL, run ``what`` over ``images`` on a new thread, return the peak growth in bytes."""
    import torch

    import vitlab
    from vitlab.analyses import probes, receptive

    torch.set_num_threads(2)
    m = vitlab.load(MODEL, "cpu")
    src = vitlab.open_source("fashion-mnist:test")
    run = vitlab.Run(bootstrap=0)
    if what == "receptive":  # the page's batch of 8; the last block's gradient holds the deepest graph
        opts = receptive.ReceptiveOptions(images=images, batch_size=8, layers=("blocks.11",))

        def call():
            receptive.receptive_fields(m, src, opts, run)
    else:  # every block, CLS and GAP, as the page; 1 shot per class (10 + 10 images) and the rest test images, in
        # batches of 10: the small and the large run both have only full batches
        opts = probes.ProbeOptions(shots=1, test=images - 20, reps=("cls", "gap"), draws=1, batch_size=10)

        def call():
            probes.probes([m], src, opts, run)
    errors = []

    def guarded():
        try:
            call()
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            errors.append(repr(e))

    before = _status("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # the peak mark (VmHWM) starts again from here
    t = threading.Thread(target=guarded)
    t.start()
    t.join()
    if errors:
        raise RuntimeError(errors[0])
    return {"growth": _status("VmHWM") - before, "images": images}


def measure(what: str, images: int) -> int:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, __file__, what, str(images)], capture_output=True, text=True, env=env, check=False,
                         timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])["growth"]


def token_map_bytes(what: str) -> int:
    """What one image would cost if its token maps were kept: for the probes, every block's output (N, D) in
    float32; for a receptive field's backward, what each block must keep at least: its attention probabilities
    (H, N, N) and its MLP's hidden activations (N, 4D)."""
    import timm
    import torch

    with torch.device("meta"):
        model = timm.create_model(MODEL.split("@")[0])
    n = model.patch_embed.num_patches + model.num_prefix_tokens
    d, heads, depth = model.embed_dim, model.blocks[0].attn.num_heads, len(model.blocks)
    if what == "probes":
        return depth * n * d * 4
    return depth * (heads * n * n + n * 4 * d) * 4


needs_proc = pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="peak RSS via /proc (Linux)")


@needs_proc
@pytest.mark.parametrize("what, small, large", [("receptive", 8, 24), ("probes", 24, 112)])
def test_peak_memory_grows_with_the_batch_not_the_images(what, small, large):
    a, b = measure(what, small), measure(what, large)
    kept = (large - small) * token_map_bytes(what)  # what O(images) storage of token maps would add
    assert kept > 300 * 2**20  # the comparison means something: the extra images' maps would be large
    assert b - a < 0.25 * kept, (f"{what}: peak growth {a / 2**20:.0f} MiB at {small} images, {b / 2**20:.0f} MiB "
                                 f"at {large}; keeping token maps would add {kept / 2**20:.0f} MiB")
    assert b < 2 * 2**30  # and within the stated budget above the loaded model (docs/app.md, "Memory")


if __name__ == "__main__":
    print(json.dumps(_measure(sys.argv[1], int(sys.argv[2]))))
