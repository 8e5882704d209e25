"""How often the node tests wait, and on which clock: the count issue 20 item 4 asks for.

Counts, in every file of tests/node (or the directory given), the places that wait: each call of
`trio.sleep(`, `time.sleep(` or `asyncio.sleep(`, and each call of a `wait_until(` poll helper
(it sleeps between tries). A place inside a top-level test or helper function that runs on
`trio.testing.MockClock` (its source says `mock_clock=True`, `MockClock(` or `on_mock_clock(`)
waits virtually: the clock jumps when every task waits, so it costs no real time. Every other
place waits for real. Comments are left out; the poll helpers' own definitions are not counted.

    python benchmarks/waits_in_tests.py             # this tree's tests/node
    python benchmarks/waits_in_tests.py OTHER/tests/node
"""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

SLEEP = re.compile(r"\b(?:trio|time|asyncio)\.sleep\(")
POLL = re.compile(r"\bwait_until\(")
MOCK = ("mock_clock=True", "MockClock(", "on_mock_clock(")


def count_waits(directory: Path) -> dict[str, dict[str, int]]:
    """{"real": {"sleep": n, "poll": n}, "virtual": {...}} over the directory's *.py files."""
    counts = {clock: {"sleep": 0, "poll": 0} for clock in ("real", "virtual")}
    for path in sorted(directory.glob("*.py")):
        source = path.read_text()
        lines = source.splitlines()
        mocked = []
        for node in ast.parse(source).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None:
                body = "\n".join(lines[node.lineno - 1 : node.end_lineno])
                if any(mark in body for mark in MOCK):
                    mocked.append((node.lineno, node.end_lineno))
        for number, line in enumerate(lines, 1):
            code = line.split("#", 1)[0]
            clock = "virtual" if any(a <= number <= b for a, b in mocked) else "real"
            counts[clock]["sleep"] += len(SLEEP.findall(code))
            if "def wait_until" not in code:
                counts[clock]["poll"] += len(POLL.findall(code))
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", nargs="?", type=Path, default=Path(__file__).resolve().parents[1] / "tests/node")
    args = parser.parse_args()
    counts = count_waits(args.directory)
    for clock in ("real", "virtual"):
        c = counts[clock]
        print(f"{clock:7}  sleeps {c['sleep']:3}  polls {c['poll']:3}  together {c['sleep'] + c['poll']:3}")


if __name__ == "__main__":
    main()
