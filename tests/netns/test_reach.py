"""Volunteers behind two NATs, told only a public bootstrap node that offers relay service (issue 13, items 4-6).

Real processes in the namespace fabric (tests/netns/fabric.py): p2paudit nodes and daemons, a run served
by the standard library's http.server in the public namespace. Each test checks counts: echoes answered
both ways, each step's checks in every ledger, cosignatures by the other home's witness key.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from .conftest import require_netns
from .fabric import Fabric, wait_for_line
from .reach_node import seed_identity

pytestmark = [pytest.mark.slow]

HERE = Path(__file__).parent
PUB_ADDR = Fabric.public_addr(0)
PORT = 4001


def _peer(seed: int) -> str:
    from p2paudit.identity import peer_id_of

    return peer_id_of(seed_identity(seed).public_key)


def wait_status(proc: subprocess.Popen[str], ok: Callable[[dict], bool], timeout: float, what: str) -> dict:
    """Read `STATUS <json>` lines until one satisfies `ok`; fail with the last one and the output otherwise."""
    deadline, last, seen = time.monotonic() + timeout, None, []
    while time.monotonic() < deadline:
        line, lines = wait_for_line(proc, "STATUS ", deadline - time.monotonic())
        seen += lines[-20:]
        if line is None:
            break
        last = json.loads(line.split("STATUS ", 1)[1])
        if ok(last):
            return last
    raise AssertionError(f"{what}: not within {timeout} s; last status {last}; output:\n" + "\n".join(seen[-30:]))


def _links(status: dict) -> dict[str, dict]:
    return {link["peer"]: link for link in status["reach"]["links"]}


@pytest.mark.timeout(120)
def test_homes_behind_random_port_nats_told_only_a_relay_reach_each_other_through_it():
    """Symmetric NATs: hole punching cannot work, so the homes stay connected through the relay, both ways."""
    require_netns()
    with Fabric(homes=2, public=1, nat_mapping="random") as net:
        relay_id, home_ids = _peer(0), {1: _peer(1), 2: _peer(2)}
        boot = f"/ip4/{PUB_ADDR}/tcp/{PORT}/p2p/{relay_id}"
        common = [str(HERE / "reach_node.py"), "--duration", "80"]
        relay = net.spawn_python(
            net.node("pub0"),
            [*common, "--seed", "0", "--relay-service", "--announce", f"/ip4/{PUB_ADDR}/tcp/{PORT}"],
        )
        homes = {
            i: net.spawn_python(net.node(f"home{i - 1}"), [*common, "--seed", str(i), "--bootstrap", boot])
            for i in (1, 2)
        }
        t0 = time.monotonic()
        for i, other in ((1, 2), (2, 1)):
            status = wait_status(
                homes[i],
                lambda s, o=other: (
                    _links(s).get(home_ids[o], {}).get("kind") == "relayed" and s["echoed"].get(home_ids[o], 0) >= 3
                ),
                75,
                f"home{i - 1} echoing home{other - 1} through the relay",
            )
            link = _links(status)[home_ids[other]]
            assert link["relay"] == relay_id, link
            assert status["reach"]["reservations"] == [relay_id]
            assert status["reach"]["state"] != "public"
            assert any("/p2p-circuit" in a for a in status["reach"]["addresses"])
            assert not any("198.51.100." in a for a in status["reach"]["addresses"])  # the LAN is never told
        print(f"\nboth homes echoed each other through the relay {time.monotonic() - t0:.1f} s after start")
        relayed = wait_status(
            relay,
            lambda s: s["reach"]["state"] == "public" and s["reach"]["relay_service"]["circuits"] >= 1,
            30,
            "the relay, public by dial-back, carrying the homes' circuit",
        )
        assert relayed["reach"]["relay_service"]["reservations"] == 2
        assert {link["kind"] for link in relayed["reach"]["links"]} == {"direct"}


# ---- daemons ----------------------------------------------------------------------------------------------

STEPS = 12


@pytest.fixture(scope="module")
def served_run(tmp_path_factory) -> tuple[Path, bytes]:
    require_netns()
    from p2paudit.audit.replay import open_run
    from p2paudit.identity import identity_from_seed
    from p2paudit.run.publisher import TrainPlan, publish_run

    root = tmp_path_factory.mktemp("served")
    publish_run(
        # arithmetic=1: its daemons replay on reference, where v1's fold is 2.5x quicker (nothing here is about it)
        TrainPlan(root / "run", "tiny", steps=STEPS, ckpt_every=2, backend="reference", arithmetic=1),
        identity_from_seed(b"\x5a" * 32),
    )
    return root, open_run(root / "run").manifest.run_id


def _daemon(net: Fabric, where: str, home: Path, args: list[str]) -> subprocess.Popen[str]:
    home.mkdir(parents=True, exist_ok=True)
    env = {"P2PAUDIT_HOME": str(home), "PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1"}
    argv = ["-m", "p2paudit", "daemon", "--listen", f"/ip4/0.0.0.0/tcp/{PORT}", "--duration", "170", *args]
    return net.spawn_python(net.node(where), argv, env=env)


def _started(proc: subprocess.Popen[str]) -> str:
    line, lines = wait_for_line(proc, " auditing ", 40)
    assert line is not None and line.startswith("node "), "daemon did not start:\n" + "\n".join(lines[-30:])
    return line.split()[1]


def _status(home: Path) -> dict:
    try:
        return json.loads((home / "status.json").read_text())
    except (OSError, ValueError):
        return {}


def _wait_files(
    homes: list[Path], ok: Callable[[list[dict]], bool], timeout: float, what: str, procs: list[subprocess.Popen[str]]
) -> list[dict]:
    """Status files until `ok` holds for them; otherwise fail with the statuses and what the daemons printed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        statuses = [_status(h) for h in homes]
        if all(statuses) and ok(statuses):
            return statuses
        time.sleep(0.5)
    printed = "\n".join(line for proc in procs for line in ["----", *wait_for_line(proc, "\x00", 0.5)[1][-60:]])
    raise AssertionError(f"{what}: not within {timeout} s; statuses: {json.dumps(statuses)[-3000:]}\n{printed}")


