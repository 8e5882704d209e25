"""The ledger as a log: its head, its own signed checkpoints with the cosignatures witnesses returned and their
consistency with the checkpoint before, witnessed peers' checkpoints, split views and equivocations."""

from __future__ import annotations

import base64
from typing import Any

from ledger import EMPTY_ROOT, ProofError, verify_consistency
from ledger.cosignature import read_cosignatures
from p2paudit.attest.queries import equivocations
from p2paudit.attest.report import equivocations_dict, split_view_dict
from p2paudit.attest.store import AttestationStore
from p2paudit.explorer.db import query
from p2paudit.explorer.times import utc_text_s

MAX_CHECKPOINTS = 100


def _signer(vkey: str) -> str:
    return vkey.split("+", 1)[0]


def head(store: AttestationStore) -> dict[str, Any]:
    """The ledger's origin, size and current root, and how many runs and keys its index knows."""
    size = store.ledger.size
    root = store.ledger.root(size)
    counts = store.conn.execute("SELECT (SELECT COUNT(*) FROM attest_runs), (SELECT COUNT(*) FROM attest_keys)")
    runs, keys = counts.fetchone()
    return {"origin": store.ledger.origin, "size": size, "root": root.hex(), "runs": runs, "keys": keys}


def _consistent(store: AttestationStore, old: dict[str, Any] | None, new: dict[str, Any]) -> bool | None:
    """Whether `new` extends `old` (checked with a consistency proof from this ledger); None for the first."""
    if old is None:
        return None
    old_root, new_root = bytes.fromhex(old["root"]), bytes.fromhex(new["root"])
    small, large = sorted((old, new), key=lambda cp: cp["size"])
    if small["size"] == large["size"] or small["size"] == 0:
        return old_root == new_root if old["size"] == new["size"] else bytes.fromhex(small["root"]) == EMPTY_ROOT
    if large["size"] > store.ledger.size:
        return False
    proof = store.ledger.consistency_proof(small["size"], large["size"])
    try:
        verify_consistency(
            small["size"], large["size"], proof, bytes.fromhex(small["root"]), bytes.fromhex(large["root"])
        )
    except ProofError:
        return False
    return True


def own_checkpoints(store: AttestationStore, limit: int = MAX_CHECKPOINTS) -> list[dict[str, Any]]:
    """The newest own checkpoints, newest first, each with its cosignatures and its consistency with the one before."""
    rows = query(
        store,
        "SELECT id, size, lower(hex(root)) AS root, vkey, note, recorded_at FROM checkpoints WHERE kind = 'own' "
        "ORDER BY id DESC LIMIT :limit",
        {"limit": limit + 1},
    )
    received: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for item in read_cosignatures(store.conn, "received", store.ledger.origin):
        received.setdefault((item.size, item.root.hex()), []).append(
            {
                "cosigner": _signer(item.cosigner),
                "vkey": item.cosigner,
                "timestamp": item.timestamp,
                "time": utc_text_s(item.timestamp),
                "line": item.line,
            }
        )
    made = []
    for number, row in enumerate(rows[:limit]):
        before = rows[number + 1] if number + 1 < len(rows) else None
        made.append(
            {
                **row,
                "signer": _signer(row["vkey"]),
                "root_base64": base64.b64encode(bytes.fromhex(row["root"])).decode("ascii"),
                "cosignatures": received.get((row["size"], row["root"]), []),
                "consistent_with_previous": _consistent(store, before, row),
            }
        )
    return made


def peer_checkpoints(store: AttestationStore, limit: int = MAX_CHECKPOINTS) -> list[dict[str, Any]]:
    """The newest checkpoints of peers this node witnessed, newest first (status first, consistent, split_view)."""
    rows = query(
        store,
        "SELECT id, status, origin, size, lower(hex(root)) AS root, vkey, note, recorded_at FROM checkpoints "
        "WHERE kind = 'peer' ORDER BY id DESC LIMIT :limit",
        {"limit": limit},
    )
    return [{**row, "size_text": str(row["size"]), "signer": _signer(row["vkey"])} for row in rows]


def given_cosignatures(store: AttestationStore, limit: int = MAX_CHECKPOINTS) -> list[dict[str, Any]]:
    """Cosignatures this node gave as a witness, newest first."""
    given = read_cosignatures(store.conn, "given")[-limit:]
    return [
        {
            "origin": item.origin,
            "size": item.size,
            "root": item.root.hex(),
            "cosigner": _signer(item.cosigner),
            "timestamp": item.timestamp,
            "time": utc_text_s(item.timestamp),
            "line": item.line,
        }
        for item in reversed(given)
    ]


def ledger_view(store: AttestationStore) -> dict[str, Any]:
    """Everything the ledger page shows about the log itself."""
    return {
        "head": head(store),
        "checkpoints": own_checkpoints(store),
        "peer_checkpoints": peer_checkpoints(store),
        "given_cosignatures": given_cosignatures(store),
        "split_views": [_with_size_text(split_view_dict(view)) for view in store.ledger.split_views()],
    }


def equivocations_view(store: AttestationStore) -> dict[str, Any]:
    """Keys that signed two results for one claim (with the signed evidence) and split views of tree heads."""
    found = equivocations_dict(equivocations(store))
    return {**found, "tree_heads": [_with_size_text(view) for view in found["tree_heads"]]}


def _with_size_text(view: dict[str, Any]) -> dict[str, Any]:
    """A peer's tree size as decimal text too: a peer signs any size below 2^63 (what SQLite holds), and a
    browser's JSON numbers lose the digits past 2^53, so the pages show the text."""
    return {**view, "size_text": str(view["size"])}
