"""Shared builders for the node protocol tests: deterministic keys, signed v2 attestations, stores; and the
one poll the in-process node tests wait with (`wait_until`), with `in_mesh` for the graft it often waits for."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import trio

from p2paudit.attest.record import Attestation, SignedAttestation, sign_attestation
from p2paudit.attest.store import AttestationStore, origin_for
from p2paudit.identity import Identity, identity_from_seed

RUN = hashlib.sha256(b"node test run").digest()
OTHER_RUN = hashlib.sha256(b"another run").digest()


def key(n: int) -> Identity:
    return identity_from_seed(hashlib.sha256(b"node test key %d" % n).digest())


def digest(label: str) -> bytes:
    return hashlib.sha256(label.encode()).digest()


def record(identity: Identity, step: int, verdict: str = "match", run: bytes = RUN, time_ms: int = 1) -> Attestation:
    claimed = digest(f"state {step + 1}")
    observed = claimed if verdict == "match" else digest(f"bad {step + 1}")
    return Attestation(
        run_id=run,
        subject="step",
        step=step,
        input_digest=digest(f"state {step}"),
        claimed_data_digest=digest(f"data {step}"),
        observed_data_digest=digest(f"data {step}"),
        claimed_output_digest=claimed,
        observed_output_digest=observed,
        claimed_loss_bits=4611686018427387904,
        observed_loss_bits=4611686018427387904,
        findings=() if verdict == "match" else ("state",),
        verdict=verdict,
        engine_version="p2paudit test",
        arithmetic_version=1,
        backend="cpu",
        hardware="test",
        time_ms=time_ms,
        verifier=identity.public_key,
    )


def signed(identity: Identity, step: int, **kwargs) -> SignedAttestation:
    return sign_attestation(identity, record(identity, step, **kwargs))


def open_store(path, identity: Identity, steps: int = 100_000) -> AttestationStore:
    store = AttestationStore.open(path, origin_for(identity.public_key))
    store.register_run(RUN, steps, "test")
    return store


async def wait_until(predicate: Callable[[], bool], what: str, timeout: float = 60.0, step: float = 0.05) -> None:
    """Poll `predicate` every `step` seconds (trio's clock: a MockClock jumps them) until it holds; an
    AssertionError naming `what` after `timeout` seconds."""
    with trio.move_on_after(timeout):
        while not predicate():
            await trio.sleep(step)
        return
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def in_mesh(node, topic: str, peer: str) -> bool:
    """Whether `node` (an open_node) holds `peer` in its gossipsub mesh on `topic`: a graft, made by either
    end's heartbeat, that the fixed one- or two-heartbeat sleeps used to wait for."""
    return any(str(p) == peer for p in node.gossip.router.mesh.get(topic, ()))
