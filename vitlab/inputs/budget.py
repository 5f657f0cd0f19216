"""Memory for models: what this machine has free, and the budget all loaded models may hold together.

``VITLAB_MODELS_GB`` (GiB) bounds the weights of every model loaded in one process together (the app's shared
model cache, a CLI command's models). Unset, it is half of this machine's memory (the smaller of physical memory and
a container's cgroup limit): the other half is left to the forwards, the disk cache, the browser and everything
else on the machine. Free memory is ``MemAvailable`` (Linux ``/proc/meminfo``), less what a cgroup limit leaves, or
psutil's figure where psutil is installed; for a CUDA device, ``torch.cuda.mem_get_info`` as well.

Nothing here imports torch unless a CUDA device is asked about; reading the figures costs microseconds.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from ..errors import VitlabError

GIB = 2**30
MAX_GB = 1 << 20  # 1 PiB: anything larger is a unit mistake (bytes or MiB given as GiB)


def _meminfo() -> dict[str, int]:
    """/proc/meminfo in bytes ({} where there is none: macOS, Windows)."""
    try:
        text = Path("/proc/meminfo").read_text()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[key] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    return out


def _stat(folder: Path, key: str) -> int:
    try:
        for line in (folder / "memory.stat").read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key and value.strip().isdigit():
                return int(value)
    except OSError:
        pass
    return 0


def _cgroup() -> tuple[int | None, int | None]:
    """(limit, working set) in bytes of this process's memory cgroup (v2, else v1 as a container mounts it); a
    limit of None where there is none. The working set leaves out inactive page cache, which the kernel reclaims
    before it ends a process (what ``docker stats`` shows)."""
    v2 = None
    try:
        rel = next((line[3:] for line in Path("/proc/self/cgroup").read_text().splitlines()
                    if line.startswith("0::")), None)
    except OSError:
        rel = None
    if rel is not None:
        v2 = Path("/sys/fs/cgroup") / rel.strip().lstrip("/")
    for folder, limit_file, usage_file, inactive in (
            (v2, "memory.max", "memory.current", "inactive_file"),
            (Path("/sys/fs/cgroup/memory"), "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")):
        if folder is None:
            continue
        try:
            limit = (folder / limit_file).read_text().strip()
            usage = int((folder / usage_file).read_text().strip())
        except (OSError, ValueError):
            continue
        # v1 writes "no limit" as a huge page-aligned number, v2 as "max"
        bound = int(limit) if limit.isdigit() and int(limit) < 1 << 60 else None
        return bound, max(0, usage - _stat(folder, inactive))
    return None, None


def _psutil():
    try:
        import psutil
    except ImportError:
        return None
    return psutil.virtual_memory()


def total_bytes() -> int | None:
    """This machine's memory as a process here can use it: physical memory, or a cgroup's limit when lower."""
    total = _meminfo().get("MemTotal")
    if total is None:
        vm = _psutil()
        total = vm.total if vm is not None else None
    if total is None:
        try:
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            total = None
    limit, _ = _cgroup()
    if limit is not None:
        total = limit if total is None else min(total, limit)
    return total


def free_bytes() -> int | None:
    """Memory a new allocation can get now without swapping (None when this system does not say)."""
    free = _meminfo().get("MemAvailable")
    if free is None:
        vm = _psutil()
        free = vm.available if vm is not None else None
    limit, usage = _cgroup()
    if limit is not None and usage is not None:
        left = max(0, limit - usage)
        free = left if free is None else min(free, left)
    return free


def device_free_bytes(device: str) -> int | None:
    """Free memory of a CUDA device (None for the CPU and other backends)."""
    if not str(device).startswith("cuda"):
        return None
    import torch

    try:
        free, _ = torch.cuda.mem_get_info(torch.device(device))
    except (RuntimeError, AssertionError, ValueError):
        return None
    return int(free)


def models_budget_gb(text: str | None = None) -> float:
    """``VITLAB_MODELS_GB`` as a positive number of GiB; unset: half of :func:`total_bytes` (inf when unknown)."""
    text = os.environ.get("VITLAB_MODELS_GB", "") if text is None else text
    if not str(text).strip():
        total = total_bytes()
        return total / 2 / GIB if total else math.inf
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (value > 0 and math.isfinite(value)):
        raise VitlabError(f"VITLAB_MODELS_GB={text!r} must be a positive number of GiB (the memory all loaded models "
                          "may hold together), e.g. VITLAB_MODELS_GB=8")
    if value > MAX_GB:
        raise VitlabError(f"VITLAB_MODELS_GB={text!r} is more than {MAX_GB:,} GiB; give the budget in GiB, "
                          "e.g. VITLAB_MODELS_GB=8")
    return value


def budget_words() -> str:
    """How the budget was set, for messages: 'VITLAB_MODELS_GB=8' or 'VITLAB_MODELS_GB unset: half of 23.4 GiB'."""
    text = os.environ.get("VITLAB_MODELS_GB", "").strip()
    if text:
        return f"VITLAB_MODELS_GB={text}"
    total = total_bytes()
    return f"VITLAB_MODELS_GB unset: half of this machine's {total / GIB:.1f} GiB" if total else "VITLAB_MODELS_GB unset"
