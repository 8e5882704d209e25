"""Checking a large manifest holds memory proportional to it, and running out is one line (exit 2), never exit 3.

The red team of issue 14: a signed manifest of 252 MB (45,000 steps) peaked
at 3.4 GB over HTTP and under a 3 GB address-space limit ended in
MemoryError (exit 3). The figures at size are benchmarks/manifest_bench.py's
(docs/benchmarks.md); here a manifest of 450 steps (2.4 MB) is measured with
tracemalloc, a memory figure, not a time.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from p2paudit.run.manifest import MANIFEST_FILE, MANIFEST_MEMORY_RATIO, read_manifest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from manifest_bench import write_signed_manifest  # noqa: E402

STEPS = 450


@pytest.fixture(scope="module")
def large_run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("large") / "run"
    write_signed_manifest(run_dir, STEPS)
    return run_dir


def test_checking_a_manifest_holds_a_few_times_its_size(large_run):
    size = (large_run / MANIFEST_FILE).stat().st_size
    tracemalloc.start()
    try:
        manifest = read_manifest(large_run)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert manifest.num_steps == STEPS and "steps" not in manifest.head
    # 7.6x before (a 16 MiB read buffer; the body re-encoded twice beside a second JSON tree); the bytes,
    # and the records now: about 4x. The estimate (resident memory, fragmentation included) is above.
    assert peak < 5 * size < MANIFEST_MEMORY_RATIO * size


def test_a_manifest_too_large_for_the_memory_left_is_one_line(large_run, tmp_path):
    """An address-space limit a little above what the process holds: the parse meets MemoryError."""
    size = (large_run / MANIFEST_FILE).stat().st_size
    script = (
        "import resource, sys\n"
        "from p2paudit.cli import cli\n"
        "import p2paudit.run.manifest, p2paudit.attest.store\n"
        "held = int(open('/proc/self/statm').read().split()[0]) * resource.getpagesize()\n"
        "resource.setrlimit(resource.RLIMIT_AS, (held + int(sys.argv[1]), resource.RLIM_INFINITY))\n"
        "sys.exit(cli.main(sys.argv[2:], prog_name='p2paudit'))\n"
    )
    home = tmp_path / "home"
    args = [sys.executable, "-c", script, str(2 * size), "ledger", "add-run", str(large_run)]
    done = subprocess.run(
        args, capture_output=True, text=True, timeout=120, env=dict(os.environ, P2PAUDIT_HOME=str(home))
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"({size} bytes) needs about {MANIFEST_MEMORY_RATIO * size} bytes of memory" in lines[0]
