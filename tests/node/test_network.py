"""Daemons as real processes on loopback: a node killed with SIGKILL catches up by sync; status and bad flags."""

import os
import signal
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from p2paudit.attest.store import AttestationStore
from p2paudit.cli import cli
from p2paudit.identity import identity_from_seed
from p2paudit.node.localnet import LocalNet, NodeSpec, start_node, stop, wait_all, wait_listening
from p2paudit.run.publisher import TrainPlan, publish_run

PUBLISHER = identity_from_seed(b"\x55" * 32)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("net") / "run"
    # arithmetic=1: its daemons replay on reference, where v1's fold is 2.5x quicker (nothing here is about it)
    publish_run(TrainPlan(run, "tiny", steps=4, ckpt_every=2, backend="reference", arithmetic=1), PUBLISHER)
    return run


def _entries(home: Path) -> set[bytes]:
    with AttestationStore.open_readonly(home / "ledger.db") as store:
        if not store.ledger.verify().ok:
            raise AssertionError(f"the ledger in {home} does not verify")
        return {bytes(e) for e in store.ledger.entries()}


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_node_killed_with_sigkill_catches_up_by_sync_with_nothing_lost(run_dir, tmp_path):
    specs = tuple(NodeSpec(f"node-{i}", tmp_path / f"node-{i}") for i in range(3))
    net = LocalNet(specs)
    try:
        start_node(net, specs[0], run_dir, None, "reference", 2, ("--duration", "90"))
        address = wait_listening(net, "node-0")
        for spec in specs[1:]:
            start_node(net, spec, run_dir, address, "reference", 2)

        def node2_audited() -> bool:
            path = specs[2].home / "status.json"
            return path.exists() and b'"audited": 0' not in path.read_bytes()

        _wait_for(node2_audited, 120, "node-2's first audit")
        os.killpg(net.processes["node-2"].pid, signal.SIGKILL)
        net.processes["node-2"].wait()
        before = _entries(specs[2].home)
        assert before, "node-2 had stored nothing before it was killed"
        assert wait_all(LocalNet(specs[1:2], {"node-1": net.processes["node-1"]}), 120)["node-1"] == 0
        # Restarted later, told only node-0, it syncs what it missed.
        start_node(net, specs[2], run_dir, address, "reference", 2)
        assert wait_all(LocalNet(specs[2:], {"node-2": net.processes["node-2"]}), 120)["node-2"] == 0
        after, reference = _entries(specs[2].home), _entries(specs[0].home)
        assert before <= after  # nothing lost across the kill
        assert reference <= after  # everything node-0 held is now here
        assert _entries(specs[1].home) <= after
    finally:
        stop(net)


def test_status_without_a_daemon_exits_2_in_one_line(tmp_path):
    result = CliRunner().invoke(cli, ["status"], env={"P2PAUDIT_HOME": str(tmp_path)})
    assert result.exit_code == 2 and "daemon status file" in result.output
    assert len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "args, message",
    [
        (["--run", "nowhere"], "does not exist"),
        (["--redundancy", "0"], "--redundancy"),
        (["--duration", "-1"], "--duration"),
    ],
)
def test_daemon_bad_flags_exit_2(run_dir, tmp_path, args, message):
    argv = ["daemon", *args] if args[0] == "--run" else ["daemon", "--run", str(run_dir), *args]
    result = CliRunner().invoke(cli, argv, env={"P2PAUDIT_HOME": str(tmp_path)})
    assert result.exit_code == 2 and message in result.output


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_lone_daemon_audits_every_step_and_status_reports_it(run_dir, tmp_path):
    home = tmp_path / "home"
    net = LocalNet((NodeSpec("solo", home),))
    try:
        start_node(net, net.specs[0], run_dir, None, "reference", 1)  # r = 1: one node covers the run
        assert wait_all(net, 120)["solo"] == 0
    finally:
        stop(net)
    shown = CliRunner().invoke(cli, ["status"], env={"P2PAUDIT_HOME": str(home)})
    assert shown.exit_code == 0, shown.output
    assert "not running" in shown.output and "4/4 steps checked" in shown.output
    assert len(_entries(home)) == 5  # init and four steps


def test_config_peers_are_read_and_unknown_fields_refused(tmp_path):
    from p2paudit.errors import InputError
    from p2paudit.identity import default_config, load_config, save_config

    config = default_config(home=tmp_path)
    save_config(type(config)(**{**config.__dict__, "peers": ("/ip4/127.0.0.1/tcp/1/p2p/x",)}), tmp_path / "c.json")
    assert load_config(tmp_path / "c.json").peers == ("/ip4/127.0.0.1/tcp/1/p2p/x",)
    text = (tmp_path / "c.json").read_text().replace('"peers"', '"peers": [], "pears"')
    (tmp_path / "bad.json").write_text(text)
    with pytest.raises(InputError, match="unknown field 'pears'"):
        load_config(tmp_path / "bad.json")


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_daemon_dials_the_peers_its_config_names(run_dir, tmp_path):
    from p2paudit.identity import default_config, ensure_node_identity, save_config

    specs = (NodeSpec("node-0", tmp_path / "node-0"), NodeSpec("node-1", tmp_path / "node-1"))
    net = LocalNet(specs)
    try:
        start_node(net, specs[0], run_dir, None, "reference", 2, ("--duration", "60"))
        address = wait_listening(net, "node-0")
        config = default_config(home=specs[1].home)
        save_config(type(config)(**{**config.__dict__, "peers": (address,)}), specs[1].home / "config.json")
        ensure_node_identity(specs[1].home)
        start_node(net, specs[1], run_dir, None, "reference", 2)  # no --peer: only the config names node-0
        # Covered twice in node-1's ledger means it reached node-0: alone it holds one check per step.
        assert wait_all(LocalNet(specs[1:], {"node-1": net.processes["node-1"]}), 120)["node-1"] == 0
    finally:
        stop(net)


MDNS_SCRIPT = """
set -e
ip link set lo up
ip link set lo multicast on
for n in 1 2; do
  P2PAUDIT_HOME="$BASE/m$n" timeout 90 "$PY" -m p2paudit daemon --run "$RUN" --backend reference --until-covered \\
    --mdns --listen /ip4/127.0.0.1/tcp/0 > "$BASE/m$n.log" 2>&1 &
done
fail=0
for job in $(jobs -p); do wait "$job" || fail=1; done
exit $fail
"""


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_two_daemons_find_each_other_by_mdns_inside_a_private_network_namespace(run_dir, tmp_path):
    """Each told no peer: covering the run twice means they found each other. The namespace (unshare -rn)
    has only its own loopback, so nothing is multicast on the machine's real interfaces."""
    import shutil
    import subprocess
    import sys

    probe = subprocess.run(["unshare", "-rn", "true"], capture_output=True) if shutil.which("unshare") else None
    if probe is None or probe.returncode != 0 or not shutil.which("ip"):
        pytest.skip("needs unshare -rn and ip (util-linux, iproute2) to make a private network namespace")
    env = dict(os.environ, BASE=str(tmp_path), RUN=str(run_dir), PY=sys.executable)
    done = subprocess.run(["unshare", "-rn", "bash", "-c", MDNS_SCRIPT], env=env, capture_output=True, timeout=150)
    logs = "".join((tmp_path / f"m{n}.log").read_text()[-1500:] for n in (1, 2))
    assert done.returncode == 0, logs
    for n in (1, 2):
        assert "4/4 checked 2x" in (tmp_path / f"m{n}.log").read_text()
