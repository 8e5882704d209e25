"""What a node audits and how: pick the next step without coordination, replay it, sign the result.

No network here. `next_step` reads the node's store (who attested what) and
applies the rendezvous assignment (`node.assignment`); `replay_step` is pure
computation and runs in a worker thread, off the network's event loop;
`record_step` signs and appends in the thread that owns the store.

A step is *done* for this node when it already holds `redundancy` checks of it
(match or mismatch) by distinct keys it trusts (all keys when no trust list is
given; for a disputed step, the margin of the larger side), or when this node
checked it itself. A node first takes the steps
assigned to it; when none is left and steps remain unchecked (their assigned
auditors are away), it spills over to those, the least checked first, then
lowest pick value, so a run is covered even when volunteers churn.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from p2paudit.attest.audits import describe_hardware
from p2paudit.attest.queries import coverage, disputes
from p2paudit.attest.recording import Recorded, record_audits
from p2paudit.attest.store import AttestationStore
from p2paudit.audit.records import MISMATCH, StepAudit
from p2paudit.audit.replay import RunView, StepRange, verify_range
from p2paudit.audit.streamed_replay import verify_range_planned
from p2paudit.defaults import DEFAULT_REDUNDANCY
from p2paudit.identity import Identity
from p2paudit.node.assign.assignment import pick_value, steps_for
from p2paudit.node.assign.replays import REPLAYS


class RunHead(Protocol):
    """What the node needs of a run's signed claims to pick, record and gossip its steps: an engine run's
    Manifest and a lab run's LabRunView both have it."""

    @property
    def run_id(self) -> bytes: ...

    @property
    def num_steps(self) -> int: ...

    @property
    def public_key(self) -> bytes: ...


@dataclass(frozen=True)
class AuditPolicy:
    """How a node chooses: redundancy r, the keys it trusts (None: all), and a lie for demos and tests.

    lie_about_step: sign a false "mismatch" with a made-up output digest for this
    step, as a dishonest volunteer would; never set on a real node (the CLI
    hides the flag and names it for what it does).
    """

    redundancy: int = DEFAULT_REDUNDANCY
    trusted: frozenset[bytes] | None = None
    lie_about_step: int | None = None
    scratch_dir: Path | None = None  # where a streaming replay keeps its files; None: in memory always


def checked_by(store: AttestationStore, run_id: bytes, trusted: frozenset[bytes] | None) -> dict[int, int]:
    """step -> how many checks of it count as done, by distinct keys (trusted ones, if given).

    An undisputed step counts its checks. A disputed step (some keys say
    match, others mismatch) counts only the margin of the larger side, so
    more volunteers replay it until one outcome leads by `redundancy`.
    An "error" (the step could not be replayed: its input is no published
    state, after an earlier mismatch) counts as done too: replaying it again
    cannot give anything else.
    """
    done = {}
    for item in coverage(store, run_id, trusted).per_step:
        disputed = item.match > 0 and item.mismatch > 0
        done[item.step] = abs(item.match - item.mismatch) if disputed else item.checked + item.error
    return done


def auditor_keys(store: AttestationStore, run_id: bytes, peers: Iterable[bytes]) -> list[bytes]:
    """The auditors this node knows for a run: every key that attested it, and the connected peers."""
    number = store.run_number(run_id)
    rows = store.conn.execute(
        "SELECT DISTINCT k.public_key FROM attest_index i JOIN attest_keys k ON k.key = i.key WHERE i.run = ?",
        (number,),
    ).fetchall()
    return sorted({bytes(key) for (key,) in rows} | {bytes(p) for p in peers})


def own_steps(store: AttestationStore, run_id: bytes, me: bytes) -> set[int]:
    """Steps this key already signed anything for (init excluded)."""
    number = store.run_number(run_id)
    rows = store.conn.execute(
        "SELECT DISTINCT i.step FROM attest_index i JOIN attest_keys k ON k.key = i.key "
        "WHERE i.run = ? AND k.public_key = ? AND i.step >= 0",
        (number, me),
    ).fetchall()
    return {step for (step,) in rows}


