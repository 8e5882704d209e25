"""The node page's data: the daemon's status file (node.status) as it wrote it, whether it still runs, how old it is.

The file is read as it is, whatever fields a newer daemon adds (peers with
details, bans, sync state): the page shows what it finds and says what is
absent. Nothing here talks to the daemon.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, TypedDict

from p2paudit.errors import InputError
from p2paudit.node.daemon.status import progress_as_of, read_status
from p2paudit.processes import process_alive


class NoNode(TypedDict):
    available: Literal[False]
    reason: str


class NodeStatus(TypedDict):
    available: Literal[True]
    running: bool | None  # None: the file names no process id
    age_seconds: float | None
    progress: dict[str, Any] | None
    status: dict[str, Any]  # the file as the daemon wrote it (node.status: whatever fields it has)


class PeersView(TypedDict):
    """The peers part of a status file: each field as the daemon wrote it (None or [] when absent)."""

    available: Literal[True]
    peers: object
    bans: object
    sync: object


NodeView = NoNode | NodeStatus


def node_view(status_path: Path | None, now: float) -> NodeView:
    """{"available": False, "reason": ...} without a readable status file, else the status and its freshness."""
    if status_path is None:
        return {
            "available": False,
            "reason": "no daemon status file was given (explore --status FILE, or daemon --http)",
        }
    try:
        status = read_status(Path(status_path))
    except (InputError, OSError) as exc:
        return {"available": False, "reason": str(exc)}
    pid, written = status.get("pid"), status.get("written_at")
    return {
        "available": True,
        "running": process_alive(pid) if type(pid) is int and pid > 0 else None,
        "age_seconds": round(now - written, 1) if isinstance(written, (int, float)) else None,
        "progress": progress_as_of(status, now),  # the busy step's progress as of now (aged by the status's age)
        "status": status,
    }
