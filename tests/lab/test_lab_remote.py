"""A lab run behind a URL: verify-range and a daemon's source fetch what the steps replay from (the signed
manifest, each step's trace file, the checkpoint of each state replayed from: never the server's script.py,
never the state after the last step), each piece checked against the signed manifest before it is used or
cached, from a real HTTP server on loopback (tests/range_server.py); refused without --run-lab-code before
anything but the signature and manifest is fetched; and every lie of the server is one line naming it."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from p2paudit.attest.queries import coverage
from p2paudit.attest.record_v2 import INIT_INDEX_STEP
from p2paudit.attest.store import AttestationStore
from p2paudit.cli import cli
from p2paudit.errors import EXIT_MISMATCH, EXIT_USAGE, InputError
from p2paudit.identity import identity_from_seed
from p2paudit.lab import LabClaims
from p2paudit.node.assign.auditor import AuditPolicy
from p2paudit.node.daemon.follow import Follower
from p2paudit.node.daemon.lab_source import open_remote_lab
from p2paudit.node.daemon.sources import RemoteSource
from p2paudit.node.protocols.announce import decode_announcement, sign_announcement
from p2paudit.run.cache import BlobCache
from p2paudit.run.checkpoint import checkpoint_path
from p2paudit.run.checkpoint_layout import header_length, parse_layout
from p2paudit.run.lab_run import lab_batch_path, lab_trace_path, read_lab_manifest
from p2paudit.run.manifest import LAB_SIGNATURE_DOMAIN, MANIFEST_FILE, SIGNATURE_DOMAIN, SIGNATURE_FILE, sign_body
from p2paudit.run.manifest_body import canonical_json
from p2paudit.tensor_digest import digest_state
from tests.lab.lab_runs import publish_tiny
from tests.range_server import serve_run

PUBLISHER = identity_from_seed(b"\x5a" * 32)
REPO = Path(__file__).resolve().parents[2]
SIGNED = {"manifest.sig.json", "manifest.json"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/lab/lab_runs.py's tiny Llama script, two steps, published."""
    return publish_tiny(tmp_path_factory.mktemp("remote-lab"), PUBLISHER, steps=2)


def _verify(home: Path, *args: str):  # noqa: ANN202 (click's Result)
    return CliRunner().invoke(cli, ["verify-range", *args], env={"P2PAUDIT_HOME": str(home)})


