"""Training a zoo recipe from scratch (seeded, reproducible on one machine and thread count), its model card,
and evaluation of the shipped checkpoints on Fashion-MNIST."""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from vitlab.inputs import fmnist
from vitlab.errors import VitlabError

from .recipes import (INPUT_SIZE, MEAN, SLICE_N, SLICE_TOL, STD, ZOO_DIR, Recipe, _sha256, build, create, recipe,
                      to_input)


def train_indices(labels: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """Sorted indices of a class-stratified `fraction` of `labels`, chosen by a permutation seeded by `seed`."""
    if not 0.0 < fraction <= 1.0:
        raise VitlabError(f"data fraction {fraction} must be in (0, 1]")
    if fraction == 1.0:
        return np.arange(len(labels))
    rng = np.random.default_rng(seed)
    picked = []
    for c in np.unique(labels):
        idx = np.flatnonzero(labels == c)
        picked.append(idx[rng.permutation(len(idx))[: max(1, round(fraction * len(idx)))]])
    return np.sort(np.concatenate(picked))


def _augment(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """Random translation by up to 2 px (zero padding) and horizontal flip, per image. x: (B, 1, 28, 28)."""
    B, _, H, W = x.shape
    pad = 2
    xp = F.pad(x, (pad, pad, pad, pad), value=-MEAN[0] / STD[0])  # pad with the normalised value of black
    dy = torch.randint(0, 2 * pad + 1, (B,), generator=g)
    dx = torch.randint(0, 2 * pad + 1, (B,), generator=g)
    rows = (dy[:, None] + torch.arange(H)[None, :])[:, :, None]  # (B, H, 1)
    cols = (dx[:, None] + torch.arange(W)[None, :])[:, None, :]  # (B, 1, W)
    x = xp[torch.arange(B)[:, None, None], 0, rows, cols].unsqueeze(1)
    flip = torch.rand(B, generator=g) < 0.5
    return torch.where(flip[:, None, None, None], x.flip(-1), x)


# --------------------------------------------------------------------------------------------- train / eval


def _device(device: str | None) -> torch.device:
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        return torch.device(device)
    except RuntimeError as e:
        raise VitlabError(f"device '{device}' is not a torch device ({e}); use cpu, cuda or auto") from e


@torch.no_grad()
def accuracy(model: nn.Module, images: np.ndarray, labels: np.ndarray, batch_size: int = 500) -> float:
    """Top-1 accuracy of `model` on uint8 images (N, 28, 28) with int labels (N,)."""
    model.eval()
    dev = next(model.parameters()).device
    correct = 0
    for i in range(0, len(images), batch_size):
        logits = model(to_input(images[i : i + batch_size]).to(dev))  # (B, 10)
        correct += int((logits.argmax(-1).cpu() == torch.as_tensor(labels[i : i + batch_size])).sum())
    return correct / len(images)


def evaluate(name: str, images: int | None = None, root: str | Path | None = None, path=None) -> dict:
    """Test accuracy of the shipped `name` on the first `images` test images (all available when None)."""
    model = build(name, root)
    x, y = fmnist.load("test", path)
    if images is not None:
        if not 0 < images <= len(x):
            raise VitlabError(f"--images {images} must be between 1 and {len(x)} ({fmnist.describe('test', path)})")
        x, y = x[:images], y[:images]
    return {"name": name, "accuracy": accuracy(model, x, y), "images": len(x), "data": fmnist.describe("test", path)}


def _schedule(r: Recipe, steps: int):
    def lr_lambda(step: int) -> float:
        if step < r.warmup_steps:
            return (step + 1) / r.warmup_steps
        return 0.5 * (1.0 + math.cos(math.pi * (step - r.warmup_steps) / max(1, steps - r.warmup_steps)))

    return lr_lambda


def train(
    r: Recipe | str,
    out: str | Path | None = None,
    device: str | None = None,
    max_steps: int | None = None,
    train_data: tuple[np.ndarray, np.ndarray] | None = None,
    test_data: tuple[np.ndarray, np.ndarray] | None = None,
    progress: bool = True,
    threads: int = 1,
    log_every: int = 0,
) -> dict:
    """Train recipe `r` from scratch, write OUT/NAME.safetensors and OUT/NAME.json, return the card.

    Seeded and reproducible on one machine and thread count. `max_steps`, `train_data` and `test_data` exist for
    smoke tests; the shipped models use the full Fashion-MNIST train and test sets.
    """
    r = recipe(r) if isinstance(r, str) else r
    dev = _device(device)
    out = Path(out or ZOO_DIR)
    out.mkdir(parents=True, exist_ok=True)
    if dev.type == "cpu":
        # One thread: on the shared 2-core machine, 2 threads ran 5-10x slower per step than 1 whenever other
        # processes held the cores (OpenMP workers wait for a descheduled partner). Recorded in the card.
        torch.set_num_threads(threads)
    x_all, y_all = train_data if train_data is not None else fmnist.load("train")
    idx = train_indices(y_all, r.fraction, r.data_seed)
    x_train = to_input(x_all[idx]).to(dev)  # (n, 1, 28, 28)
    y_train = torch.as_tensor(y_all[idx]).to(dev)
    steps = r.steps if max_steps is None else min(r.steps, max_steps)

    torch.manual_seed(r.seed)
    model = create(r).to(dev).train()
    g = torch.Generator().manual_seed(r.seed)
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]  # norms and biases: no weight decay
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": r.weight_decay}, {"params": no_decay, "weight_decay": 0.0}], lr=r.lr
    )
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _schedule(r, steps))

    seconds, cpu_seconds = _fit(model, opt, sched, r, x_train, y_train, steps, g, progress, log_every)
    model = model.cpu().eval()
    return _write_card(model, r, out, dev, idx, steps, seconds, cpu_seconds, train_data, test_data)


