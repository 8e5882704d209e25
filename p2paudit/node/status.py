"""The daemon's status snapshot: written atomically (no fsync: it is a view of the ledger) as JSON, read by
`p2paudit status`. It is made and written on the store's owner thread, never on the event loop.

{"format": "p2paudit-status", "version": 1, "pid": int, "written_at": float (unix seconds),
 "peer_id": str, "public_key": hex, "listen": [multiaddr], "peers": [peer id],
 "ledger": {"path": str, "size": int}, "audited": int, "received": int,
 "busy": {"run_id": hex, "step": int} | null,
 "runs": [{"run_id": hex, "label": str, "steps": int, "checked_once": int, "checked_r": int,
           "redundancy": int, "disputes": int}],
 "equivocations": int, "events": [str],
 "health": {"longest_stall_ms": float, "stall_task": str, "store_jobs": int, "busiest_store_job_ms": float},
 "remote": [{"run_id": hex, "url": str, "fetching": str | null, "received_bytes": int, "cached_files": int}],
 "reach": {"state": "public" | "behind-nat" | "unknown", "addresses": [multiaddr told to peers],
           "relays": [peer id], "reservations": [relay peer id], "dialbacks": [str],
           "links": [{"peer": str, "kind": "direct" | "relayed" | "hole-punched", "relay": str | null}],
           "relay_service": {"reservations": int, "circuits": int, "refused": int} | null}}
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from p2paudit.attest.queries import coverage, disputes, equivocations
from p2paudit.attest.store import AttestationStore
from p2paudit.durable import write_atomically
from p2paudit.errors import InputError
from p2paudit.identity import Identity, peer_id_of
from p2paudit.regular_files import read_regular

STATUS_FORMAT = "p2paudit-status"
STATUS_VERSION = 1
MAX_STATUS_BYTES = 1 << 20


@dataclass(frozen=True)
class RunStatus:
    run_id: str
    label: str
    steps: int
    checked_once: int
    checked_r: int
    redundancy: int
    disputes: int


@dataclass(frozen=True)
class Status:
    pid: int
    written_at: float
    peer_id: str
    public_key: str
    listen: list[str]
    peers: list[str]
    ledger: dict[str, Any]
    audited: int
    received: int
    busy: dict[str, Any] | None
    runs: list[RunStatus]
    equivocations: int
    events: list[str]
    health: dict[str, Any]
    remote: list[dict[str, Any]]
    reach: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"format": STATUS_FORMAT, "version": STATUS_VERSION, **asdict(self)}


def snapshot(
    store: AttestationStore,
    identity: Identity,
    config: Any,
    sources: Any,
    live: dict[str, Any],
) -> Status:
    """The node's state now: ledger size and coverage per run (r = the policy's redundancy) from the store,
    and what only the event loop knows (`live`: listen, peers, audited, received, events, busy, health, reach)."""
    r = config.policy.redundancy
    runs = []
    for view in sources:
        m = view.manifest
        cov = coverage(store, m.run_id, config.policy.trusted)
        runs.append(
            RunStatus(
                m.run_id.hex(),
                view.label,
                m.num_steps,
                cov.checked_once,
                sum(1 for s in cov.per_step if s.checked >= r),
                r,
                len(disputes(store, m.run_id)),
            )
        )
    busy = live["busy"]
    return Status(
        pid=os.getpid(),
        written_at=time.time(),
        peer_id=peer_id_of(identity.public_key),
        public_key=identity.public_key.hex(),
        listen=list(live["listen"]),
        peers=list(live["peers"]),
        ledger={"path": str(config.ledger_path), "size": store.ledger.size},
        audited=live["audited"],
        received=live["received"],
        busy=None if busy is None else {"run_id": busy[0].hex(), "step": busy[1]},
        runs=runs,
        equivocations=len(equivocations(store).keys),
        events=list(live["events"][-10:]),
        health=dict(live["health"]),
        remote=list(live["remote"]),
        reach=dict(live.get("reach", {})),
    )


def write_status(path: Path, status: Status) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps(status.to_dict(), indent=1).encode())


def read_status(path: Path) -> dict[str, Any]:
    """The last snapshot a daemon wrote; InputError if there is none or it is not one."""
    try:
        data = json.loads(read_regular(path, "daemon status file", MAX_STATUS_BYTES))
    except (ValueError, RecursionError) as exc:
        raise InputError(f"daemon status file {path} is not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != STATUS_FORMAT or data.get("version") != STATUS_VERSION:
        raise InputError(f"{path} is not a {STATUS_FORMAT} version {STATUS_VERSION} file")
    return data
