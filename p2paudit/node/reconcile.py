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
from collections.abc import Iterator
from dataclasses import dataclass, field

from ledger.merkle import leaf_hash
from p2paudit.attest.record import decode_signed
from p2paudit.attest.record_v2 import INIT_INDEX_STEP
from p2paudit.attest.store import AttestationStore
from p2paudit.node.wire import (
    HASH_SIZE,
    MAX_TEXT,
    VERSION,
    PeerRefused,
    WireError,
    check_bin,
    check_fields,
    check_int,
    check_list,
    check_text,
    clip_text,
    pack,
    unpack_message,
)

RECONCILE_PROTOCOL = "/p2paudit/reconcile/1.0.0"
MAGIC = "p2paudit/reconcile"
MAX_BUCKETS = 64
MAX_HASHES = 8192  # a bucket's hash list: 32 bytes an attestation, at most 270 KB
MAX_ENTRIES = 256
MAX_REQUEST_BYTES = 64 + MAX_ENTRIES * (HASH_SIZE + 2)
MAX_ANSWER_BYTES = 64 + MAX_ENTRIES * (4096 + 3)  # entries are signed envelopes of at most 4,096 bytes
# A whole-run fingerprint is brought up to date entry by entry from the append-only log when fewer than this
# many entries were appended since; after more (a catch-up) the run's index is read again.
MAX_INCREMENTAL = 1024
INIT_STEP = INIT_INDEX_STEP  # where the attestation index keeps the initial state's checks (-1)


@dataclass(frozen=True)
class Summary:
    run_id: bytes
    first: int
    last: int
    buckets: int


@dataclass(frozen=True)
class Hashes:
    run_id: bytes
    first: int
    last: int


@dataclass(frozen=True)
class Entries:
    hashes: tuple[bytes, ...]


def bucket_bounds(first: int, last: int, buckets: int) -> list[tuple[int, int]]:
    """Steps first..last cut into `buckets` consecutive ranges (the last ones may be shorter or empty-free)."""
    width = -(-(last - first + 1) // buckets)
    return [(a, min(a + width - 1, last)) for a in range(first, last + 1, width)]


# -- messages ------------------------------------------------------------------------------------------------


def encode_request(request: Summary | Hashes | Entries) -> bytes:
    if isinstance(request, Summary):
        body = ["summary", request.run_id, request.first, request.last, request.buckets]
    elif isinstance(request, Hashes):
        body = ["hashes", request.run_id, request.first, request.last]
    else:
        body = ["entries", list(request.hashes)]
    data = pack([MAGIC, VERSION, *body])
    decode_request(data)  # what we send is what every node accepts
    return data


def _range(run_id: object, first: object, last: object) -> tuple[bytes, int, int]:
    run = check_bin(run_id, "reconcile run id", HASH_SIZE, HASH_SIZE)
    # Step -1 is the initial state's attestations (subject "init"), indexed before step 0.
    a, b = check_int(first, "first step", INIT_STEP), check_int(last, "last step", INIT_STEP)
    if a > b:
        raise WireError(f"reconcile range {a}-{b} runs backwards")
    return run, a, b


def decode_request(data: bytes) -> Summary | Hashes | Entries:
    fields = unpack_message(data, MAX_REQUEST_BYTES, MAGIC, "reconcile request")
    kind = fields[0] if fields else None
    if kind == "summary":
        check_fields(fields, 5, "reconcile summary request")
        return Summary(*_range(*fields[1:4]), check_int(fields[4], "buckets", 1, MAX_BUCKETS + 1))
    if kind == "hashes":
        check_fields(fields, 4, "reconcile hashes request")
        return Hashes(*_range(*fields[1:4]))
    if kind == "entries":
        check_fields(fields, 2, "reconcile entries request")
        items = check_list(fields[1], "entry hashes", 1, MAX_ENTRIES)
        return Entries(tuple(check_bin(h, "entry hash", HASH_SIZE, HASH_SIZE) for h in items))
    raise WireError(f"reconcile request kind {str(kind)[:40]!r} is not summary, hashes or entries")


def encode_answer(kind: str, items: list) -> bytes:
    return pack([MAGIC, VERSION, kind, items])


def refusal(reason: str) -> bytes:
    return pack([MAGIC, VERSION, "refusal", clip_text(reason)])


def decode_answer(data: bytes, want: str) -> list:
    """The answer's items for a request of kind `want`; PeerRefused for a refusal, WireError otherwise."""
    fields = unpack_message(data, MAX_ANSWER_BYTES, MAGIC, "reconcile answer", MAX_HASHES)
    check_fields(fields, 2, "reconcile answer")
    if fields[0] == "refusal":
        raise PeerRefused(f"peer refused to reconcile: {check_text(fields[1], 'reason', MAX_TEXT)}")
    if fields[0] != want:
        raise WireError(f"reconcile answer kind {str(fields[0])[:40]!r}, want {want!r}")
    limit = {"summary": MAX_BUCKETS, "hashes": MAX_HASHES, "entries": MAX_ENTRIES}[want]
    items = check_list(fields[1], f"reconcile {want}", 0, limit)
    if want == "summary":
        out = []
        for n, item in enumerate(items):
            pair = check_list(item, f"bucket {n}", 2, 2)
            out.append((check_int(pair[0], f"bucket {n} count"), check_bin(pair[1], f"bucket {n}", 32, 32)))
        return out
    if want == "hashes":
        return [check_bin(h, f"hash {n}", HASH_SIZE, HASH_SIZE) for n, h in enumerate(items)]
    return [check_bin(e, f"entry {n}", 1, 4096) for n, e in enumerate(items)]


# -- over the store (the owner thread) ----------------------------------------------------------------------


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


def fingerprints(store: AttestationStore, run_id: bytes, first: int, last: int, buckets: int) -> list:
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


async def reconcile_run(ask, call, run_id: bytes, num_steps: int) -> Reconciled:
    """Fetch from one peer every attestation of `run_id` it holds and we lack, each once.

    ask(request bytes) -> answer bytes (the network); call(fn, *args) runs fn(store, *args) on the store's
    thread. Raises what they raise: NetworkError (unreachable, declined), InputError (a bad answer).
    """
    done = Reconciled()

    async def request(message: Summary | Hashes | Entries, want: str) -> list:
        answer = await ask(encode_request(message))
        done.requests += 1
        done.received_bytes += len(answer)
        return decode_answer(answer, want)

    # One fingerprint of the whole run first: in steady state peers agree, and the daemon asks every peer
    # every few seconds (36 bytes of answer instead of 64 buckets' 2,300).
    whole = (INIT_STEP, num_steps - 1)
    theirs = await request(Summary(run_id, *whole, 1), "summary")
    if len(theirs) != 1:
        raise WireError(f"summary of the whole run has {len(theirs)} buckets, want 1")
    if theirs[0][0] == 0 or theirs == await call(fingerprints, run_id, *whole, 1):
        return done
    ranges = [whole]
    while ranges:
        first, last = ranges.pop()
        buckets = min(MAX_BUCKETS, last - first + 1)
        theirs = await request(Summary(run_id, first, last, buckets), "summary")
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
                listed = await request(Hashes(run_id, a, b), "hashes")
            except PeerRefused:
                done.skipped_ranges += 1
                continue
            have = await call(held, run_id, a, b)
            missing = [h for h in listed if h not in have]
            for i in range(0, len(missing), MAX_ENTRIES):
                entries = await request(Entries(tuple(missing[i : i + MAX_ENTRIES])), "entries")
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