def _fit(model, opt, sched, r: Recipe, x_train, y_train, steps: int, g, progress: bool, log_every: int
         ) -> tuple[float, float]:
    """The training loop: seeded batch order (``g``), no partial batches; returns (wall, CPU) seconds."""
    from tqdm import tqdm

    n = len(x_train)
    dev = x_train.device
    start, cpu_start = time.perf_counter(), time.process_time()
    x_log, y_log = fmnist.load("test", fmnist.bundled_dir())
    order, pos = torch.randperm(n, generator=g), 0
    bar = tqdm(range(steps), desc=f"train {r.name}", disable=not progress, mininterval=5, file=sys.stderr)
    for step in bar:
        if pos + r.batch_size > n:  # drop the last partial batch of each pass
            order, pos = torch.randperm(n, generator=g), 0
        b = order[pos : pos + r.batch_size].to(dev)
        pos += r.batch_size
        xb = _augment(x_train[b].cpu(), g).to(dev) if r.augment else x_train[b]
        loss = F.cross_entropy(model(xb), y_train[b])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        bar.set_postfix(loss=f"{loss.item():.3f}", refresh=False)
        if log_every and (step + 1) % log_every == 0:
            acc = accuracy(model, x_log, y_log)
            model.train()
            msg = f"step {step + 1}: loss {loss.item():.3f}, accuracy {acc:.3f} on the bundled 1000 test images"
            bar.write(f"{msg}, {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return time.perf_counter() - start, time.process_time() - cpu_start


def _write_card(model, r: Recipe, out: Path, dev, idx, steps: int, seconds: float, cpu_seconds: float,
                train_data, test_data) -> dict:
    """Save the weights (safetensors) and the JSON card beside them; return the card."""
    import timm
    from safetensors.torch import save_file

    n = len(idx)
    x_test, y_test = test_data if test_data is not None else fmnist.load("test")
    test_desc = "given" if test_data is not None else fmnist.describe("test")
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    ckpt = out / f"{r.name}.safetensors"
    save_file(state, str(ckpt), metadata={"zoo": r.name, "arch": r.arch})
    c = {
        "name": r.name,
        "purpose": r.purpose,
        "arch": r.arch,
        "class": f"{type(model).__module__}.{type(model).__name__}",
        "kwargs": r.kwargs,
        "surgery": _surgery(r),
        "noskip_block": r.noskip_block,
        "params": sum(p.numel() for p in model.parameters()),
        "input": {"size": list(INPUT_SIZE), "mean": list(MEAN), "std": list(STD), "pixels": "uint8 / 255"},
        "data": {
            "dataset": "fashion-mnist",
            "train": "given" if train_data is not None else fmnist.describe("train"),
            "fraction": r.fraction,
            "n_train": n,
            "indices_seed": r.data_seed,
            "indices": "class-stratified, numpy default_rng(indices_seed).permutation per class, first round(f*n_c)",
            "indices_sha256": _sha256(np.asarray(idx, dtype="<i8").tobytes()),
            "augmentation": "random translate <= 2 px (zero pad), horizontal flip p=0.5" if r.augment else "none",
        },
        "seed": r.seed,
        "steps": steps,
        "batch_size": r.batch_size,
        "epochs": round(steps * r.batch_size / n, 2),
        "optimiser": {
            "name": "AdamW",
            "lr": r.lr,
            "betas": [0.9, 0.999],
            "weight_decay": r.weight_decay,
            "no_decay": "biases and norm weights",
            "schedule": f"linear warmup {r.warmup_steps} steps, cosine to 0",
        },
        "test_accuracy": accuracy(model, x_test, y_test),
        "test_data": test_desc,
        "test_images": len(x_test),
        "slice_accuracy": accuracy(model, *(a[:SLICE_N] for a in fmnist.load("test", fmnist.bundled_dir()))),
        "slice": f"first {SLICE_N} test images (bundled assets/fashion-mnist)",
        "slice_tolerance": SLICE_TOL,
        "train_seconds": round(seconds, 1),
        "train_cpu_seconds": round(cpu_seconds, 1),
        "device": str(dev) if dev.type != "cpu" else f"cpu, {torch.get_num_threads()} thread(s)",
        "machine": _machine(),
        "torch": torch.__version__,
        "timm": timm.__version__,
        "checkpoint_sha256": _sha256(ckpt.read_bytes()),
        "checkpoint_bytes": ckpt.stat().st_size,
        "recipe": {k: v for k, v in asdict(r).items() if k not in ("kwargs", "purpose")},
    }
    (out / f"{r.name}.json").write_text(json.dumps(c, indent=2) + "\n")
    return c


def _machine() -> str:
    import os
    import platform

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{platform.machine()}, {os.cpu_count()} cores, load average {load:.1f} at the end of training"


def _surgery(r: Recipe) -> list[str]:
    if r.arch == "resnet":
        return ["maxpool = nn.Identity()"]
    if r.noskip_block is not None:
        return [f"blocks[{r.noskip_block}].__class__ = vitlab.zoo.NoSkipBlock (no residual additions)"]
    return []
