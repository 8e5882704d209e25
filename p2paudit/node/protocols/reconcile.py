"""Set reconciliation of attestations by (run, step range): each missing attestation is fetched once.

Under full replication every peer's log holds nearly every attestation, in its
own order, so pulling each peer's log (`sync`) fetches and checks each one
once per peer: a node joining late with 50 peers moved about 4 GB
(docs/network.md). Here a node compares what it holds with what a peer holds,
range by range, and asks only for what it lacks:

- steps run from -1 (the initial state's "init" attestations) to the run's last;
- a *fingerprint* of a step range of a run is (count, SHA-256 over the sorted
  RFC 9162 leaf hashes of the attestations in it);
- `summary` splits a range into at most MAX_BUCKETS equal step buckets and
  gives each one's fingerprint; buckets that differ are split again, until a
  bucket holds at most MAX_HASHES attestations or one step;
- `hashes` lists such a bucket's leaf hashes; the client asks for the ones it
  lacks with `entries` (at most MAX_ENTRIES per request) and stores them with
  append_many, which checks every signature.

The client asks first for one fingerprint of the whole run (peers in step
agree: one request, 36 bytes of answer), then cuts it into buckets. Ranges
whose fingerprints agree cost 36 bytes a bucket. A bucket of one step
with more than MAX_HASHES attestations (a flood) is not listed: refused with a
reason, and skipped by the client. Messages are canonical msgpack (node.wire's
rules); the protocol is RECONCILE_PROTOCOL, one request and one answer a stream.
"""

from __future__ import annotations

import bisect
import hashlib
import weakref
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypeVar, TypeVarTuple, Unpack

from ledger.merkle import leaf_hash
from p2paudit.attest.record import decode_signed
from p2paudit.attest.store import AttestationStore
from p2paudit.node.wire import PeerRefused, WireError

if TYPE_CHECKING:
    from p2paudit.node.net import Node
from p2paudit.node.wire.reconcile import (
    INIT_STEP as INIT_STEP,
)
from p2paudit.node.wire.reconcile import (
    MAGIC as MAGIC,
)
from p2paudit.node.wire.reconcile import (
    MAX_ANSWER_BYTES as MAX_ANSWER_BYTES,
)
from p2paudit.node.wire.reconcile import (
    MAX_BUCKETS as MAX_BUCKETS,
)
from p2paudit.node.wire.reconcile import (
    MAX_ENTRIES as MAX_ENTRIES,
)
from p2paudit.node.wire.reconcile import (
    MAX_HASHES as MAX_HASHES,
)
from p2paudit.node.wire.reconcile import (
    MAX_REQUEST_BYTES as MAX_REQUEST_BYTES,
)
from p2paudit.node.wire.reconcile import (
    RECONCILE as RECONCILE,
)
from p2paudit.node.wire.reconcile import (
    RECONCILE_PROTOCOL as RECONCILE_PROTOCOL,
)
from p2paudit.node.wire.reconcile import (
    Entries as Entries,
)
from p2paudit.node.wire.reconcile import (
    Hashes as Hashes,
)
from p2paudit.node.wire.reconcile import (
    Summary as Summary,
)
from p2paudit.node.wire.reconcile import (
    bucket_bounds as bucket_bounds,
)
from p2paudit.node.wire.reconcile import (
    decode_answer as decode_answer,
)
from p2paudit.node.wire.reconcile import (
    decode_request as decode_request,
)
from p2paudit.node.wire.reconcile import (
    encode_answer as encode_answer,
)
from p2paudit.node.wire.reconcile import (
    encode_request as encode_request,
)
from p2paudit.node.wire.reconcile import (
    refusal as refusal,
)

# A whole-run fingerprint is brought up to date entry by entry from the append-only log when fewer than this
# many entries were appended since; after more (a catch-up) the run's index is read again.
MAX_INCREMENTAL = 1024


def _leaf_hashes(store: AttestationStore, run_id: bytes, first: int, last: int) -> Iterator[tuple[int, bytes]]:
    """(step, leaf hash) of every attestation of the run in steps first..last, by step then hash."""
    row = store.conn.execute("SELECT run FROM attest_runs WHERE run_id = ?", (run_id,)).fetchone()
    if row is None:
        return iter(())
    return (
        (step, bytes(h))
        for step, h in store.conn.execute(
            "SELECT i.step, e.leaf_hash FROM attest_index i JOIN entries e ON e.idx = i.leaf "
            "WHERE i.run = ? AND i.step BETWEEN ? AND ? ORDER BY i.step, e.leaf_hash",
            (row[0], first, last),
        )
    )


