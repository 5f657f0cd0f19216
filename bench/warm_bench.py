"""Warm visits (issue 34): time to the first chart of a page in a new browser session, right after a server restart,
with a warm disk cache, against a named baseline in the same interleaved run.

    python bench/warm_bench.py                          # 3 rounds, every page, both variants
    python bench/warm_bench.py --rounds 5 --pages tour,present --port 8521

Each measurement starts a fresh ``streamlit run app/Home.py`` (a restarted server: nothing in memory), waits until it
answers its health check (``start`` in the table: the server's own start, not counted in the page time), opens the page
in a new browser context (a new session), and times from ``goto`` to the page's first chart drawn in the browser
(Home: the models' fingerprints and the sample images shown, Home having no chart). The variants:

- ``baseline``: ``streamlit run app/Home.py`` with ``VITLAB_PERSIST=0`` and ``VITLAB_WARMUP=0``: results computed
  again from the cached per-batch statistics in every new session, nothing warmed: the app before issue 34;
- ``persist``: ``streamlit run app/Home.py`` as it runs by default: whole results read back from the disk cache
  (``lab.compute``), imports and default models warmed in the background from the first script run on;
- ``serve``: ``streamlit run app/serve.py``: the same, and the warm-up starts with the server, before any browser.

The browser opens the page ``--settle`` seconds (default 10) after the server answers, for every variant: a person
restarting the server and then opening a tab. Rounds interleave the variants (round r starts with variant r mod n),
so all see the same load on a shared machine;
the table gives the median and the range per page and variant. A priming pass first fills the disk cache (statistics
and saved results) for every page. ``--cache`` picks the cache folder (default: a fresh one under /tmp, primed).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-dev-shm-usage"]
CHART = '[data-testid="stVegaLiteChart"] canvas, [data-testid="stVegaLiteChart"] svg'
# page -> (url path, what "ready" is)
PAGES = {"home": ("", "home"), "similarity": ("similarity", CHART), "tour": ("tour", CHART),
         "present": ("present", CHART)}
# variant -> (the script `streamlit run` starts, environment)
VARIANTS = {"baseline": ("Home.py", {"VITLAB_PERSIST": "0", "VITLAB_WARMUP": "0"}),
            "persist": ("Home.py", {"VITLAB_PERSIST": "1", "VITLAB_WARMUP": "1"}),
            "serve": ("serve.py", {"VITLAB_PERSIST": "1", "VITLAB_WARMUP": "1"})}
TIMEOUT_S = 300


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


class Server:
    """``streamlit run app/Home.py`` in its own process group, stopped on exit."""

    def __init__(self, port: int, variant: str, env: dict, log: Path):
        self.url = f"http://127.0.0.1:{port}"
        script, extra = VARIANTS[variant]
        env = {**env, **extra}
        cmd = [sys.executable, "-m", "streamlit", "run", str(ROOT / "app" / script), "--server.headless", "true",
               "--server.port", str(port), "--server.address", "127.0.0.1", "--server.fileWatcherType", "none",
               "--browser.gatherUsageStats", "false"]
        self.log = open(log, "ab")  # noqa: SIM115 - closed in stop()
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        while not _healthy(self.url):
            if self.proc.poll() is not None or time.perf_counter() - t0 > 120:
                self.stop()
                raise RuntimeError(f"streamlit did not start; see {log}")
            time.sleep(0.1)
        self.start_s = time.perf_counter() - t0

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # the group started above: streamlit and nothing else
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.log.close()


def time_page(browser, url: str, page: str) -> float:
    """Seconds from ``goto`` to the page's first chart (Home: fingerprints and images) in a new browser context."""
    path, ready = PAGES[page]
    ctx = browser.new_context(viewport={"width": 1500, "height": 1100})
    try:
        pg = ctx.new_page()
        pg.set_default_timeout(TIMEOUT_S * 1000)
        t0 = time.perf_counter()
        pg.goto(f"{url}/{path}")
        if ready == "home":
            pg.get_by_text("fingerprint", exact=False).first.wait_for()
            pg.locator('[data-testid="stImage"] img, [data-testid="stFullScreenFrame"] img').first.wait_for()
        else:
            pg.locator(CHART).first.wait_for(state="attached")
        elapsed = time.perf_counter() - t0
        if pg.locator('[data-testid="stException"]').count():
            raise RuntimeError(f"{page}: {pg.locator('[data-testid=stException]').first.inner_text()[:500]}")
        return elapsed
    finally:
        ctx.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--pages", default=",".join(PAGES))
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--port", type=int, default=8521)
    p.add_argument("--cache", default=None, help="disk cache folder (default: a fresh one, primed first)")
    p.add_argument("--settle", type=float, default=10.0,
                   help="seconds between the server answering and the browser opening the page, as a person restarting "
                        "a server and then opening a tab (the same for every variant)")
    p.add_argument("--no-prime", action="store_true", help="the cache is already warm for these pages")
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped bench stops its server too (finally below)
    pages = [x for x in args.pages.split(",") if x]
    variants = [x for x in args.variants.split(",") if x]
    cache = Path(args.cache or tempfile.mkdtemp(prefix="vitlab-warm-bench-"))
    log = cache.parent / f"{cache.name}-streamlit.log"
    base_env = {**os.environ, "VITLAB_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1",
                "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    from playwright.sync_api import sync_playwright

    times: dict[tuple[str, str], list[float]] = {}
    starts: dict[str, list[float]] = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            if not args.no_prime:  # statistics and saved results for every page (one server, a session each)
                srv = Server(args.port, "persist", base_env, log)
                try:
                    for page in pages:
                        print(f"priming {page}: {time_page(browser, srv.url, page):.1f} s", flush=True)
                finally:
                    srv.stop()
            for r in range(args.rounds):
                order = variants[r % len(variants):] + variants[:r % len(variants)]
                for page in pages:
                    for v in order:
                        srv = Server(args.port, v, base_env, log)
                        time.sleep(args.settle)
                        try:
                            t = time_page(browser, srv.url, page)
                        finally:
                            srv.stop()
                        times.setdefault((page, v), []).append(t)
                        starts.setdefault(v, []).append(srv.start_s)
                        print(f"round {r + 1} {page:10s} {v:8s} first chart {t:6.2f} s  (server start "
                              f"{srv.start_s:.1f} s)", flush=True)
        finally:
            browser.close()
    print(f"\nTime to first chart after a server restart, new browser session, warm disk cache "
          f"({args.rounds} rounds interleaved; median [min, max] s; load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} cores):")
    print(f"| page | {' | '.join(variants)} |")
    print("|---|" + "---|" * len(variants))
    for page in pages:
        cells = []
        for v in variants:
            ts = times[(page, v)]
            cells.append(f"{statistics.median(ts):.1f} [{min(ts):.1f}, {max(ts):.1f}]")
        print(f"| {page} | {' | '.join(cells)} |")
    print("| (server start to healthy) | " + " | ".join(f"{statistics.median(starts[v]):.1f}" for v in variants)
          + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