def next_step(
    store: AttestationStore,
    run_id: bytes,
    num_steps: int,
    me: bytes,
    peers: Iterable[bytes],
    policy: AuditPolicy,
    allow_spill: bool = True,
    avoid: frozenset[int] = frozenset(),
) -> int | None:
    """The step this node should replay next, or None when nothing is left for it.

    With `allow_spill` false only assigned steps are taken: the daemon spills
    over only once it has heard from every peer, so that steps another node
    already checked are not replayed again for nothing.
    """
    done = checked_by(store, run_id, policy.trusted)
    mine = own_steps(store, run_id, me)
    if policy.lie_about_step is not None and policy.lie_about_step not in mine and policy.lie_about_step < num_steps:
        return policy.lie_about_step  # a dishonest volunteer goes for the step it wants to smear
    # Steps this node checked, and steps it backs off from for now (their files could not be fetched).
    skip = {step: policy.redundancy for step in (*mine, *avoid)}
    keys = auditor_keys(store, run_id, peers)
    assigned = steps_for(run_id, num_steps, me, keys, policy.redundancy, {**done, **skip}, k=1)
    if assigned:
        return assigned[0]
    if not allow_spill:
        return None
    spill = [s for s in range(num_steps) if s not in mine and s not in avoid and done.get(s, 0) < policy.redundancy]
    # Steps nobody checked first (as `plan --spill` models it), then by this key's pick order.
    return min(spill, key=lambda s: (done.get(s, 0), pick_value(run_id, s, me), s)) if spill else None


def replay_step(view: RunView, step: int, backend: str, policy: AuditPolicy) -> tuple[StepAudit, ...]:
    """Replay one step (and the initial state with step 0); pure computation, safe in a worker thread.
    Its progress is on REPLAYS (node.replays) while it runs, for the status file."""
    steps = StepRange(step == 0, step, step)
    with REPLAYS.watching(view.manifest.run_id, step) as progress:
        if policy.scratch_dir is None:
            report = verify_range(view, steps, backend, diagnose=False, progress=progress)
        else:  # streams when the in-memory replay would not fit
            scratch = policy.scratch_dir
            report = verify_range_planned(view, steps, backend, "auto", scratch, diagnose=False, progress=progress)
    return apply_policy(report.audits, policy)


def apply_policy(audits: Iterable[StepAudit], policy: AuditPolicy) -> tuple[StepAudit, ...]:
    """The audits as this node signs them: the demo's lie (lie_about_step) put in, whatever replayed them."""
    return tuple(
        _lie(audit) if audit.step == policy.lie_about_step and audit.subject == "step" else audit for audit in audits
    )


def _lie(audit: StepAudit) -> StepAudit:
    """The false claim a dishonest volunteer signs: a mismatch with an output digest nobody computed."""
    made_up = hashlib.sha256(b"p2paudit demo: a made-up digest\x00" + audit.claimed_digest).digest()
    return replace(
        audit,
        observed_digest=made_up,
        verdict=MISMATCH,
        findings=("state",),
        note="a dishonest volunteer's false claim",
    )


@dataclass(frozen=True)
class Verdict:
    """A dispute settled by replaying the step here: which keys' claims the replay contradicts."""

    step: int
    replayed: bytes | None  # the state this node's replay produced; None if the replay failed here
    honest: tuple[bytes, ...]  # keys whose observed digest equals the replay
    contradicted: tuple[bytes, ...]  # keys whose observed digest does not


def settle_disputes(store: AttestationStore, view: RunView, backend: str) -> list[Verdict]:
    """Replay every disputed step of the run here and name the keys whose observation it contradicts."""
    settled = []
    for dispute in disputes(store, view.manifest.run_id):
        if dispute.step < 0:
            continue  # the initial state: settled by `verify-range init`, not replayed here
        (audit,) = [a for a in replay_step(view, dispute.step, backend, AuditPolicy()) if a.subject == "step"]
        sides = [item for side in dispute.sides for item in side if item.observed is not None]
        honest = tuple(sorted({item.verifier for item in sides if item.observed == audit.observed_digest}))
        liars = tuple(sorted({item.verifier for item in sides if item.observed != audit.observed_digest}))
        settled.append(Verdict(dispute.step, audit.observed_digest, honest, liars))
    return settled


def record_step(
    store: AttestationStore, identity: Identity, manifest: RunHead, label: str, audits: tuple[StepAudit, ...]
) -> tuple[Recorded, list[bytes]]:
    """Sign and append the audits; returns what was recorded and the envelopes that are new (to gossip)."""
    m = manifest
    recorded = record_audits(store, identity, m.run_id, m.num_steps, label, audits, describe_hardware(), m.public_key)
    fresh = [store.attestation(index).encoded for index in recorded.indices]
    return recorded, fresh