def fingerprints(
    store: AttestationStore, run_id: bytes, first: int, last: int, buckets: int
) -> list[tuple[int, bytes]]:
    """[(count, SHA-256 over the sorted leaf hashes)] of each bucket of steps first..last."""
    if buckets == 1 and first <= INIT_STEP and last >= _last_step(store, run_id):
        return [whole_run_fingerprint(store, run_id)]
    bounds = bucket_bounds(first, last, buckets)
    hashes: list[list[bytes]] = [[] for _ in bounds]
    width = bounds[0][1] - bounds[0][0] + 1
    for step, leaf in _leaf_hashes(store, run_id, first, last):
        hashes[(step - first) // width].append(leaf)
    return [(len(h), hashlib.sha256(b"".join(sorted(h))).digest()) for h in hashes]


def _last_step(store: AttestationStore, run_id: bytes) -> int:
    row = store.conn.execute("SELECT steps FROM attest_runs WHERE run_id = ?", (run_id,)).fetchone()
    return -1 if row is None else row[0] - 1


class WholeRun:
    """One run's leaf hashes, sorted, as of `size` entries of the log, and their fingerprint."""

    def __init__(self) -> None:
        self.size = 0
        self.hashes: list[bytes] = []
        self.fingerprint: tuple[int, bytes] | None = None


_WHOLE_RUNS: weakref.WeakKeyDictionary[AttestationStore, dict[bytes, WholeRun]] = weakref.WeakKeyDictionary()


def whole_run_fingerprint(store: AttestationStore, run_id: bytes) -> tuple[int, bytes]:
    """(count, fingerprint) of every attestation of the run, as `fingerprints` defines it, kept in memory per
    store and brought up to date from the entries appended since (the log is append-only): every peer asks
    for it every few seconds, and a scan of the run's index costs about a second at 200,000 attestations
    (docs/benchmarks.md, "Catching up"); 32 bytes of memory an attestation, plus Python's per-object cost."""
    whole = _WHOLE_RUNS.setdefault(store, {}).setdefault(run_id, WholeRun())
    size = store.ledger.size
    if size - whole.size > MAX_INCREMENTAL or whole.size > size:
        whole.hashes = sorted(leaf for _, leaf in _leaf_hashes(store, run_id, INIT_STEP, _last_step(store, run_id)))
        whole.size, whole.fingerprint = size, None
    elif whole.size < size:
        rows = store.conn.execute("SELECT leaf_hash, data FROM entries WHERE idx >= ? ORDER BY idx", (whole.size,))
        for leaf, data in rows:
            if decode_signed(bytes(data)).attestation.run_id == run_id:
                bisect.insort(whole.hashes, bytes(leaf))
        whole.size, whole.fingerprint = size, None
    if whole.fingerprint is None:
        whole.fingerprint = (len(whole.hashes), hashlib.sha256(b"".join(whole.hashes)).digest())
    return whole.fingerprint


def serve(store: AttestationStore, request: bytes) -> bytes:
    """Answer one reconcile request from this node's store."""
    decoded = decode_request(request)
    if isinstance(decoded, Summary):
        items = fingerprints(store, decoded.run_id, decoded.first, decoded.last, decoded.buckets)
        return encode_answer("summary", [[count, fp] for count, fp in items])
    if isinstance(decoded, Hashes):
        listed = []
        for _, leaf in _leaf_hashes(store, decoded.run_id, decoded.first, decoded.last):
            listed.append(leaf)
            if len(listed) > MAX_HASHES:
                return refusal(f"steps {decoded.first}-{decoded.last} hold more than {MAX_HASHES}: ask a smaller range")
        return encode_answer("hashes", listed)
    marks = ",".join("?" * len(decoded.hashes))
    rows = store.conn.execute(f"SELECT data FROM entries WHERE leaf_hash IN ({marks})", decoded.hashes).fetchall()
    return encode_answer("entries", [bytes(r[0]) for r in rows[:MAX_ENTRIES]])


def held(store: AttestationStore, run_id: bytes, first: int, last: int) -> set[bytes]:
    return {leaf for _, leaf in _leaf_hashes(store, run_id, first, last)}


def ensure_index(store: AttestationStore) -> None:
    """An index of entries by leaf hash, so `entries` requests are lookups (the ledger's own schema has none)."""
    with store.ledger.transaction() as tx:
        tx.conn.execute("CREATE INDEX IF NOT EXISTS entries_by_leaf_hash ON entries (leaf_hash)")


# -- the client -----------------------------------------------------------------------------------------------


@dataclass
class Reconciled:
    """What one reconciliation with one peer did."""

    requests: int = 0
    received_bytes: int = 0
    fetched: int = 0  # attestations received that were missing here
    new: int = 0  # of those, stored as new (append_many)
    skipped_ranges: int = 0  # one-step buckets the peer would not list (over MAX_HASHES)
    conflicts: list[tuple[bytes, str]] = field(default_factory=list)  # new conflicting attestations, to announce


_T = TypeVar("_T")
_Ts = TypeVarTuple("_Ts")


class StoreCall(Protocol):
    """call(fn, *args) runs fn(store, *args) on the store's owner thread (StoreOwner.call) and returns its result."""

    def __call__(self, fn: Callable[[AttestationStore, Unpack[_Ts]], _T], /, *args: *_Ts) -> Awaitable[_T]: ...


async def reconcile_run(
    ask: Callable[[bytes], Awaitable[bytes]], call: StoreCall, run_id: bytes, num_steps: int
) -> Reconciled:
    """Fetch from one peer every attestation of `run_id` it holds and we lack, each once.

    ask(request bytes) -> answer bytes (the network); call(fn, *args) runs fn(store, *args) on the store's
    thread. Raises what they raise: NetworkError (unreachable, declined), InputError (a bad answer).
    """
    done = Reconciled()

    async def request(message: Summary | Hashes | Entries) -> bytes:
        answer = await ask(encode_request(message))
        done.requests += 1
        done.received_bytes += len(answer)
        return answer

    # One fingerprint of the whole run first: in steady state peers agree, and the daemon asks every peer
    # every few seconds (36 bytes of answer instead of 64 buckets' 2,300).
    whole = (INIT_STEP, num_steps - 1)
    theirs = decode_answer(await request(Summary(run_id, *whole, 1)), "summary")
    if len(theirs) != 1:
        raise WireError(f"summary of the whole run has {len(theirs)} buckets, want 1")
    if theirs[0][0] == 0 or theirs == await call(fingerprints, run_id, *whole, 1):
        return done
    ranges = [whole]
    while ranges:
        first, last = ranges.pop()
        buckets = min(MAX_BUCKETS, last - first + 1)
        theirs = decode_answer(await request(Summary(run_id, first, last, buckets)), "summary")
        bounds = bucket_bounds(first, last, buckets)
        if len(theirs) != len(bounds):
            raise WireError(f"summary of steps {first}-{last} has {len(theirs)} buckets, want {len(bounds)}")
        mine = await call(fingerprints, run_id, first, last, buckets)
        for (a, b), (count, fp), held_here in zip(bounds, theirs, mine):
            if count == 0 or (count, fp) == held_here:
                continue
            if count > MAX_HASHES and a < b:
                ranges.append((a, b))
                continue
            try:
                listed = decode_answer(await request(Hashes(run_id, a, b)), "hashes")
            except PeerRefused:
                done.skipped_ranges += 1
                continue
            have = await call(held, run_id, a, b)
            missing = [h for h in listed if h not in have]
            for i in range(0, len(missing), MAX_ENTRIES):
                entries = decode_answer(await request(Entries(tuple(missing[i : i + MAX_ENTRIES]))), "entries")
                wanted = set(missing[i : i + MAX_ENTRIES])
                if any(leaf_hash(e) not in wanted for e in entries):
                    raise WireError("reconcile entries answer holds an entry that was not asked for")
                new, conflicts = await call(_append, list(entries))
                done.fetched += len(entries)
                done.new += new
                done.conflicts.extend(conflicts)
    return done


def _append(store: AttestationStore, entries: list[bytes]) -> tuple[int, list[tuple[bytes, str]]]:
    appended = store.append_many(entries)
    fresh = [a for a in appended if a.new]
    return len(fresh), [(store.attestation(a.index).encoded, a.conflict) for a in fresh if a.conflict]


async def reconcile_with(node: Node, peer: str, call: StoreCall, run_id: bytes, num_steps: int) -> Reconciled:
    """reconcile_run with `peer` through net's face (RECONCILE's limits): the asking end of the protocol."""

    async def ask(data: bytes) -> bytes:
        return await node.ask(peer, RECONCILE, data)

    return await reconcile_run(ask, call, run_id, num_steps)