def _checked_by_all(status: dict) -> bool:
    return bool(status.get("runs")) and all(r["checked_r"] == r["steps"] for r in status["runs"])


def _link_kind(status: dict, peer: str) -> str | None:
    return {link["peer"]: link["kind"] for link in status.get("reach", {}).get("links", [])}.get(peer)


def _stop(proc: subprocess.Popen[str]) -> list[str]:
    """SIGTERM, wait, and return what it printed that nobody read yet (for failure messages)."""
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=20)
    return wait_for_line(proc, "\x00", 2)[1]


def _cosigned_by(home: Path, witness: str) -> bool:
    """Whether `home`'s ledger holds a cosignature by `witness`'s key (read-only, beside the running daemon)."""
    try:
        with sqlite3.connect(f"file:{home / 'ledger.db'}?mode=ro", uri=True, timeout=1) as db:
            rows = db.execute("SELECT cosigner FROM cosignatures WHERE kind = 'received'").fetchall()
    except sqlite3.Error:
        return False
    return any(witness in row[0] for row in rows)


@pytest.mark.timeout(200)
def test_daemons_behind_two_nats_audit_a_served_run_witness_each_other_and_converge_after_a_partition(
    served_run, tmp_path
):
    root, run_id = served_run
    with Fabric(homes=2, public=1) as net:
        pub, router1 = net.node("pub0"), net.node("router1")
        net.spawn_python(pub, ["-m", "http.server", "8000", "--bind", PUB_ADDR, "--directory", str(root)])
        url = f"http://{PUB_ADDR}:8000/run/"
        follow = "00" * 32  # the bootstrap node audits no run: everything the homes share goes between them
        boot = _daemon(
            net,
            "pub0",
            tmp_path / "pub0",
            ["--follow", follow, "--relay-service", "--announce", f"/ip4/{PUB_ADDR}/tcp/{PORT}"],
        )
        boot_addr = f"/ip4/{PUB_ADDR}/tcp/{PORT}/p2p/{_started(boot)}"
        homes = [tmp_path / "home0", tmp_path / "home1"]
        procs = [
            _daemon(
                net,
                f"home{i}",
                homes[i],
                ["--run", url, "--peer", boot_addr, "--redundancy", "2", "--backend", "reference"],
            )
            for i in (0, 1)
        ]
        ids = [_started(p) for p in procs]
        t0 = time.monotonic()
        # Told only the bootstrap node, the homes find each other through it and link up (relayed, then punched).
        linked = _wait_files(
            homes,
            lambda s: _link_kind(s[0], ids[1]) in ("relayed", "hole-punched") and _link_kind(s[1], ids[0]) is not None,
            60,
            "the homes linking up through the relay",
            procs,
        )
        linked_at = time.monotonic() - t0
        net.set_router_link(router1, up=False)  # home1 is cut off for a while, mid-audit
        time.sleep(8)
        net.set_router_link(router1, up=True)
        running = _wait_files(
            homes,
            lambda s: all(_checked_by_all(x) for x in s) and all(_cosigned_by(homes[i], ids[1 - i]) for i in (0, 1)),
            120,
            "every ledger holding every volunteer's attestations and the other home's cosignature",
            procs,
        )
        converged_at = time.monotonic() - t0
        boot_status = _status(tmp_path / "pub0")
        for proc in procs + [boot]:
            _stop(proc)
        final = [_status(h) for h in homes]
    kinds = [[_link_kind(s, ids[1 - i]) for i, s in enumerate(x)] for x in (linked, running)]
    states = [s["reach"]["state"] for s in running]
    print(
        f"\nhomes linked {linked_at:.1f} s ({kinds[0]}), converged {converged_at:.1f} s ({kinds[1]}, {states}) after start"
    )
    assert boot_status["reach"]["state"] == "public"
    for i, status in enumerate(running):
        assert status["reach"]["state"] != "public"
        assert status["reach"]["reservations"] == [boot_status["peer_id"]]
        assert not any("198.51.100." in a for a in status["reach"]["addresses"])  # the LAN is never told
    for i, status in enumerate(final):
        assert status["equivocations"] == 0
        (run,) = status["runs"]
        assert (run["checked_once"], run["checked_r"], run["disputes"]) == (STEPS, STEPS, 0)
        _check_ledger(homes[i], run_id, witness=ids[1 - i])


def _check_ledger(home: Path, run_id: bytes, witness: str) -> None:
    """Both volunteers' attestations of every step, a verified log, and cosignatures by the other home."""
    from p2paudit.attest.queries import coverage
    from p2paudit.attest.store import AttestationStore

    store = AttestationStore.open_readonly(home / "ledger.db")
    try:
        assert store.ledger.verify().ok
        assert {item.step: item.checked for item in coverage(store, run_id).per_step} == dict.fromkeys(range(STEPS), 2)
    finally:
        store.close()
    with sqlite3.connect(f"file:{home / 'ledger.db'}?mode=ro", uri=True) as db:
        cosigners = {row[0] for row in db.execute("SELECT cosigner FROM cosignatures WHERE kind = 'received'")}
    assert any(witness in c for c in cosigners), cosigners
