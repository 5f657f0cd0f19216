"""Every analysis page on a real-size pair in a browser (issue 51): seconds to the first chart, seconds until the page
is done, the server's peak memory, and what runs past the page's right edge, against the zoo's pair in the same run.

    python bench/pages_bench.py                                   # both pairs, every page, 32 images in batches of 16
    python bench/pages_bench.py --pairs real --pages probes,receptive --images 256 --batch-size 32

One ``streamlit run app/Home.py`` per pair and page (a fresh server: the page's memory is its own, nothing loaded
before it) on a fresh disk cache, started on the pair as a researcher starts the app on their own models
(``VITLAB_MODEL_A``/``_B``), opened at 1280 x 900 in a new browser session through the page's link
(``?n=IMAGES&bs=BATCH``). Not through a link that names the models: such a link proposes them ("Use it") and the
page waits for the click, which would time the clicking (before that wait existed the page ran on the default zoo
models meanwhile, and issue 51's earlier rounds of this bench on Head ablation and Attribution timed a zoo chart).
Timed from the link's ``goto``: ``first chart`` when a Vega-Lite chart is drawn (``first chart is``: a running
estimate, said as such above it, or the final chart), ``done`` when the script has stopped running (Streamlit's
status widget gone) for 2 s with no progress bar. The server's resident memory is sampled every 0.2 s: ``idle``
once it answers, ``loaded`` when the page's models are in (the first chart), ``peak`` over the page; growth =
peak − loaded, the analysis's own memory beyond its models. ``past edge``: text, charts and images whose right edge
lies past the window's at 1280 px. Errors shown on the page are printed. Pairs interleave per page (round-robin
order), so both see the same load on a shared machine.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from warm_bench import ARGS, CHROMIUM, Server  # noqa: E402  (one way of starting a server for every bench)

PAIRS = {"zoo": ("zoo:vit-cls", "zoo:resnet"),
         "real": ("vit_base_patch16_224@random:0", "resnet50@random:0")}
PAGES = ("similarity", "attention", "heads", "receptive", "skips", "localization", "probes", "logit_lens",
         "ablation", "attribution", "token_norms", "models")
ESTIMATE = re.compile("^(Running estimate|First answer)")
CHART = '[data-testid="stVegaLiteChart"] canvas, [data-testid="stVegaLiteChart"] svg'
EDGE_SELECTOR = ", ".join(f'[data-testid="stMain"] {tag}' for tag in ("svg", "canvas", "img", "p", "h1", "h2", "h3"))
PAST_EDGE = """([w, sel]) => {
  const out = [];
  for (const el of document.querySelectorAll(sel)) {
    const r = el.getBoundingClientRect();
    if (r.width > 0 && r.right > w + 1) out.push(el.tagName.toLowerCase() + ' ' + Math.round(r.right) + 'px');
  }
  return out;
}"""


def rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


class Sampler(threading.Thread):
    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.peak, self.stop_flag = pid, 0.0, threading.Event()

    def run(self) -> None:
        while not self.stop_flag.is_set():
            m = rss_mib(self.pid)
            if m == m:
                self.peak = max(self.peak, m)
            time.sleep(0.2)


def visit(browser, url: str, page: str, a: str, b: str, images: int, batch: int, timeout_s: float,
          sampler: Sampler, first_only: bool = False) -> dict:
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    out = {"first": float("nan"), "done": float("nan"), "loaded": float("nan"), "errors": [], "past": [],
           "kind": "-"}
    try:
        pg = ctx.new_page()
        pg.set_default_timeout(timeout_s * 1000)
        t0 = time.perf_counter()
        pg.goto(f"{url}/{page}?n={images}&bs={batch}")  # the server's own models are the pair (VITLAB_MODEL_A/B)
        deadline = t0 + timeout_s
        while time.perf_counter() < deadline:
            use = pg.get_by_role("button", name="Use it")
            if use.count():
                use.first.click()
                pg.wait_for_timeout(500)
                continue
            if pg.locator(CHART).count():
                out["first"] = time.perf_counter() - t0
                out["loaded"] = rss_mib(sampler.pid)
                # a running estimate (issue 51) says so above its chart; else the chart is the final one
                out["kind"] = "estimate" if pg.get_by_text(ESTIMATE).count() else "final"
                break
            if pg.locator('[data-testid="stException"]').count():
                break
            pg.wait_for_timeout(200)
        quiet = None
        while not first_only and time.perf_counter() < deadline:
            busy = pg.locator('[data-testid="stStatusWidget"]').count() or pg.locator(
                '[data-testid="stProgress"]').count() or pg.get_by_role("button", name="Use it").count()
            if busy:
                quiet = None
                if pg.get_by_role("button", name="Use it").count():
                    pg.get_by_role("button", name="Use it").first.click()
            elif quiet is None:
                quiet = time.perf_counter()
            elif time.perf_counter() - quiet >= 2.0:
                out["done"] = quiet - t0
                break
            pg.wait_for_timeout(200)
        if out["first"] != out["first"] and pg.locator(CHART).count():
            out["first"] = time.perf_counter() - t0
        alerts = pg.locator('[data-testid="stException"], [data-testid="stAlertContentError"]')
        out["errors"] = [alerts.nth(i).inner_text()[:160].replace("\n", " ") for i in range(alerts.count())]
        out["past"] = pg.evaluate(PAST_EDGE, [1280, EDGE_SELECTOR])
    finally:
        ctx.close()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pairs", default=",".join(PAIRS), help="zoo, real, or both (comma-separated)")
    p.add_argument("--pages", default=",".join(PAGES))
    p.add_argument("--images", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--timeout", type=float, default=420.0, help="seconds a page may take before it is cut off")
    p.add_argument("--port", type=int, default=8531)
    p.add_argument("--first-only", action="store_true", help="stop at the first chart (no 'done' time)")
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    pairs = [x for x in args.pairs.split(",") if x]
    pages = [x for x in args.pages.split(",") if x]
    root = Path(tempfile.mkdtemp(prefix="vitlab-pages-bench-"))
    from playwright.sync_api import sync_playwright

    print(f"pages_bench {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {os.cpu_count()} CPUs, load "
          f"{os.getloadavg()[0]:.1f}; {args.images} images in batches of {args.batch_size}; a fresh server and cache "
          f"per pair and page; 1280 x 900", flush=True)
    rows = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            for i, page in enumerate(pages):
                for pair in pairs[i % len(pairs):] + pairs[:i % len(pairs)]:
                    cache = root / f"{pair}-{page}"
                    env = {**os.environ, "VITLAB_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1",
                           "VITLAB_MODEL_A": PAIRS[pair][0], "VITLAB_MODEL_B": PAIRS[pair][1],
                           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent.parent),
                                                          os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
                    srv = Server(args.port, "persist", env, root / "streamlit.log")
                    sampler = Sampler(srv.proc.pid)
                    sampler.start()
                    idle = rss_mib(srv.proc.pid)
                    try:
                        r = visit(browser, srv.url, page, *PAIRS[pair], args.images, args.batch_size, args.timeout,
                                  sampler, args.first_only)
                    finally:
                        sampler.stop_flag.set()
                        sampler.join()
                        srv.stop()
                    r.update(page=page, pair=pair, idle=idle, peak=sampler.peak)
                    rows.append(r)
                    print(f"{page:13s} {pair:5s} first chart {r['first']:6.1f} s ({r['kind']})  "
                          f"done {r['done']:6.1f} s  RSS idle "
                          f"{idle:5.0f}, loaded {r['loaded']:5.0f}, peak {sampler.peak:5.0f} MiB  past edge "
                          f"{len(r['past'])}  errors {len(r['errors'])}", flush=True)
                    for e in r["errors"]:
                        print(f"    error: {e}", flush=True)
        finally:
            browser.close()
    print("\n| page | pair | first chart s | first chart is | done s | RSS loaded MiB | peak MiB | growth MiB | "
          "past the edge | errors |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        done = (f"{r['done']:.1f}" if r["done"] == r["done"] else "not waited for (--first-only)"
                if args.first_only else f"> {args.timeout:.0f} (cut off)")
        print(f"| {r['page']} | {r['pair']} | {r['first']:.1f} | {r['kind']} | {done} | "
              f"{r['loaded']:.0f} | {r['peak']:.0f} | {r['peak'] - r['loaded']:.0f} | {len(r['past'])} | "
              f"{len(r['errors'])} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
