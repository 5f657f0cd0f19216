"""Optionally keep freed host memory for reuse during a CPU run, instead of handing it back to the kernel.

glibc serves every allocation above its mmap threshold (at most 32 MiB once torch has freed a big tensor; 128 KiB
before) with a fresh ``mmap`` and unmaps it on free. A CPU forward pass allocates and frees the same large
activation buffers in every block, so each of their pages is faulted in and zeroed again, batch after batch:
ViT-B/16 at batch 64 takes ~2.1 million minor page faults (~8.5 GB of zeroed pages) per forward pass. While
:func:`keep_freed` is open, large blocks come from the heap and freed ones stay there: no page faults after the
first batch, and a plain forward took 0.86x the time (ViT-B/16, batch 32, median of 3 rounds).

The price is memory: glibc's heap is one region, and the activations' pattern of sizes leaves holes in it, so the
heap grows to about twice the forward's live peak (ViT-B/16 at batch 64: +400 MiB over the plain forward's peak;
at batch 16 almost nothing). One buffer of one size allocated again and again can cost more: torch asks for
64-byte aligned blocks, and glibc before 2.38 does not look for an aligned free block before growing the heap, so a
freed block that lies misaligned is passed over; a 96 MiB buffer grew the heap by 1 to 7 copies before one was
reused (40 fresh processes, tests/test_hostmem.py). That breaks vitlab's promise that a run's memory stays that of a plain forward, so
it is **off by default**: ``VITLAB_KEEP_FREED=1`` turns it on (bench/README.md, "Throughput", has both).

When the last open :func:`keep_freed` closes, the free memory goes back to the kernel (``malloc_trim``) and the
thresholds return to the values glibc's own dynamic threshold settles at after the first large free (mmap 32 MiB,
trim 64 MiB), so the process holds no more than before and later code allocates as it would have.

Where it acts: glibc (Linux) only. Fully on the thread that owns glibc's main arena (the CLI, torchrun, scripts).
On other threads (the app's script thread) glibc's per-thread heaps cannot hold blocks above 64 MiB, which it
still maps per use; smaller blocks are kept.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ..options import env_switch

# mallopt parameters (malloc.h)
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
KEEP = {M_MMAP_THRESHOLD: 1 << 30, M_TRIM_THRESHOLD: 1 << 30, M_TOP_PAD: 64 << 20}
# what glibc's dynamic threshold reaches after the first free of a mapped block above 32 MiB (DEFAULT_MMAP_THRESHOLD_MAX)
RESTORE = {M_MMAP_THRESHOLD: 32 << 20, M_TRIM_THRESHOLD: 64 << 20, M_TOP_PAD: 128 << 10}

_lock = threading.Lock()
_open = 0
_libc = None


def wanted() -> bool:
    """``VITLAB_KEEP_FREED`` is set to 1/true/yes/on (off by default: it trades memory for speed)."""
    return env_switch("VITLAB_KEEP_FREED", False, "keep freed memory on CPU runs", "the default")


def _glibc():
    """glibc's mallopt/malloc_trim, or None where the C library is not glibc (macOS, musl) or it is not wanted."""
    global _libc
    if not wanted():
        return None
    if _libc is None:
        _libc = False
        if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
            try:
                lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
                lib.mallopt.argtypes, lib.mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
                lib.malloc_trim.argtypes, lib.malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
                _libc = lib
            except (OSError, AttributeError):
                _libc = False
    return _libc or None


def active() -> bool:
    """True while a :func:`keep_freed` is open and took effect (only one that acted is counted)."""
    return _open > 0


@contextmanager
def keep_freed(enabled: bool = True) -> Iterator[bool]:
    """Keep freed blocks in the heap while open, when ``enabled`` and :func:`wanted` (nested and concurrent uses
    count); yields whether it acts."""
    global _open
    lib = _glibc() if enabled else None
    if lib is None:
        yield False
        return
    with _lock:
        _open += 1
        if _open == 1:
            for param, value in KEEP.items():
                lib.mallopt(param, value)
    try:
        yield True
    finally:
        with _lock:
            _open -= 1
            if _open == 0:
                for param, value in RESTORE.items():
                    lib.mallopt(param, value)
                lib.malloc_trim(0)


_trim = None


def release() -> bool:
    """Hand the free memory of every malloc arena back to the kernel (glibc's ``malloc_trim(0)``), unless a
    :func:`keep_freed` is open (it keeps that memory on purpose). Returns whether it trimmed.

    Why: glibc gives each thread that allocates its own arena, and an arena keeps what its thread freed. The app runs
    each script run on a new thread, so every run's peak (a receptive field's backward graph: ~0.9 GiB for ViT-B/16
    at 8 images) stayed resident after the run: after each of four such runs in new threads 0.8-1.7 GiB stayed above
    the loaded model; trimmed after each, 30-50 MiB (bench/README.md, "Real size: memory"). Called after each batch of the long analyses and at the
    end of every run; a trim costs milliseconds, and the pages it returns are faulted in again by the next batch, as
    glibc's default mmap threshold already does for the large blocks."""
    global _trim
    if _open > 0:
        return False
    if _trim is None:
        _trim = False
        if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
            try:
                lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
                lib.malloc_trim.argtypes, lib.malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
                _trim = lib.malloc_trim
            except (OSError, AttributeError):
                _trim = False
    if not _trim:
        return False
    _trim(0)
    return True
