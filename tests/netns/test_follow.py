"""A volunteer behind NAT that follows a lab's key picks up a run the lab announces after it started (issue 13,
item 6, the fourth bullet).

The lab serves its run with the standard library's http.server in the public namespace and runs the public
bootstrap node there (relay service, following its own key); a volunteer in a home behind NAT, told only that
node and the lab's key, is already running with no run of its own when `p2paudit announce` (a real process
in the public namespace, the lab's key) announces the run. The volunteer must adopt the run and audit every
step of it over HTTP, through its NAT.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .conftest import require_netns
from .fabric import Fabric
from .test_reach import PORT, PUB_ADDR, _daemon, _started, _stop, _wait_files

pytestmark = [pytest.mark.slow]

STEPS = 4


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> tuple[Path, Path, str]:
    """The lab's home (its node key signed the run) and the directory served."""
    require_netns()
    from p2paudit.identity import ensure_node_identity
    from p2paudit.run.publisher import TrainPlan, publish_run

    home = tmp_path_factory.mktemp("lab")
    identity = ensure_node_identity(home)[0]
    served = tmp_path_factory.mktemp("served")
    publish_run(
        # arithmetic=1: its daemons replay on reference, where v1's fold is 2.5x quicker (nothing here is about it)
        TrainPlan(served / "run", "tiny", steps=STEPS, ckpt_every=1, backend="reference", arithmetic=1),
        identity,
    )
    return home, served, identity.public_key.hex()


@pytest.mark.timeout(200)
def test_a_volunteer_behind_nat_follows_a_lab_and_audits_a_run_announced_after_it_started(lab, tmp_path):
    lab_home, served, lab_key = lab
    with Fabric(homes=1, public=1) as net:
        pub = net.node("pub0")
        net.spawn_python(pub, ["-m", "http.server", "8000", "--bind", PUB_ADDR, "--directory", str(served)])
        url = f"http://{PUB_ADDR}:8000/run/"
        boot = _daemon(
            net,
            "pub0",
            tmp_path / "boot",
            ["--follow", lab_key, "--relay-service", "--announce", f"/ip4/{PUB_ADDR}/tcp/{PORT}"],
        )
        boot_addr = f"/ip4/{PUB_ADDR}/tcp/{PORT}/p2p/{_started(boot)}"
        home = tmp_path / "home0"
        volunteer = _daemon(
            net,
            "home0",
            home,
            # Redundancy 2 with two nodes: every step is the volunteer's too, however quickly the bootstrap node
            # (also following the lab) audits it; with 1, a fast bootstrap node could check all of them first and
            # leave the volunteer nothing to replay (CI saw it once the cpu backend got faster).
            ["--follow", lab_key, "--peer", boot_addr, "--redundancy", "2", "--backend", "reference"],
        )
        _started(volunteer)
        _wait_files(
            [home], lambda s: boot_addr.split("/p2p/")[1] in s[0]["peers"], 40, "the volunteer joining", [volunteer]
        )
        assert _wait_files([home], lambda s: True, 5, "a status", [volunteer])[0]["runs"] == []  # nothing to audit yet
        env = {"P2PAUDIT_HOME": str(lab_home), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        announce = net.spawn_python(pub, ["-m", "p2paudit", "announce", url, "--peer", boot_addr], env=env)
        out, _ = announce.communicate(timeout=60)
        assert announce.returncode == 0, out[-2000:]
        assert "announced run sha256:" in out
        done = _wait_files(
            [home],
            lambda s: bool(s[0]["runs"]) and s[0]["runs"][0]["checked_once"] == STEPS,
            120,
            "the volunteer auditing every step of the announced run",
            [volunteer, boot],
        )
        for proc in (volunteer, boot):
            _stop(proc)
    (run,) = done[0]["runs"]
    assert run["steps"] == STEPS and run["disputes"] == 0
    assert done[0]["audited"] >= 1  # it replayed steps itself, fetched through its NAT
    assert done[0]["remote"] and done[0]["remote"][0]["url"] == url
