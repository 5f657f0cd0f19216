"""A class on one server (issue 47): N students walk the Lecture page together, each over its own websocket, speaking
Streamlit's own protocol (no browser: a browser per student would share the 2 cores with the server it measures).

    python bench/class_bench.py --baseline /tmp/base-tree               # N = 10, 30, 50; this tree against the base
    python bench/class_bench.py --students 10 --steps 3 --rounds 1      # quicker

Each student is what a browser tab is to the server: a websocket on ``/_stcore/stream`` that sends ``rerun_script``
BackMsgs (the page's name, the URL's query, the widgets' states, the hashes of the messages it has kept) and reads
ForwardMsgs until ``script_finished``, keeping large messages by hash as the browser does (the server then sends a
reference instead of a figure it already has). A click is: pick an option (the radio's value), Reveal (a trigger),
Next (a trigger). The class clicks together: every student sends click c at once and waits for its own page to
finish; then all send click c + 1. Per click: latency (send to ``script_finished``) per student; clicks per second
(every student's clicks over the wall time of the walk); the server's CPU per click (utime + stime of the server
process from /proc over the walk, divided by the clicks); the server's resident memory after the walk (VmRSS) and
its peak (VmHWM).

Both trees (``--tree``, default this checkout, and ``--baseline``, e.g. a worktree at the commit before) run their
own server on their own prepared lecture (prepared once per tree into ``--cache-root``, with that tree's vitlab, by
``vitlab lecture --prepare``, at the lecture's defaults: 256 images in batches of 32). The servers take turns per N
and round (round r starts with tree r mod 2), so both see the same load on a shared machine; each server is fresh
per N and round. The client runs in this process on the same cores: its parsing (a few ms per page) is in the
latencies, not in the server's CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ClientState_pb2 import ClientState
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.WidgetStates_pb2 import WidgetState

ROOT = Path(__file__).resolve().parent.parent
FINISHED = {ForwardMsg.FINISHED_SUCCESSFULLY, ForwardMsg.FINISHED_FRAGMENT_RUN_SUCCESSFULLY}
ID_PREFIX = "$$ID-"  # a keyed widget's id is "$$ID-<hash>-<key>" (Streamlit 1.67)


def proc_cpu(pid: int) -> float:
    """utime + stime of ``pid`` in seconds (/proc/PID/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_mem(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of ``pid`` in MiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            out[line[:5]] = int(line.split()[1]) / 1024
    return out["VmRSS"], out["VmHWM"]


class Server:
    """``streamlit run TREE/app/Home.py`` with TREE's vitlab on a prepared lecture, in its own process group."""

    def __init__(self, tree: Path, cache: Path, port: int, log: Path):
        self.url = f"127.0.0.1:{port}"
        env = {**os.environ, "PYTHONPATH": str(tree), "VITLAB_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1",
               "VITLAB_LECTURE_PREPARE": "0"}
        cmd = [sys.executable, "-m", "streamlit", "run", str(tree / "app" / "Home.py"), "--server.headless", "true",
               "--server.port", str(port), "--server.address", "127.0.0.1", "--server.fileWatcherType", "none",
               "--browser.gatherUsageStats", "false"]
        self.log = open(log, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(cmd, cwd=tree, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        t0 = time.perf_counter()
        while True:
            try:
                with urllib.request.urlopen(f"http://{self.url}/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if self.proc.poll() is not None or time.perf_counter() - t0 > 120:
                self.stop()
                raise RuntimeError(f"streamlit did not start; see {log}")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # the group started above: streamlit and nothing else
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.log.close()


class Student:
    """One browser tab on the Lecture page, at the protocol level."""

    def __init__(self, ws):
        self.ws = ws
        self.kept: dict[str, ForwardMsg] = {}  # the browser's message cache: large elements by hash
        self.query = ""
        self.page_hash = ""
        self.widgets: dict[str, object] = {}  # key -> the widget's proto, drawn in the last run
        self.states: dict[str, WidgetState] = {}  # widget id -> its value, as the browser sends them
        self.errors: list[str] = []

    async def run(self, trigger: str | None = None) -> float:
        """One rerun (a click): send the client's state, read until the script finished; seconds it took."""
        cs = ClientState(query_string=self.query, page_script_hash=self.page_hash,
                         page_name="" if self.page_hash else "lecture")
        ids = {w.id for w in self.widgets.values()}
        cs.widget_states.widgets.extend(s for i, s in self.states.items() if i in ids)
        if trigger:
            cs.widget_states.widgets.append(WidgetState(id=self.widgets[trigger].id, trigger_value=True))
        cs.cached_message_hashes.extend(self.kept)
        t0 = time.perf_counter()
        await self.ws.send(BackMsg(rerun_script=cs).SerializeToString())
        drawn: dict[str, object] = {}
        while True:
            msg = ForwardMsg.FromString(await self.ws.recv())
            if msg.HasField("ref_hash"):
                msg = self.kept[msg.ref_hash]
            elif msg.metadata.cacheable:
                self.kept[msg.hash] = msg
            kind = msg.WhichOneof("type")
            if kind == "navigation":
                self.page_hash = msg.navigation.page_script_hash
            elif kind == "page_info_changed":
                self.query = msg.page_info_changed.query_string
            elif kind == "delta" and msg.delta.WhichOneof("type") == "new_element":
                element = msg.delta.new_element
                which = element.WhichOneof("type")
                if which == "exception":
                    self.errors.append(element.exception.message)
                wid = getattr(getattr(element, which), "id", "") if which else ""
                if isinstance(wid, str) and wid.startswith(ID_PREFIX):
                    drawn[wid[len(ID_PREFIX):].split("-", 1)[1]] = getattr(element, which)
            elif kind == "script_finished":
                if msg.script_finished in FINISHED:
                    break
                drawn = {}  # an early end for a rerun: the next run draws the page again
        self.widgets = drawn
        return time.perf_counter() - t0

    def choice_key(self) -> str | None:
        return next((k for k in self.widgets if k.startswith("lecture.choice.")), None)

    async def click(self, what: str) -> float:
        if what == "pick":
            key = self.choice_key()
            if key is None:
                raise RuntimeError(f"no option to pick on this step (drawn: {sorted(self.widgets)})")
            radio = self.widgets[key]
            self.states[radio.id] = WidgetState(id=radio.id, string_value=radio.options[0])
            return await self.run()
        seconds = await self.run(trigger={"reveal": "lecture.reveal", "next": "lecture.next"}[what])
        if what == "reveal" and self.choice_key() is not None:
            raise RuntimeError("Reveal did not reveal the step (the options are still drawn)")
        return seconds


async def walk(url: str, n: int, steps: int, server_pid: int) -> dict:
    """N students open the Lecture page, then click together (pick, Reveal, Next per step)."""
    import websockets

    sockets = [await websockets.connect(f"ws://{url}/_stcore/stream", subprotocols=["streamlit"], max_size=None)
               for _ in range(n)]
    students = [Student(ws) for ws in sockets]
    try:
        opened = await asyncio.gather(*(s.run() for s in students))
        quiet(server_pid)
        cpu0, t0 = proc_cpu(server_pid), time.perf_counter()
        latencies: dict[str, list[float]] = {"pick": [], "reveal": [], "next": []}
        for _ in range(steps):
            for what in ("pick", "reveal", "next"):
                latencies[what] += await asyncio.gather(*(s.click(what) for s in students))
        wall, cpu = time.perf_counter() - t0, proc_cpu(server_pid) - cpu0
        errors = [e for s in students for e in s.errors]
        if errors:
            raise RuntimeError(f"the page showed an error: {errors[0][:300]}")
    finally:
        for ws in sockets:
            await ws.close()
    every = [t for ts in latencies.values() for t in ts]
    rss, hwm = proc_mem(server_pid)
    return {"open_p50": statistics.median(opened), "clicks": len(every), "wall": wall, "cpu": cpu,
            "per_s": len(every) / wall, "cpu_click": cpu / len(every), "p50": quantile(every, 0.5),
            "p95": quantile(every, 0.95), "rss": rss, "hwm": hwm,
            **{f"{k}_p50": statistics.median(v) for k, v in latencies.items()}}


def quiet(pid: int, timeout: float = 180.0) -> None:
    """Wait until the server is idle (under 2 % of a core over a second): its warm-up after the first page (heavy
    imports, the sidebar's default models) is not a click's cost."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        c0 = proc_cpu(pid)
        time.sleep(1.0)
        if proc_cpu(pid) - c0 < 0.02:
            return


def quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def prepare(tree: Path, cache: Path, images: int, batch: int) -> None:
    """The tree's lecture in its own cache (once): ``vitlab lecture --prepare`` with the tree's vitlab."""
    env = {**os.environ, "PYTHONPATH": str(tree), "HF_HUB_OFFLINE": "1"}
    args = ["-n", str(images), "-b", str(batch), "--cache-dir", str(cache)]
    if subprocess.run([sys.executable, "-m", "vitlab", "lecture", *args], check=False, env=env,
                      cwd=tree, capture_output=True).returncode == 0:
        return
    print(f"preparing the lecture for {tree} into {cache} ...", flush=True)
    subprocess.run([sys.executable, "-m", "vitlab", "lecture", "--prepare", *args], env=env, cwd=tree, check=True,
                   stdout=subprocess.DEVNULL)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tree", type=Path, default=ROOT, help="the checkout measured (default: this one)")
    p.add_argument("--baseline", type=Path, default=None, help="a checkout of the code before, measured alongside")
    p.add_argument("--students", default="10,30,50")
    p.add_argument("--steps", type=int, default=10, help="steps each student walks (3 clicks each)")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--images", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--cache-root", type=Path, default=Path("/tmp/vitlab-class-bench"))
    p.add_argument("--port", type=int, default=8547)
    a = p.parse_args(argv)
    trees = {"new": a.tree.resolve()}
    if a.baseline:
        trees = {"base": a.baseline.resolve(), **trees}
    a.cache_root.mkdir(parents=True, exist_ok=True)
    for name, tree in trees.items():
        prepare(tree, a.cache_root / name, a.images, a.batch_size)
    print(f"load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)")
    head = (f"{'tree':5} {'N':>3} {'clicks':>6} {'clicks/s':>8} {'CPU/click':>9} {'p50 s':>6} {'p95 s':>6} "
            f"{'pick':>5} {'reveal':>6} {'next':>5} {'RSS MiB':>7} {'peak':>6}")
    print(head)
    rows = []
    for n in (int(x) for x in a.students.split(",")):
        for r in range(a.rounds):
            order = list(trees) if r % 2 == 0 else list(trees)[::-1]
            for name in order:
                server = Server(trees[name], a.cache_root / name, a.port, a.cache_root / f"{name}.log")
                try:
                    res = asyncio.run(walk(server.url, n, a.steps, server.proc.pid))
                finally:
                    server.stop()
                rows.append((name, n, res))
                print(f"{name:5} {n:>3} {res['clicks']:>6} {res['per_s']:>8.1f} {res['cpu_click']:>9.3f} "
                      f"{res['p50']:>6.2f} {res['p95']:>6.2f} {res['pick_p50']:>5.2f} {res['reveal_p50']:>6.2f} "
                      f"{res['next_p50']:>5.2f} {res['rss']:>7.0f} {res['hwm']:>6.0f}", flush=True)
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
