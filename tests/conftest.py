"""How the suite runs in parallel (pytest-xdist): which tests share one worker, which run alone, and why.

scripts/test.sh runs everything not marked `serial` on several workers (`-n N --dist loadgroup`), then
the `serial` tests alone in one process.

- Groups (GROUPS below): under `--dist loadgroup` the tests of a group go to one worker, one after
  another, never beside each other. xdist's own `xdist_group` mark cannot do this under pytest 9.2
  (xdist 3.8.0 appends the group to `item._nodeid`, which pytest 9 no longer reads: the mark is
  silently ignored), so this file gives xdist a scheduler that groups by path instead.
  - tests/netns: each test builds namespaces, veths and nftables routers and runs three to five
    daemons behind NATs, and test_fabric checks that no namespace of ours is left: one fabric at a time.
  - tests/explorer/test_explorer_browser.py: one headless Chromium at a time.
  - modules whose module-scoped fixture runs a long probe (a subprocess under the Triton interpreter,
    a published run behind a server): each is one unit, so the fixture runs once, not once on each
    worker that draws one of its tests (the CI log of 2026-12-06 showed the probes of
    test_device_residency, test_lab_triton and test_triton_backend each set up twice: 25-54 s each);
    and tests/kernels/test_cpu_nn.py, whose kernels the warm-up does not compile: three workers
    compiled the causal softmax's at once (17.9-20.2 s each of three tests in that log).
  Every other test is its own unit, spread freely.
- `serial` (a mark in the test's file): the test holds a measured time to a bound (a daemon stops within
  5 s, a stalled download is noticed within 3 s, a token bucket refills at 0.5 a second). Other workers'
  load would make the bound flaky, so they never run beside other tests: scripts/test.sh runs them after
  the parallel phase, and on more than one xdist worker they are skipped in one line (failed under CI).
"""

from __future__ import annotations

import os
import signal

import pytest

from tests.ci_gate import skip_or_fail

# Test paths (prefixes, relative to tests/) whose tests run on one worker, one at a time: the group's name.
GROUPS = {
    "netns/": "netns",
    "explorer/test_explorer_browser.py": "browser",
    "engine/test_device_residency.py": "device-residency probe",
    "lab/test_lab_triton.py": "lab triton probe",
    "kernels/test_triton_backend.py": "triton backend probe",
    "node/test_daemon_slow_server.py": "slow server's run",
    "kernels/test_cpu_nn.py": "cpu_nn kernels",
}


def group_of(nodeid: str) -> str | None:
    """The group of the test `nodeid` (as pytest writes it, from the repository root), or None."""
    path = nodeid.split("::", 1)[0].removeprefix("tests/")
    return next((group for prefix, group in GROUPS.items() if path.startswith(prefix)), None)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """Under `--dist loadgroup`: each group is one unit of work, every other test its own."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class PathGroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid) or nodeid

    return PathGroupScheduling(config, log)


def pytest_configure(config: pytest.Config) -> None:
    # A suite started in the background by a non-interactive shell (`cmd &`, nohup, some CI runners) has
    # SIGINT ignored, and every process it starts inherits that: the tests that interrupt a command
    # (exit 130) would wait on a child that cannot hear them. A handler here gives children the default.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _parallel_workers() -> int:
    """How many xdist workers share this run (1 without xdist)."""
    return int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("serial") is not None and _parallel_workers() > 1:
        skip_or_fail(
            "the serial tests alone",
            "serial: holds a time to a bound, so it runs alone (scripts/test.sh's second phase, or pytest -m serial)",
        )
