"""Read-only queries through sqlite-utils: rows as dicts, on the store's own read-only connection.

sqlite-utils wraps the connection without touching the file: no pragma
(recursive_triggers off), no plugin hooks, and `query` refuses statements
that return no rows, so nothing here can write even by mistake (the
connection is opened mode=ro as well).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import sqlite_utils

from p2paudit.attest.store import AttestationStore


def database(store: AttestationStore) -> sqlite_utils.Database:
    return sqlite_utils.Database(store.conn, recursive_triggers=False, execute_plugins=False)


def query(store: AttestationStore, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[dict[str, Any]]:
    """Every row of a read query as a dict (column name -> value)."""
    return list(database(store).query(sql, params))


def json_list(values: Iterable[int]) -> str:
    """A list of integers for `IN (SELECT value FROM json_each(?))`: one parameter, any length."""
    return json.dumps(sorted(values))
