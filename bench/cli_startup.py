"""How long the command line takes to answer ``--help``, against a bare ``python -c pass`` measured beside it.

    nice python bench/cli_startup.py --rounds 9

Each round runs every command once, in a rotated order (round r starts at command r), so that all see the same
load; per round, each command's wall time minus the bare interpreter's in that round is its start-up cost. The
verdict is on the target of issue 25 (within 0.5 s of ``python -c pass``): the sign test's interval for the median
difference (bench/verdicts.py). Also printed: whether the command imported torch or timm (``-X importtime``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from verdicts import interval_text, verdict

ROOT = Path(__file__).resolve().parent.parent
BASELINE = "python -c pass"
COMMANDS = {
    BASELINE: [sys.executable, "-c", "pass"],
    "python -m vitlab --help": [sys.executable, "-m", "vitlab", "--help"],
    "python -m vitlab cka --help": [sys.executable, "-m", "vitlab", "cka", "--help"],
    "python -m vitlab report --help": [sys.executable, "-m", "vitlab", "report", "--help"],
    "python -m vitlab zoo --help": [sys.executable, "-m", "vitlab", "zoo", "--help"],
    "python -m vitlab zoo list": [sys.executable, "-m", "vitlab", "zoo", "list"],
}
TARGET_S = 0.5


def env() -> dict:
    return dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def wall(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env(), cwd=ROOT)
    return time.perf_counter() - t0


def heavy_imports(cmd: list[str]) -> list[str]:
    """torch / timm if the command imported them (``python -X importtime``)."""
    out = subprocess.run([cmd[0], "-X", "importtime", *cmd[1:]], capture_output=True, text=True, env=env(), cwd=ROOT,
                         check=True)
    names = {line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
    return sorted(names & {"torch", "timm"})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=9, help="interleaved rounds (5 or more for a verdict)")
    args = parser.parse_args(argv)
    names = list(COMMANDS)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            times[name].append(wall(COMMANDS[name]))
    print(f"{args.rounds} rounds, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end")
    print(f"{'command':<32} {'median s':>9} {'min s':>7}  minus {BASELINE!r} per round; verdict on <= {TARGET_S} s;"
          " heavy imports")
    for name in names:
        t = times[name]
        line = f"{name:<32} {statistics.median(t):>9.3f} {min(t):>7.3f}"
        if name != BASELINE:
            diffs = [a - b for a, b in zip(t, times[BASELINE])]
            heavy = heavy_imports(COMMANDS[name])
            line += f"  {interval_text(diffs)}: {verdict(diffs, TARGET_S)}; {', '.join(heavy) or 'none'}"
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
