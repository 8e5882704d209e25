"""Runs announced by a lab and followed by volunteers (issue 13, item 2).

The announcement format is checked with mutations; then, on loopback, a lab's run is served over HTTP
(the standard library's server), `p2paudit announce` (a real process, the lab's key) publishes it
through a daemon that follows the lab and has no run of its own; that daemon audits the whole run, and
a second follower that joins later learns the announcement from the first and adopts the run too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from hostile_peer import wait_until
from test_daemon_remote import Server

from p2paudit.attest.queries import coverage
from p2paudit.attest.store import AttestationStore
from p2paudit.identity import ensure_node_identity, identity_from_seed
from p2paudit.node import wire
from p2paudit.node.assign.auditor import AuditPolicy
from p2paudit.node.daemon.daemon import DaemonConfig
from p2paudit.node.daemon.run import run_daemon
from p2paudit.node.protocols.announce import (
    Announcement,
    check_manifest,
    decode_announcement,
    encode_announcement,
    sign_announcement,
)
from p2paudit.run.publisher import TrainPlan, publish_run

LAB = identity_from_seed(b"\x71" * 32)
RUN = bytes(range(32))


def test_announcement_round_trip_and_every_mutation_is_refused():
    data = sign_announcement(LAB, RUN, ["https://lab.example/run/", "http://mirror.example/r"], 1_764_000_000_000)
    a = decode_announcement(data)
    assert (a.run_id, a.urls, a.publisher) == (
        RUN,
        ("https://lab.example/run/", "http://mirror.example/r"),
        LAB.public_key,
    )
    assert encode_announcement(a) == data
    for i in range(len(data)):  # every single-bit flip is refused (format or signature)
        flipped = data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1 :]
        with pytest.raises(wire.WireError):
            decode_announcement(flipped)
    with pytest.raises(wire.WireError):
        decode_announcement(data + b"\x00")
    for bad in (["ftp://lab.example/run"], ["https:///no-host"], ["x" * 600], []):
        with pytest.raises(wire.WireError):
            sign_announcement(LAB, RUN, bad, 1)
    other = identity_from_seed(b"\x72" * 32)
    forged = encode_announcement(Announcement(RUN, a.urls, other.public_key, a.time_ms, a.signature))
    with pytest.raises(wire.WireError, match="not signed"):
        decode_announcement(forged)


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> tuple[Path, Path]:
    """(the lab's home, with its node key; the directory served, holding run/ signed by that key)."""
    root = tmp_path_factory.mktemp("lab")
    home = root / "home"
    identity, _ = ensure_node_identity(home)
    publish_run(
        # arithmetic=1: its daemons replay on reference, where v1's fold is 2.5x quicker (nothing here is about it)
        TrainPlan(root / "served" / "run", "tiny", steps=3, ckpt_every=1, backend="reference", arithmetic=1),
        identity,
    )
    return home, root / "served"


def test_a_manifest_signed_by_another_key_is_refused(lab):
    from p2paudit.run.manifest import read_manifest

    manifest = read_manifest(lab[1] / "run")
    own = decode_announcement(sign_announcement(LAB, manifest.run_id, ["http://x.example/run/"], 1))
    with pytest.raises(wire.WireError, match="another key"):
        check_manifest(own, manifest)


def _covered(ledger: Path, run_id: bytes) -> int:
    store = AttestationStore.open_readonly(ledger)
    try:
        return sum(1 for item in coverage(store, run_id).per_step if item.checked >= 1)
    finally:
        store.close()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_followers_audit_a_run_announced_after_they_started_and_a_late_one_learns_it_from_a_peer(lab, tmp_path):
    lab_home, served = lab
    lab_key = ensure_node_identity(lab_home)[0].public_key
    server = Server(served)
    events: dict[str, list] = {"a": [], "b": []}

    def config(name: str, peers: tuple[str, ...] = ()) -> DaemonConfig:
        home = tmp_path / name
        home.mkdir()
        return DaemonConfig(
            runs=(),
            ledger_path=home / "ledger.db",
            status_path=home / "status.json",
            peers=peers,
            backend="reference",
            policy=AuditPolicy(redundancy=1, scratch_dir=home / "scratch"),
            follow=frozenset({lab_key}),
            cache_dir=home / "cache",
            duration=240.0,
        )

    def status(name: str) -> dict:
        return json.loads((tmp_path / name / "status.json").read_text())

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_daemon, identity_from_seed(b"\x73" * 32), config("a"), events["a"].append)
            await wait_until(lambda: (tmp_path / "a" / "status.json").exists(), "daemon a", 60)
            addr = status("a")["listen"][0]
            env = {**os.environ, "P2PAUDIT_HOME": str(lab_home)}
            cmd = [sys.executable, "-m", "p2paudit", "announce", server.url, "--peer", addr, "--wait", "30"]
            done = await trio.to_thread.run_sync(lambda: subprocess.run(cmd, env=env, capture_output=True, text=True))
            assert done.returncode == 0, done.stderr[-2000:]
            assert "announced run sha256:" in done.stdout
            await wait_until(lambda: any(e.kind == "following" for e in events["a"]), "a follows the run", 60)
            await wait_until(lambda: status("a")["runs"], "the run in a's status", 30)
            run_id = bytes.fromhex(status("a")["runs"][0]["run_id"])
            await wait_until(lambda: _covered(tmp_path / "a" / "ledger.db", run_id) == 3, "a audits it all", 120)
            # A follower that starts after the announcement learns it from a peer that holds it.
            nursery.start_soon(run_daemon, identity_from_seed(b"\x74" * 32), config("b", (addr,)), events["b"].append)
            await wait_until(lambda: any(e.kind == "following" for e in events["b"]), "b adopts the run", 90)
            await wait_until(lambda: _covered(tmp_path / "b" / "ledger.db", run_id) == 3, "b holds its coverage", 60)
            nursery.cancel_scope.cancel()

    try:
        trio.run(main)
    finally:
        server.close()
    assert not any(e.kind == "refused" and "announced run" in e.text for e in events["a"] + events["b"])