def _one_line(output: str) -> str:
    """The one error line (the output holds stderr too: the fetch's progress bars)."""
    lines = [line for line in output.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1, output
    return lines[0]


def test_verify_range_fetches_only_what_the_steps_replay_from(tiny, tmp_path):
    with serve_run(tiny) as (base, served):
        url = base + "/run/"
        first = _verify(tmp_path, "1", "--run", url, "--run-lab-code")
        asked_first = served.paths()
        logged = len(served.log)
        again = _verify(tmp_path, "0-1", "--run", url, "--run-lab-code")
        asked_again = [path for path, *_ in served.log[logged:]]
    assert first.exit_code == 0, first.output
    assert "1 check(s) of run" in first.output and "1 match, 0 mismatch" in first.output
    # Step 1 replays from state 1 on its batch and compares the digest of state 2: neither state 2, another
    # step's batch nor the server's script.
    assert asked_first == SIGNED | {lab_trace_path(1), lab_batch_path(1), checkpoint_path(1)}
    assert all(r is not None for r in served.ranges(checkpoint_path(1)))  # header, then tensors: Range requests
    assert again.exit_code == 0, again.output  # state 0 rebuilt, steps 0 and 1: three checks
    assert "3 check(s) of run" in again.output and "3 match, 0 mismatch" in again.output
    # The second took state 1 and step 1's trace from the cache: it asked only for what the first had not.
    assert set(asked_again) == SIGNED | {lab_trace_path(0), lab_batch_path(0), checkpoint_path(0)}, asked_again
    assert "script.py" not in served.paths() and checkpoint_path(2) not in served.paths()


def test_without_run_lab_code_nothing_but_the_signed_manifest_is_fetched(tiny, tmp_path):
    with serve_run(tiny) as (base, served):
        result = _verify(tmp_path, "0", "--run", base + "/run/")
    assert result.exit_code == EXIT_USAGE
    assert "is a lab run" in _one_line(result.output) and "--run-lab-code" in result.output
    assert served.paths() == SIGNED


def test_another_publisher_is_refused_before_the_manifest(tiny, tmp_path):
    other = identity_from_seed(b"\x11" * 32).public_key.hex()
    with serve_run(tiny) as (base, served):
        result = _verify(tmp_path, "0", "--run", base + "/run/", "--run-lab-code", "--publisher", other)
    assert result.exit_code == EXIT_USAGE and "not by the expected publisher" in _one_line(result.output)
    assert served.paths() == {"manifest.sig.json"}


def _flip_last_data_byte(data: bytes) -> bytes:
    """The checkpoint with one bit of its last tensor's last byte flipped (header untouched)."""
    return data[:-1] + bytes([data[-1] ^ 1])


def _last_tensor(run: Path, state: int) -> str:
    data = (run / checkpoint_path(state)).read_bytes()
    manifest = read_lab_manifest(run)
    names = [name for name, _ in manifest.state(state).tensors]
    n = header_length(data[:8], len(names), "checkpoint")
    layout = parse_layout(data[8 : 8 + n], None, "checkpoint", names)
    return max(layout.tensors.values(), key=lambda span: span.end).name


@pytest.mark.parametrize("behavior", ["normal", "ignore-range"])
def test_a_served_checkpoint_unlike_the_claimed_state_is_refused_naming_its_tensor(tiny, tmp_path, behavior):
    path = checkpoint_path(1)
    with serve_run(tiny) as (base, served):
        served.mutate[path] = _flip_last_data_byte
        served.behaviors[path] = behavior
        result = _verify(tmp_path, "1", "--run", base + "/run/", "--run-lab-code")
    line = _one_line(result.output)
    assert result.exit_code == EXIT_USAGE, result.output
    assert "(fetched, discarded)" in line and f"tensor {_last_tensor(tiny, 1)}" in line, line
    cache = BlobCache(tmp_path / "cache", 1 << 30)
    assert [e.path.name for e in cache.entries() if e.path.name.startswith("state-")] == []  # none kept


def test_a_server_ignoring_range_still_gives_a_checked_replay(tiny, tmp_path):
    with serve_run(tiny) as (base, served):
        served.behaviors[checkpoint_path(1)] = "ignore-range"
        result = _verify(tmp_path, "1", "--run", base + "/run/", "--run-lab-code")
    assert result.exit_code == 0, result.output
    assert "1 match, 0 mismatch" in result.output


def test_a_served_trace_file_unlike_the_manifests_is_refused(tiny, tmp_path):
    with serve_run(tiny) as (base, served):
        served.mutate[lab_trace_path(0)] = lambda data: data.replace(b"aten", b"aTen", 1)
        result = _verify(tmp_path, "0", "--run", base + "/run/", "--run-lab-code")
    line = _one_line(result.output)
    assert result.exit_code == EXIT_USAGE and lab_trace_path(0) in line and "is not the manifest's" in line, line


def forge_state_2(claims: LabClaims, states: list[dict[str, np.ndarray]]) -> LabClaims:
    """The publisher's lie: state 2's first tensor changed by one bit, its digest claimed and signed."""
    name = sorted(states[2])[0]
    states[2][name].reshape(-1).view(np.uint32)[0] ^= 1
    return dataclasses.replace(claims, states=(claims.states[0], digest_state(states[2])))


def test_a_signed_lie_served_remotely_is_a_mismatch_naming_the_tensor(tmp_path):
    forged = publish_tiny(tmp_path / "forged", PUBLISHER, steps=2, change=forge_state_2)
    with serve_run(forged) as (base, _):
        result = _verify(tmp_path / "home", "1", "--run", base + "/run/", "--run-lab-code")
    assert result.exit_code == EXIT_MISMATCH, result.output
    assert re.search(r"differs in 1 tensors?", result.output), result.output


def test_a_daemon_source_replays_a_remote_lab_step_only_with_the_opt_in(tiny, tmp_path):
    cache = BlobCache(tmp_path / "cache", 1 << 30)
    policy = AuditPolicy(redundancy=1, scratch_dir=tmp_path / "scratch")
    with serve_run(tiny) as (base, served):
        with pytest.raises(InputError, match="is a lab run: .* --run-lab-code"):
            RemoteSource(base + "/run/", cache)
        assert served.paths() == SIGNED
        source = RemoteSource(base + "/run/", cache, open_lab=open_remote_lab)
        try:
            first = source.replay(0, "cpu", policy)
            second = source.replay_prefetched(source.prefetch(1), "cpu", policy)
        finally:
            source.close()
    manifest = read_lab_manifest(tiny)
    assert source.manifest.run_id == manifest.run_id and source.manifest.num_steps == 2
    assert [(a.subject, a.step, a.verdict) for a in first] == [("init", 0, "match"), ("step", 0, "match")]
    assert [(a.step, a.verdict, a.observed_digest) for a in second] == [(1, "match", manifest.states[1].digest)]
    assert checkpoint_path(2) not in served.paths() and "script.py" not in served.paths()


def _signed_copy(run: Path, to: Path, body: dict, domain: bytes) -> Path:
    """A copy of `run` whose manifest is `body`, signed by the publisher under `domain` (a signed lie)."""
    shutil.copytree(run, to)
    body_bytes, envelope = sign_body(body, PUBLISHER, domain)
    (to / MANIFEST_FILE).write_bytes(body_bytes)
    (to / SIGNATURE_FILE).write_bytes(canonical_json(envelope))
    return to


def test_a_signed_source_unlike_its_sha256_is_refused_before_any_file(tiny, tmp_path):
    """The view's script.py is written from the manifest's source: a publisher signing a source other than the
    text its sha256 names (to run one script and claim another) is refused before anything else is fetched."""
    body = json.loads((tiny / MANIFEST_FILE).read_bytes())
    body["script"]["source"] += "\nimport os  # not what the sha256 names\n"
    run = _signed_copy(tiny, tmp_path / "run", body, LAB_SIGNATURE_DOMAIN)
    with serve_run(run) as (base, served):
        result = _verify(tmp_path / "home", "0", "--run", base + "/run/", "--run-lab-code")
    line = _one_line(result.output)
    assert result.exit_code == EXIT_USAGE and "the script's source is not the text its sha256 names" in line, line
    assert served.paths() == SIGNED


def _daemon(home: Path, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {"P2PAUDIT_HOME": str(home), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}  # the script's tests.lab
    cmd = [sys.executable, "-m", "p2paudit", "daemon", *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=str(REPO))


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_daemon_audits_a_lab_run_behind_a_url_only_with_the_opt_in(tiny, tmp_path):
    manifest = read_lab_manifest(tiny)
    with serve_run(tiny) as (base, served):
        refused = _daemon(tmp_path / "refusing", "--run", base + "/run/", "--duration", "4", timeout=120)
        asked_when_refused = served.paths()
        done = _daemon(
            tmp_path / "auditing", "--run", base + "/run/", "--run-lab-code", "--redundancy", "1",
            "--until-covered", "--quiet", timeout=200,
        )  # fmt: skip
    assert refused.returncode == 0, refused.stderr[-2000:]  # the daemon goes on (and --duration ends it)
    assert "is a lab run" in refused.stdout and "--run-lab-code" in refused.stdout, refused.stdout
    assert asked_when_refused == SIGNED
    assert done.returncode == 0, done.stderr[-2000:]
    with AttestationStore.open_readonly(tmp_path / "auditing" / "ledger.db") as store:
        assert store.ledger.verify().ok
        checked = {item.step: item.checked for item in coverage(store, manifest.run_id).per_step}
        steps = [(a.subject, a.step, a.verdict) for step in (INIT_INDEX_STEP, 0, 1) for _, signed in store.step_attestations(
            manifest.run_id, step) for a in (signed.attestation,)]  # fmt: skip
    assert checked == {0: 1, 1: 1}
    assert sorted(steps) == [("init", 0, "match"), ("step", 0, "match"), ("step", 1, "match")]
    assert "script.py" not in served.paths() and checkpoint_path(2) not in served.paths()


def test_init_alone_fetches_no_checkpoint_and_rebuilds_state_0(tiny, tmp_path):
    with serve_run(tiny) as (base, served):
        result = _verify(tmp_path, "init", "--run", base + "/run/", "--run-lab-code")
    assert result.exit_code == 0, result.output
    assert "1 check(s) of run" in result.output and "1 match, 0 mismatch" in result.output
    assert served.paths() == SIGNED


def test_an_announced_lab_run_opens_only_for_a_follower_with_the_opt_in(tiny, tmp_path):
    """A followed lab announces a lab run: the follower opens it as a --run URL (the announcing key pinned)
    and replays it only when it audits lab runs; another key's announcement of it is refused."""
    manifest = read_lab_manifest(tiny)
    cache = BlobCache(tmp_path / "cache", 1 << 30)
    keys = frozenset([PUBLISHER.public_key])
    with serve_run(tiny) as (base, served):
        announced = decode_announcement(sign_announcement(PUBLISHER, manifest.run_id, [base + "/run/"], 1))
        with pytest.raises(InputError, match="is a lab run: .* --run-lab-code"):
            Follower(keys, cache, 10.0, None, None, None)._open(announced)
        assert served.paths() == SIGNED
        other = identity_from_seed(b"\x11" * 32)
        forged = decode_announcement(sign_announcement(other, manifest.run_id, [base + "/run/"], 1))
        follower = Follower(keys | {other.public_key}, cache, 10.0, None, None, None, open_lab=open_remote_lab)
        with pytest.raises(InputError, match="not by the expected publisher"):
            follower._open(forged)
        source = follower._open(announced)
        try:
            audits = source.replay(1, "cpu", AuditPolicy(redundancy=1, scratch_dir=tmp_path / "scratch"))
        finally:
            source.close()
    assert [(a.step, a.verdict) for a in audits] == [(1, "match")]


def test_announce_reads_a_lab_runs_manifest_and_refuses_another_keys_run(tiny, tmp_path):
    """`p2paudit announce URL` checks a lab run's own manifest (was refused as not an engine run's): only
    the key that signed it may announce it, refused before any peer is dialled."""
    with serve_run(tiny) as (base, _):
        result = CliRunner().invoke(
            cli, ["announce", base + "/run/", "--peer", "/ip4/127.0.0.1/tcp/9/p2p/" + "1" * 46],
            env={"P2PAUDIT_HOME": str(tmp_path / "home")},
        )  # fmt: skip
    line = _one_line(result.output)
    assert result.exit_code == EXIT_USAGE and f"signed by key {PUBLISHER.public_key.hex()}, not this node's" in line


def _claim_a_huge_state(data: bytes) -> bytes:
    """The checkpoint's header claiming 2^33 float32s (32 GiB) for every tensor, the spans still tiling the
    data region; the bytes after the header as they were."""
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + n])
    names = sorted((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][0])
    size = 4 * (1 << 33)
    for i, name in enumerate(names):
        header[name] = {"dtype": "F32", "shape": [1 << 33], "data_offsets": [i * size, (i + 1) * size]}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text + data[8 + n :]


