"""Running the daemon: `run_daemon` opens the store and the node, makes the Daemon with the node running,
wires its handlers and loops into them, stops on SIGINT, SIGTERM, --duration or coverage, and signs a final checkpoint."""

from __future__ import annotations

import functools
import math
import signal
from collections.abc import Callable
from dataclasses import dataclass

import trio

from p2paudit.attest.store import AttestationStore
from p2paudit.attest.tables import origin_for
from p2paudit.identity import Identity
from p2paudit.node import wire
from p2paudit.node.daemon import jobs as daemon_jobs
from p2paudit.node.daemon import status
from p2paudit.node.daemon.daemon import Daemon, DaemonConfig, DaemonEvent
from p2paudit.node.daemon.discover import discover_loop
from p2paudit.node.daemon.gossip import stateless_validator
from p2paudit.node.daemon.loop_monitor import LoopMonitor
from p2paudit.node.daemon.store_owner import StoreOwner
from p2paudit.node.net import Node, NodeConfig, NodeEvent, RequestHandler, open_node, supervise
from p2paudit.node.protocols.announce import ANNOUNCEMENTS, ANNOUNCEMENTS_PROTOCOL, RUNS_TOPIC
from p2paudit.node.protocols.reconcile import RECONCILE, RECONCILE_PROTOCOL
from p2paudit.node.wire import ProtocolSpec


@dataclass(frozen=True)
class DaemonResult:
    """How the daemon ended: its last status, and the signal that stopped it (None: --duration or covered)."""

    status: status.Status
    signal: int | None


async def _stop_on_signals(cancel: trio.CancelScope, stopped_by: list[int]) -> None:
    """SIGINT or SIGTERM: stop every loop now (a replay in progress is abandoned), then finish cleanly."""
    try:
        receiver = trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM)
    except (ValueError, RuntimeError):  # not the main thread (an embedding program handles signals itself)
        return
    with receiver as signals:
        async for number in signals:
            stopped_by.append(number)
            cancel.cancel()
            return


async def run_daemon(
    identity: Identity, config: DaemonConfig, emit: Callable[[DaemonEvent], None], monitor: LoopMonitor | None = None
) -> DaemonResult:
    """Run the node until SIGINT/SIGTERM, `duration` passes, or (stop_when_covered) the runs are covered.

    Whatever stops it, it stops within seconds (a replay in progress is
    abandoned), then signs a final checkpoint of its ledger and writes its
    last status; the ledger is consistent at every moment (each append is one
    transaction on the store's thread).
    """
    origin = origin_for(identity.public_key)
    async with StoreOwner(lambda: AttestationStore.open(config.ledger_path, origin)) as db:
        ledgered = await db.call(daemon_jobs.setup, identity, config.runs)
        stopped_by: list[int] = []
        node_config = NodeConfig(listen=config.listen, bootstrap=config.peers, mdns=config.mdns, reach=config.reach)
        # The node is started first and handed to the daemon running; its events wait on this channel
        # until the daemon's event loop takes them.
        events_in, events_out = trio.open_memory_channel[NodeEvent](math.inf)
        async with open_node(identity, node_config, events_in.send_nowait) as node:
            daemon = Daemon(identity, config, db, ledgered, emit, node, monitor)
            daemon.progress.changed()  # its clock starts here: quiet for SPILL_GRACE or linger from now on
            _serve(node, daemon)
            for source in config.runs:
                topic = wire.run_topic(source.manifest.run_id)
                node.set_validator(topic, stateless_validator(topic))
                await node.subscribe(topic, daemon.gossip.on_batch)
            node.set_validator(wire.EVIDENCE_TOPIC, stateless_validator(wire.EVIDENCE_TOPIC))
            await node.subscribe(wire.EVIDENCE_TOPIC, daemon.gossip.on_evidence)
            node.set_validator(RUNS_TOPIC, daemon.follower.validate)
            await node.subscribe(RUNS_TOPIC, daemon.follower.on_announcement)
            async with trio.open_nursery() as nursery:
                # Every loop supervised: an exception is logged with its traceback and the loop restarts
                # after a back-off; nothing a peer sends, and no bug of ours in one loop, ends the daemon.
                report = node.report
                nursery.start_soon(daemon.event_loop, events_out)
                nursery.start_soon(daemon.fetch.prefetch_loops)
                # Remote runs only now, with the node serving peers: a slow lab never delays it (fetch).
                for url in config.urls:
                    nursery.start_soon(daemon.fetch.open_remote, url)
                for source in config.runs:
                    daemon.fetch.start_prefetch(source)
                nursery.start_soon(_stop_on_signals, nursery.cancel_scope, stopped_by)
                nursery.start_soon(supervise, functools.partial(daemon.status_loop, nursery.cancel_scope), report)
                for loop in (
                    daemon.audit.audit_loop,
                    daemon.gossip.flush_loop,
                    daemon.sync_loop,
                    daemon.peers.witness_loop,
                    functools.partial(discover_loop, node, daemon.sources, daemon.report),
                    daemon.ban_loop,
                ):
                    nursery.start_soon(supervise, loop, report)
                nursery.start_soon(daemon.resume_following)
        daemon.node_closed()
        daemon.fetch.release_remote()
        with trio.CancelScope(shield=True):
            note = await db.call(daemon_jobs.checkpoint, identity)
            daemon.report("done", f"signed a final checkpoint: {note.splitlines()[1]} entries")
            final = await daemon.write_status()
        return DaemonResult(final, stopped_by[0] if stopped_by else None)


# The request protocols a daemon serves, each one object that both ends take (wire.ProtocolSpec).
SERVED: dict[str, ProtocolSpec] = {
    spec.id: spec for spec in (wire.SYNC, wire.WITNESS, RECONCILE, ANNOUNCEMENTS, wire.SETTLED)
}


def serve(node: Node, protocol: str, handler: RequestHandler) -> None:
    """Serve `protocol` with `handler` under its limits (SERVED)."""
    node.serve(SERVED[protocol], handler)


def _serve(node: Node, daemon: Daemon) -> None:
    """Register the daemon's request protocols, each with its limits and its refusal message (SERVED)."""
    serve(node, wire.SYNC_PROTOCOL, daemon.peers.serve_sync)
    serve(node, wire.WITNESS_PROTOCOL, daemon.peers.serve_witness)
    serve(node, RECONCILE_PROTOCOL, daemon.peers.serve_reconcile)
    serve(node, ANNOUNCEMENTS_PROTOCOL, daemon.follower.serve)
    serve(node, wire.SETTLED_PROTOCOL, daemon.serve_settled)
