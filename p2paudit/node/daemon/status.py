"""The daemon's status snapshot: written atomically (no fsync: it is a view of the ledger) as JSON, read by
`p2paudit status`. It is made and written on the store's owner thread, never on the event loop.

{"format": "p2paudit-status", "version": 1, "pid": int, "written_at": float (unix seconds),
 "peer_id": str, "public_key": hex, "listen": [multiaddr], "peers": [peer id],
 "ledger": {"path": str, "size": int}, "audited": int, "received": int,
 "busy": {"run_id": hex, "step": int, "progress": progress | null} | null,
 "runs": [{"run_id": hex, "label": str, "steps": int, "checked_once": int, "checked_r": int,
           "redundancy": int, "disputes": int}],
 "equivocations": int, "events": [str],
 "health": {"longest_stall_ms": float, "stall_task": str, "store_jobs": int, "busiest_store_job_ms": float},
 "remote": [{"run_id": hex | null (a URL still being opened), "url": str, "fetching": str | null, "received_bytes": int, "cached_files": int}],
 "reach": {"state": "public" | "behind-nat" | "unknown", "addresses": [multiaddr told to peers],
           "relays": [peer id], "reservations": [relay peer id], "dialbacks": [str],
           "links": [{"peer": str, "kind": "direct" | "relayed" | "hole-punched", "relay": str | null}],
           "relay_service": {"reservations": int, "circuits": int, "refused": int} | null},
 "bans": [{"peer": str, "reason": str, "until": float (unix seconds)}],
 "sync": [{"peer": str, "state": "ok" | "backing-off" | "never", "last_ok": float | null, "next_try": float | null,
           "error": str | null}]}

progress (the step being replayed, run.progress_meter's shape, as of written_at; null until its first layer is done):
 {"step": int, "phase": "micro-batch" | "update", "fraction": float in [0, 1],
  "counts": {"micro_batches_done": int, "micro_batches": int, "layers_done": int, "layers": int,
             "params_done": int, "params": int},
  "elapsed": float (seconds), "eta_seconds": float | null}
A reader ages it by the status's age (`progress_as_of`): elapsed grows, the time left shrinks.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from p2paudit.attest.queries import coverage, disputes, equivocations, finding_count
from p2paudit.attest.store import AttestationStore
from p2paudit.durable import write_atomically
from p2paudit.errors import InputError
from p2paudit.identity import Identity, peer_id_of
from p2paudit.node.assign.replays import REPLAYS
from p2paudit.regular_files import read_regular
from p2paudit.run.progress_meter import view_from_dict

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
    findings: int = 0  # claims with a finding: the disputes and every mismatch no key disputes (a lone auditor's)


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
    bans: list[dict[str, Any]] = field(default_factory=list)
    sync: list[dict[str, Any]] = field(default_factory=list)

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
    and what only the event loop knows (`live`: listen, peers, audited, received, events, busy, health, reach,
    bans, sync; the last three may be absent); the busy step's progress from the replay (node.replays.REPLAYS)."""
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
                finding_count(store, m.run_id),
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
        busy=None if busy is None else busy_view(busy[0], busy[1]),
        runs=runs,
        equivocations=len(equivocations(store).keys),
        events=list(live["events"][-10:]),
        health=dict(live["health"]),
        remote=list(live["remote"]),
        reach=dict(live.get("reach", {})),
        bans=list(live.get("bans", [])),
        sync=list(live.get("sync", [])),
    )


def busy_view(run_id: bytes, step: int) -> dict[str, Any]:
    """The step being replayed, with its progress now (None until it reports)."""
    return {"run_id": run_id.hex(), "step": step, "progress": REPLAYS.progress(run_id, step)}


def progress_as_of(status: dict[str, Any], now: float) -> dict[str, Any] | None:
    """The busy step's progress in a status file as it should stand at `now`, aged by the status's age (no news
    since: more elapsed, less left); None when the file reports none or holds no valid one."""
    busy = status.get("busy")
    view = view_from_dict(busy.get("progress")) if isinstance(busy, dict) else None
    written = status.get("written_at")
    if view is None or isinstance(written, bool) or not isinstance(written, (int, float)):
        return None
    return (view if view.finished else view.aged(now - written)).to_dict()


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