def test_a_header_claiming_a_huge_state_is_refused_before_any_tensor_is_fetched(tiny, tmp_path):
    path = checkpoint_path(1)
    with serve_run(tiny) as (base, served):
        served.mutate[path] = _claim_a_huge_state
        result = _verify(tmp_path, "1", "--run", base + "/run/", "--run-lab-code")
    line = _one_line(result.output)
    assert result.exit_code == EXIT_USAGE and "of memory but" in line and "--ignore-memory-check" in line, line
    assert served.ranges(path) == ["bytes=0-7", f"bytes=8-{8 + _header_length(served, path) - 1}"]


def _header_length(served, path: str) -> int:  # noqa: ANN001 (the server's record)
    data = served.mutate[path]((served.root / path).read_bytes())
    return int.from_bytes(data[:8], "little")


def test_a_lab_body_signed_as_an_engine_manifest_is_read_as_one_and_refused(tiny, tmp_path):
    """Which reader checks a fetched manifest is decided by the domain its signature verifies under: a lab
    run's body signed as an engine manifest goes to the engine's reader, which refuses its fields (no
    script is written or run, no checkpoint fetched)."""
    body = json.loads((tiny / MANIFEST_FILE).read_bytes())
    run = _signed_copy(tiny, tmp_path / "run", body, SIGNATURE_DOMAIN)
    with serve_run(run) as (base, served):
        result = _verify(tmp_path / "home", "0", "--run", base + "/run/", "--run-lab-code")
    line = _one_line(result.output)
    assert result.exit_code == EXIT_USAGE and "manifest.json" in line and "lab run" not in line, line
    assert served.paths() == SIGNED


