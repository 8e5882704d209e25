"""Fixtures of the explorer's tests: one test ledger and one server over it for the whole session (read-only)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass

import pytest

from p2paudit.explorer.server import ExplorerServer, make_server, start_in_thread
from tests.explorer.explorer_helpers import Built, build_ledger


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> Built:
    return build_ledger(tmp_path_factory.mktemp("explorer-ledger"))


@pytest.fixture(scope="session")
def server(built):
    made = make_server("127.0.0.1:0", built.path, built.status_path)
    start_in_thread(made)
    yield made
    made.shutdown()
    made.server_close()


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self):
        return json.loads(self.body)


def fetch(server: ExplorerServer, path: str, method: str = "GET", headers: dict[str, str] | None = None) -> Reply:
    request = urllib.request.Request(server.url.rstrip("/") + path, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return Reply(response.status, dict(response.headers), response.read())
    except urllib.error.HTTPError as exc:
        return Reply(exc.code, dict(exc.headers), exc.read())
