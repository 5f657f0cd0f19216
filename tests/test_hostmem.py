"""vitlab.hostmem (VITLAB_KEEP_FREED=1): freed host memory is reused during a CPU run (no page faults for a large
buffer allocated again), and given back to the kernel when the run ends; off by default. The page-fault checks run in a fresh process each, so the
heap starts as glibc leaves it (an earlier test's free chunks would be reused whatever the setting)."""

import json
import os
import platform
import subprocess
import sys

import pytest

from vitlab.engine import hostmem

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
MIB = 2**20
SIZE = 96 * MIB  # above glibc's largest dynamic mmap threshold (32 MiB) and a thread heap (64 MiB)
PAGES = SIZE // 4096

PROBE = f"""
import json, resource, torch
from vitlab.engine import hostmem

def touch():
    # minor page faults of allocating {SIZE} bytes, writing every page, freeing them
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t = torch.empty({SIZE // 4}, dtype=torch.float32)
    t.fill_(1.0)
    del t
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / {MIB}

torch.set_num_threads(1)
out = {{"plain": [touch() for _ in range(4)]}}
with hostmem.keep_freed() as acting:
    out["acting"] = acting
    out["kept"] = [touch() for _ in range(16)]
    out["rss_in"] = rss()
out["rss_after"] = rss()
print(json.dumps(out))
"""


def probe(keep: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "VITLAB_KEEP_FREED"}
    env.update({} if keep is None else {"VITLAB_KEEP_FREED": keep})
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300, env=env,
                          check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


@glibc
def test_a_large_buffer_allocated_again_reuses_its_pages_and_the_memory_goes_back_after():
    r = probe("1")
    assert r["acting"]
    # glibc maps such a buffer per use: every page is faulted in and zeroed, every time
    assert min(r["plain"]) > 0.9 * PAGES, r["plain"]
    # kept: most touches cost none. Not all: torch asks for 64-byte aligned blocks, and glibc before 2.38 does not
    # look for an aligned free block before growing the heap, so a freed block that lies misaligned is skipped; over
    # 40 fresh processes (address layout random) 9 to 15 of 16 touches were free, and the heap grew by 1 to 7 copies
    free = sum(k < 0.05 * PAGES for k in r["kept"])
    assert free >= 6, r["kept"]
    assert r["rss_in"] - r["rss_after"] > 0.8 * SIZE / MIB, (r["rss_in"], r["rss_after"])


@glibc
@pytest.mark.parametrize("keep", [None, "0"])
def test_off_by_default_and_when_set_to_0(keep):
    r = probe(keep)
    assert not r["acting"]
    assert min(r["kept"]) > 0.9 * PAGES, r["kept"]


def test_nested_and_disabled_uses_count(monkeypatch):
    monkeypatch.setenv("VITLAB_KEEP_FREED", "1")
    with hostmem.keep_freed(enabled=False) as acting:
        assert not acting and not hostmem.active()
    if platform.libc_ver()[0] != "glibc":
        with hostmem.keep_freed() as acting:
            assert not acting  # nothing to set elsewhere
        return
    with hostmem.keep_freed() as outer:
        with hostmem.keep_freed() as inner:  # two runs at once in the app
            assert outer and inner
        assert hostmem.active()  # the inner run's end leaves the outer one's setting
    assert not hostmem.active()
    monkeypatch.setenv("VITLAB_KEEP_FREED", "0")
    with hostmem.keep_freed() as acting:
        assert not acting and not hostmem.active()


@glibc
def test_a_cpu_run_keeps_freed_memory_while_it_runs(tiny_vit, fmnist_source, store, monkeypatch):
    """With VITLAB_KEEP_FREED=1 the runner opens keep_freed around a CPU model's batches and closes it when the
    stream ends, also when the consumer stops early (a cancelled run); without it, it never opens."""
    import vitlab

    def active_per_batch(indices):
        return [hostmem.active() for _ in vitlab.run.stream([tiny_vit], fmnist_source, indices, 4,
                                                            [[vitlab.GramStatistic()]], vitlab.Run(store=store))]

    monkeypatch.delenv("VITLAB_KEEP_FREED", raising=False)
    assert active_per_batch(list(range(16, 24))) == [False, False]
    monkeypatch.setenv("VITLAB_KEEP_FREED", "1")

    seen = [hostmem.active() for _ in vitlab.run.stream([tiny_vit], fmnist_source, list(range(8)), 4,
                                                          [[vitlab.GramStatistic()]], vitlab.Run(store=store))]
    assert seen == [True, True]
    assert not hostmem.active()
    batches = vitlab.run.stream([tiny_vit], fmnist_source, list(range(8, 16)), 4, [[vitlab.GramStatistic()]],
                                vitlab.Run(store=store))
    next(batches)
    assert hostmem.active()
    batches.close()
    assert not hostmem.active()


def test_a_value_that_is_neither_on_nor_off_is_named(monkeypatch):
    from vitlab import VitlabError

    monkeypatch.setenv("VITLAB_KEEP_FREED", "maybe")
    with pytest.raises(VitlabError, match="VITLAB_KEEP_FREED must be 1 .* not 'maybe'"):
        with hostmem.keep_freed():
            pass