@pytest.mark.parametrize("damage", ["truncated", "extended", "header"])
def test_a_cached_checkpoint_damaged_on_disk_is_fetched_again_in_the_same_attempt(tiny, tmp_path, damage):
    """A copy whose length or header changed on the cache's disk is not trusted for the checkpoint's size:
    it is discarded while the step is planned, and the served header and tensors are fetched at once."""
    with serve_run(tiny) as (base, served):
        url = base + "/run/"
        first = _verify(tmp_path, "1", "--run", url, "--run-lab-code")
        assert first.exit_code == 0, first.output
        (cached,) = [p for p in tmp_path.rglob("state-*") if p.is_file()]
        data = cached.read_bytes()
        damaged = {"truncated": data[:-5], "extended": data + b"\0" * 7, "header": b"\xff" * 8 + data[8:]}
        cached.write_bytes(damaged[damage])
        logged = len(served.log)
        again = _verify(tmp_path, "1", "--run", url, "--run-lab-code")
        asked_again = [path for path, *_ in served.log[logged:]]
    assert again.exit_code == 0, again.output
    assert "1 match, 0 mismatch" in again.output
    assert checkpoint_path(1) in asked_again  # fetched again (header first), in this one attempt
    assert cached.read_bytes() == data  # the cache holds the checked copy again
