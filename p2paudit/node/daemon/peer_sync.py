"""The daemon's work with its peers: sync and witnessing (a part the Daemon holds; discovery is daemon.discover).

- sync: every few seconds, with each connected peer, reconcile each run's
  attestations (protocols.reconcile: each one we lack fetched once) and, after a
  sync that brought something or once a minute, take its signed checkpoint
  (split views); a peer that does not serve reconciliation is synced by proved
  pages of its log (sync.SyncSession). How the last sync with each peer went
  is kept for the status file (`sync_states`).
- witness: after the ledger grows, ask each connected peer to cosign the new
  checkpoint (C2SP tlog-witness), keeping cosignatures and refusals.
A peer that cannot be reached, is too slow or declines is backed off from
(RETRY_MIN doubling to RETRY_MAX); one that sends bad data is banned.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import trio

from ledger.cosignature import CosignatureVerifier
from p2paudit.attest.store import AttestationStore
from p2paudit.errors import InputError, NetworkError
from p2paudit.identity import Identity
from p2paudit.node import wire
from p2paudit.node.daemon import jobs as daemon_jobs
from p2paudit.node.daemon.gossip import GossipWork
from p2paudit.node.daemon.sources import RunSource
from p2paudit.node.daemon.state import Progress, Reporter
from p2paudit.node.daemon.store_owner import StoreOwner
from p2paudit.node.net import Node, RequestFailed
from p2paudit.node.protocols import reconcile, sync, witness
from p2paudit.node.timing.backoff import BackoffPolicy, Backoffs
from p2paudit.node.timing.bounded_map import BoundedMap

logger = logging.getLogger(__name__)


SYNC_INTERVAL = 3.0
# A peer in step is asked for its signed checkpoint at most this often (and whenever a sync brought something):
# with the stream's own ~750 bytes, the answer was 60 % of a quiet sync's bytes every 3 s with every peer.
CHECKPOINT_INTERVAL = 60.0
WITNESS_INTERVAL = 3.0
MAX_SYNC_HISTORY = 256  # peers whose last sync (time, error) is remembered for the status file; the oldest go
# A peer that could not be reached, was too slow or declined is asked again after this, doubling to the maximum.
RETRY_MIN = 3.0
RETRY_MAX = 300.0
PEER_RETRY = BackoffPolicy(RETRY_MIN, RETRY_MAX)
MAX_PEER_RETRIES = 4096  # (what, peer) back-offs remembered at most; the oldest peers are tried again sooner


class PeerSync:
    """The daemon's work with its peers (module docstring), a part the Daemon holds. Made with the running
    node, the store's owner and what lives beside it (`ledgered`), the node key, the runs audited (the
    daemon's list: it grows as followed labs announce runs), the report lines, the progress it moves and the
    gossip part (conflicts and split views found by a sync are announced there)."""

    def __init__(
        self,
        node: Node,
        db: StoreOwner,
        ledgered: daemon_jobs.Ledgered,
        identity: Identity,
        sources: list[RunSource],
        report: Reporter,
        progress: Progress,
        gossip: GossipWork,
    ) -> None:
        self.node, self.db, self.ledgered, self.identity = node, db, ledgered, identity
        self.sources, self.report, self.progress, self.gossip = sources, report, progress, gossip
        self.retry: Backoffs[tuple[str, str]] = Backoffs(PEER_RETRY, MAX_PEER_RETRIES)  # (what, peer)
        self.witnessed: dict[str, int] = {}  # peer -> ledger size it last cosigned
        self.sync_bytes = 0  # bytes received by sync (reconciliation, checkpoints, pages)
        # peer -> (last ok, unix s; last error); peer -> None, over CHECKPOINT_INTERVAL after we took its checkpoint.
        self.sync_history: BoundedMap[str, tuple[float | None, str | None]] = BoundedMap(MAX_SYNC_HISTORY)
        self.checkpoint_asked: BoundedMap[str, None] = BoundedMap(MAX_SYNC_HISTORY, max_age=CHECKPOINT_INTERVAL)

    # -- sync -----------------------------------------------------------------------------------------------

    def due(self, what: str, peer: str) -> bool:
        """Whether `what` (sync, witness) may be tried with `peer` now: not while its back-off runs."""
        return self.retry.ready((what, peer), trio.current_time())

    def unreachable(self, what: str, peer: str, exc: NetworkError) -> None:
        """Back off from `peer` for `what`: unreachable, too slow or declined is nobody's proven fault. A peer
        that has left meanwhile, and that nothing redials, is not tried again: no back-off to wait out."""
        if self.gone(peer):
            self.report("peer", f"{what} with {peer[:16]}.. failed: {exc}; it left")
            return
        delay = self.retry.failed((what, peer), trio.current_time())
        self.report("peer", f"{what} with {peer[:16]}.. failed: {exc}; next try in {delay:.0f}s")

    def gone(self, peer: str) -> bool:
        """`peer` left and is not kept (kept_peer): nothing of ours dials it again."""
        return not self.kept_peer(peer) and peer not in self.node.connected_peers()

    def kept_peer(self, peer: str) -> bool:
        """A peer whose sync record stays while it is not connected: a bootstrap peer (redialled), or a banned one
        (the record is part of why; shown until the ban ends)."""
        return self.node.is_bootstrap(peer) or self.node.is_banned(peer)

    async def bad_peer(self, what: str, peer: str, exc: InputError) -> None:
        """The peer sent bad data (the evidence is the message): refuse it for the ban period."""
        self.report("refused", f"{what} from {peer[:16]}..: {exc}")
        await self.node.penalize(peer, f"bad {what}: {exc}")

    def syncable_peers(self) -> set[str]:
        """Connected peers we can learn from: not those whose sync fails or is declined (backing off), so a peer
        that does not serve sync (another implementation, a light client) holds back neither spill-over nor
        --until-covered."""
        synced = self.progress.synced_since_change
        return {peer for peer in self.node.connected_peers() if self.due("sync", peer) or peer in synced}

    async def sync_with(self, peer: str) -> None:
        """One sync with `peer`: reconcile each run's attestations with it (each one we lack fetched once) and
        take its signed checkpoint (split views, witnessing); a peer that does not serve reconciliation is
        synced by proved pages of its log. A peer that lies (a bad page, proof, signature, answer) is banned."""
        try:
            try:
                new, conflicts = await self._reconcile_with(peer)
            except RequestFailed:  # it does not serve reconcile (or is gone: then the pages fail too)
                new, conflicts = await self._pages_from(peer)
            else:
                if new or not self.checkpoint_asked.alive(peer, trio.current_time()):  # once a CHECKPOINT_INTERVAL
                    await self._checkpoint_of(peer)
        except NetworkError as exc:  # unreachable, too slow, or a refusal: back off
            self.sync_tried(peer, str(exc))
            self.unreachable("sync", peer, exc)
            return
        except InputError as exc:  # PageProofError, WireError, AttestationError, BadResponse: the peer lied
            self.sync_tried(peer, str(exc))
            await self.bad_peer("sync page", peer, exc)
            return
        self.sync_tried(peer, None)
        self.retry.succeeded(("sync", peer))
        if new:
            self.progress.got(new)
            self.report("synced", f"{new} attestation(s) from {peer[:16]}..")
        self.progress.synced_since_change.add(peer)
        for signed, kind in conflicts:
            await self.gossip.announce(signed, kind)

    def sync_tried(self, peer: str, error: str | None) -> None:
        """Remember how the last sync with `peer` went (error None: it worked, now), for the status file."""
        last_ok = time.time() if error is None else self.sync_history.get(peer, (None, None))[0]
        if last_ok is None and self.gone(peer):  # it left while we asked: forgotten (forget_peer), not failing
            return
        self.sync_history.put(peer, (last_ok, None if error is None else error[:200]))  # the oldest beyond go

    def forget_peer(self, peer: str) -> None:
        """A peer that left and is not kept (kept_peer: nothing redials it): drop its back-offs, and its sync
        record unless a sync with it once worked (kept for the final status, and in case it comes back). So the
        `announce` command's node, which serves no sync and leaves after seconds, is not shown failing."""
        if self.sync_history.get(peer, (None, None))[0] is None:
            self.sync_history.pop(peer, None)
        self.checkpoint_asked.pop(peer, None)
        for what in ("sync", "witness"):
            self.retry.forget((what, peer))

    def sync_states(self) -> list[dict[str, Any]]:
        """Per peer we sync with: while the node runs, the connected peers and the kept ones (bootstrap or
        banned) synced with before; once it stopped (the final status), every peer still remembered
        (forget_peer). For each: ok, backing-off or never; when it last worked, when it is tried next (while
        backing off) and the last error, times in unix seconds. A peer that left and is not kept is never tried
        again, so it is not listed as failing while the node runs."""
        connected = self.node.connected_peers()
        banned_until = {ban["peer"]: ban["until"] for ban in self.node.bans()}
        kept = {peer for peer in self.sync_history if self.kept_peer(peer)}
        now, wall, states = trio.current_time(), time.time(), []
        for peer in sorted(set(connected) | kept):
            last_ok, error = self.sync_history.get(peer, (None, None))
            backing_off = self.retry.not_before(("sync", peer))
            not_before = now if backing_off is None else backing_off
            # The last try failed: the next waits out its back-off (or is due now, when that has passed).
            state = "backing-off" if error is not None else "ok" if last_ok is not None else "never"
            next_try = max(wall, wall + not_before - now, banned_until.get(peer, wall)) if error is not None else None
            states.append({"peer": peer, "state": state, "last_ok": last_ok, "next_try": next_try, "error": error})
        return states

    async def _reconcile_with(self, peer: str) -> tuple[int, list[tuple[bytes, str]]]:
        new, conflicts = 0, list[tuple[bytes, str]]()
        for source in list(self.sources):
            m = source.manifest
            done = await reconcile.reconcile_with(self.node, peer, self.db.call, m.run_id, m.num_steps)
            new += done.new
            conflicts += done.conflicts
            self.sync_bytes += done.received_bytes
        return new, conflicts

    async def _checkpoint_of(self, peer: str) -> None:
        """The peer's signed checkpoint (status handshake): kept, so two heads of one size meet here."""
        response, size = await sync.ask_status(self.node, peer)
        self.sync_bytes += size
        sync.open_peer_checkpoint(response.note)  # signed by the key its origin names, or PageProofError
        await self.db.call(daemon_jobs.record_peer_note, response.note)
        self.checkpoint_asked.put(peer, None, trio.current_time())  # the oldest beyond MAX_SYNC_HISTORY go
        await self.gossip.announce_split_views()

    async def _pages_from(self, peer: str) -> tuple[int, list[tuple[bytes, str]]]:
        """Pull the peer's log from our cursor in proved pages (sync.SyncSession)."""
        session = await self.db.call(lambda store: sync.SyncSession(store, self.ledgered.cursor))
        while (request := await self.db.call(lambda _: session.next_request())) is not None:
            response = await sync.ask_page(self.node, peer, request)
            self.sync_bytes += len(response)
            handshake = session.checkpoint is None
            # Proofs, signatures and the append run on the store's thread, off the event loop.
            await self.db.call(_handle_response, session, response)
            if handshake and session.note is not None:  # the answer was the status: its note is in
                await self.db.call(daemon_jobs.record_peer_note, session.note)
                await self.gossip.announce_split_views()
        new = sum(applied.new for applied in session.applied)
        indices = [(i.index, i.conflict) for a in session.applied for i in a.appended if i.new and i.conflict]
        conflicts = []
        for index, kind in indices:
            conflicts.append((await self.db.call(_encoded, index), kind))
        return new, conflicts

    async def serve_reconcile(self, peer: str, request: bytes) -> bytes:
        return await self.db.call(reconcile.serve, request)

    async def serve_sync(self, peer: str, request: bytes) -> bytes:
        return await self.db.call(daemon_jobs.serve_sync, self.identity, request)

    # -- witness --------------------------------------------------------------------------------------------

    async def serve_witness(self, peer: str, request: bytes) -> bytes:
        response = await self.db.call(lambda _: witness.witness_checkpoint(self.ledgered.witness, request))
        await self.gossip.announce_split_views()
        return response

    async def witness_with(self, peer: str) -> None:
        size = await self.db.call(daemon_jobs.size)
        if size == 0 or self.witnessed.get(peer) == size:
            return
        old = self.witnessed.get(peer, 0)
        try:
            # The adapter admits Ed25519 peers only; a peer id that still names no key is our bug.
            cosigner = CosignatureVerifier(witness.WITNESS_NAME_PREFIX + peer, peer_public_key(peer))
            for _ in range(2):  # a size mismatch tells the size the witness holds: retry once from there
                try:
                    size, note, request = await self.db.call(daemon_jobs.witness_request, self.identity, old)
                    cosignature = await witness.ask_cosignature(self.node, peer, note, request, cosigner)
                except witness.WitnessRefused as exc:
                    if exc.code == wire.WITNESS_OLD_SIZE_MISMATCH:
                        old = exc.size
                        continue
                    raise
                await self.db.call(daemon_jobs.record_cosignature, note, cosignature)
                self.witnessed[peer] = size
                self.retry.succeeded(("witness", peer))
                self.report("witnessed", f"{peer[:16]}.. cosigned tree size {size}")
                return
        except NetworkError as exc:  # unreachable, too slow, or the witness declined (with its code)
            self.unreachable("witness", peer, exc)
        except InputError as exc:  # a malformed answer or a cosignature that does not verify
            await self.bad_peer("witness answer", peer, exc)

    async def witness_loop(self) -> None:
        while True:
            for peer in list(self.node.connected_peers()):
                if self.due("witness", peer):
                    await self.witness_with(peer)
            await trio.sleep(WITNESS_INTERVAL)


def peer_public_key(peer: str) -> bytes:
    """The Ed25519 key of a peer id (ids of Ed25519 keys inline the key); WireError otherwise."""
    return wire.origin_public_key(wire.ORIGIN_PREFIX + peer)


def _handle_response(_: AttestationStore, session: sync.SyncSession, answer: bytes) -> None:
    session.handle_response(answer)


def _encoded(store: AttestationStore, index: int) -> bytes:
    return store.attestation(index).encoded
