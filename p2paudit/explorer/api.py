"""The JSON API under /api/v1/: routes, their parameters, and answers as (status, content type, bytes).

Every request opens the ledger read-only (AttestationStore.open_readonly),
answers, and closes it; answers that aggregate the whole index are kept per
ledger size (explorer.cache). JSON is written with `<`, `>`, `&` and `'`
escaped as \\u sequences, so no answer can be read as markup whatever a peer
put in a text field. docs/explorer.md lists every endpoint and its fields.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, overload

from ledger import LedgerError, leaf_hash
from p2paudit.attest.errors import AttestationError
from p2paudit.attest.record_v2 import INIT_INDEX_STEP
from p2paudit.attest.report import parse_run_id
from p2paudit.attest.store import AttestationStore
from p2paudit.errors import InputError, P2PAuditError
from p2paudit.explorer import checkpoints, coverage, proofs, runs, steps
from p2paudit.explorer.cache import ResultCache
from p2paudit.explorer.node_view import NodeView, PeersView, node_view
from p2paudit.explorer.overview import COLUMNS, OVERVIEW_MIN, Overviews
from p2paudit.explorer.query_text import check_names
from p2paudit.explorer.verdicts import run_sentence
from p2paudit.identity import parse_public_key_hex

PREFIX = "/api/v1"
DEFAULT_BUCKETS = COLUMNS
CoverageArgs = tuple[int | None, int | None, int, int]  # from, to, buckets, min
OVERVIEW_ARGS: CoverageArgs = (None, None, COLUMNS, OVERVIEW_MIN)  # what a run's page opens on
MAX_TRUSTED = 1000
_JSON_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "'": "\\u0027"}


def malformed_path(path: str) -> str | None:
    """Why a path under /runs/ or /entries/ that matched no route is malformed (a 400), or None (a 404)."""
    parts = path.strip("/").split("/")
    if parts[0] == "runs" and len(parts) >= 2 and not re.fullmatch(r"(?:sha256:)?[0-9a-fA-F]{64}", parts[1]):
        return f"run id {parts[1][:80]!r} is not 64 hex digits"
    if parts[0] == "runs" and len(parts) >= 4 and parts[2] == "steps":
        return f"step {parts[3][:40]!r} is not an integer of at most 19 digits"
    if parts[0] == "entries" and len(parts) >= 2 and not re.fullmatch(r"[0-9]{1,19}", parts[1]):
        return f"entry index {parts[1][:40]!r} is not an integer of at most 19 digits"
    return None


class NotFound(P2PAuditError):
    """The run, step or entry asked for is not in the ledger (HTTP 404)."""

    exit_code = 2


@dataclass(frozen=True)
class Answer:
    status: int
    content_type: str
    body: bytes
    headers: tuple[tuple[str, str], ...] = field(default=())


def json_bytes(value: object) -> bytes:
    """JSON with every character that could start markup escaped (still the same JSON value)."""
    text = json.dumps(value, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    return re.sub(r"[<>&']", lambda m: _JSON_ESCAPES[m.group(0)], text).encode("ascii")


def json_answer(value: object, status: int = 200, download: str | None = None) -> Answer:
    headers = (("Content-Disposition", f'attachment; filename="{download}"'),) if download else ()
    return Answer(status, "application/json; charset=utf-8", json_bytes(value), headers)


@dataclass(frozen=True)
class Request:
    """One API request: the path's captured parts and the query string's values (first of each)."""

    parts: tuple[str, ...]
    params: dict[str, str]

    @overload
    def integer(self, name: str, default: int, low: int = 0, high: int = 2**62) -> int: ...
    @overload
    def integer(self, name: str, default: None, low: int = 0, high: int = 2**62) -> int | None: ...
    def integer(self, name: str, default: int | None, low: int = 0, high: int = 2**62) -> int | None:
        """The parameter as an integer in low..high, or `default` when it is absent or empty."""
        text = self.params.get(name)
        if text is None or text == "":
            return default
        if not re.fullmatch(r"-?[0-9]{1,19}", text) or not low <= int(text) <= high:
            raise InputError(f"parameter {name}={text[:40]} is not an integer in {low}..{high}")
        return int(text)


class Explorer:
    """The API over one ledger file (and optionally a daemon's status file)."""

    def __init__(self, ledger_path: Path, status_path: Path | None = None) -> None:
        self.ledger_path = Path(ledger_path)
        self.status_path = status_path
        # Answers kept per ledger size, one cache per kind of answer (each holds at most cache.MAX_ENTRIES).
        self.cache: ResultCache[coverage.CoverageStrip] = ResultCache()  # coverage strips, overviews among them
        self.summaries: ResultCache[runs.RunSummary] = ResultCache()
        self.found_disputes: ResultCache[list[runs.DisputedClaim]] = ResultCache()
        self.views: ResultCache[dict[str, Any]] = ResultCache()  # the checkpoints and equivocations pages
        self.overviews = Overviews(self.ledger_path, self.cache)
        run = r"/runs/((?:sha256:)?[0-9a-fA-F]{64})"
        self.routes: list[tuple[re.Pattern[str], Callable[[AttestationStore, Request], Answer], tuple[str, ...]]] = [
            (re.compile(p + r"/?"), handler, takes)
            for p, handler, takes in (
                (r"", self.index, ()),
                (r"/runs", self.runs, ()),
                (run, self.run, ()),
                (run + r"/coverage", self.coverage, ("from", "to", "buckets", "min", "trusted")),
                (run + r"/steps/([0-9]{1,19})", self.step, ()),
                (run + r"/init", self.init, ()),
                (r"/disputes", self.disputes, ("run", "offset", "limit")),
                (r"/equivocations", self.equivocations, ()),
                (r"/checkpoints", self.checkpoints, ()),
                (r"/entries/([0-9]{1,19})", self.entry, ()),
                (r"/entries/([0-9]{1,19})/raw", self.entry_raw, ()),
                (r"/entries/([0-9]{1,19})/proof", self.entry_proof, ("download",)),
            )
        ]

    # -- dispatch ----------------------------------------------------------------------------------------

    def answer(self, path: str, params: dict[str, str]) -> Answer:
        """The answer to GET PREFIX + path; errors become JSON {"error": one line} with their HTTP status."""
        if path.rstrip("/") in ("/node", "/peers"):
            return self._guarded(lambda: self._node_answer(path, params))
        for pattern, handler, takes in self.routes:
            match = pattern.fullmatch(path)
            if match:
                request = Request(match.groups(), params)
                check = (takes, PREFIX + path.rstrip("/"))
                return self._guarded(partial(self._with_store, handler, request, check))
        malformed = malformed_path(path)
        if malformed:
            return json_answer({"error": malformed}, 400)
        return json_answer({"error": f"no API endpoint {PREFIX}{path[:200]}"}, 404)

    def _node_answer(self, path: str, params: dict[str, str]) -> Answer:
        check_names(params, (), PREFIX + path.rstrip("/"))
        return json_answer(self.node(peers_only=path.startswith("/peers")))

    def _with_store(
        self,
        handler: Callable[[AttestationStore, Request], Answer],
        request: Request,
        check: tuple[tuple[str, ...], str],
    ) -> Answer:
        """`check`: the parameters the endpoint takes, and its path (for the error naming it)."""
        check_names(request.params, *check)
        try:
            store = AttestationStore.open_readonly(self.ledger_path)
        except (AttestationError, LedgerError) as exc:
            return json_answer({"error": str(exc)}, 503)
        with store:
            return handler(store, request)

    def _guarded(self, make: Callable[[], Answer]) -> Answer:
        try:
            return make()
        except NotFound as exc:
            return json_answer({"error": str(exc)}, 404)
        except InputError as exc:
            return json_answer({"error": str(exc)}, 400)
        except (AttestationError, LedgerError) as exc:
            return json_answer({"error": str(exc)}, 503)

    def _key(self, store: AttestationStore, *parts: Hashable) -> tuple[Hashable, ...]:
        """A cache key: this ledger at the store's size, and what was asked."""
        return (str(self.ledger_path), store.ledger.size, *parts)

    # -- helpers -----------------------------------------------------------------------------------------

    def _run_id(self, store: AttestationStore, text: str) -> bytes:
        run_id = parse_run_id(text)
        if store.conn.execute("SELECT 1 FROM attest_runs WHERE run_id = ?", (run_id,)).fetchone() is None:
            raise NotFound(f"run {run_id.hex()} is not known to this ledger")
        return run_id

    def _entry(self, store: AttestationStore, text: str) -> int:
        index, size = int(text), store.ledger.size
        if index >= size:
            raise NotFound(f"entry {index} is not in the ledger of size {size}")
        return index

    def _trusted(self, request: Request) -> frozenset[bytes] | None:
        text = request.params.get("trusted", "").strip()
        if not text:
            return None
        items = [item for item in re.split(r"[\s,]+", text) if item]
        if len(items) > MAX_TRUSTED:
            raise InputError(f"{len(items)} trusted keys given, at most {MAX_TRUSTED}")
        return frozenset(parse_public_key_hex(item) for item in items)

    # -- endpoints ---------------------------------------------------------------------------------------

    def index(self, store: AttestationStore, request: Request) -> Answer:
        endpoints = [
            "/runs",
            "/runs/{run}",
            "/runs/{run}/coverage",
            "/runs/{run}/steps/{step}",
            "/runs/{run}/init",
            "/disputes",
            "/equivocations",
            "/checkpoints",
            "/entries/{index}",
            "/entries/{index}/raw",
            "/entries/{index}/proof",
            "/node",
            "/peers",
        ]
        return json_answer(
            {
                "api": "p2paudit-explorer",
                "version": 1,
                "ledger": checkpoints.head(store),
                "node_status": self.status_path is not None,
                "endpoints": [PREFIX + e for e in endpoints],
            }
        )

    def _strip(
        self, store: AttestationStore, run_id: bytes, args: CoverageArgs, trusted: frozenset[bytes] | None = None
    ) -> coverage.CoverageStrip:
        """A run's coverage, kept per ledger size; the whole run by every key is the run's overview (kept fresh)."""
        if args == OVERVIEW_ARGS and trusted is None:
            return self.overviews.get(store, run_id)
        start, stop, buckets, min_count = args
        key = self._key(store, "coverage", run_id, *args, trusted)
        return self.cache.get_or_compute(
            key, lambda: coverage.bucket_coverage(store, run_id, start, stop, buckets, min_count, trusted)
        )

    def _summary(self, store: AttestationStore, run_id: bytes) -> dict[str, Any]:
        strip = self.overviews.get(store, run_id)
        key = (str(self.ledger_path), strip.ledger_size, "run", run_id)
        summary = self.summaries.get_or_compute(key, lambda: runs.run_summary(store, run_id, strip))
        verdict = run_sentence(summary, OVERVIEW_MIN)
        return {**summary.to_dict(), "verdict": verdict, **runs.publisher_view(store, run_id)}

    def runs(self, store: AttestationStore, request: Request) -> Answer:
        found = [self._summary(store, info.run_id) for info in store.runs()]
        return json_answer({"ledger": checkpoints.head(store), "runs": found})

    def run(self, store: AttestationStore, request: Request) -> Answer:
        return json_answer(self._summary(store, self._run_id(store, request.parts[0])))

    def coverage(self, store: AttestationStore, request: Request) -> Answer:
        run_id = self._run_id(store, request.parts[0])
        args: CoverageArgs = (
            request.integer("from", None),
            request.integer("to", None),
            request.integer("buckets", DEFAULT_BUCKETS, 1, coverage.MAX_BUCKETS),
            request.integer("min", OVERVIEW_MIN, 1, 1_000_000),
        )
        return json_answer(self._strip(store, run_id, args, self._trusted(request)).to_dict())

    def step(self, store: AttestationStore, request: Request) -> Answer:
        run_id = self._run_id(store, request.parts[0])
        step = int(request.parts[1])
        if step >= store.run_info(run_id).steps:
            raise NotFound(
                f"step {step} is not in run {run_id.hex()[:16]}..., which has {store.run_info(run_id).steps}"
            )
        return json_answer(steps.claim_detail(store, run_id, step))

    def init(self, store: AttestationStore, request: Request) -> Answer:
        run_id = self._run_id(store, request.parts[0])
        return json_answer(steps.claim_detail(store, run_id, INIT_INDEX_STEP))

    def disputes(self, store: AttestationStore, request: Request) -> Answer:
        run_id = self._run_id(store, request.params["run"]) if request.params.get("run") else None
        offset, limit = request.integer("offset", 0), request.integer("limit", 100, 1, runs.MAX_PAGE)
        runs.check_page(offset, limit)
        key = self._key(store, "disputes", run_id)
        found = self.found_disputes.get_or_compute(key, lambda: runs.disputed_claims(store, run_id))
        page = [runs.claim_sides(store, claim) for claim in found[offset : offset + limit]]
        disputed = sum(claim.disputed for claim in found)
        return json_answer(
            {"total": len(found), "disputed_total": disputed, "offset": offset, "limit": limit, "disputes": page}
        )

    def equivocations(self, store: AttestationStore, request: Request) -> Answer:
        key = self._key(store, "equivocations")
        return json_answer(self.views.get_or_compute(key, lambda: checkpoints.equivocations_view(store)))

    def checkpoints(self, store: AttestationStore, request: Request) -> Answer:
        key = self._key(store, "checkpoints")
        return json_answer(self.views.get_or_compute(key, lambda: checkpoints.ledger_view(store)))

    def entry(self, store: AttestationStore, request: Request) -> Answer:
        index = self._entry(store, request.parts[0])
        view = steps.attestation_view(index, store.attestation(index))
        return json_answer({"leaf_hash": leaf_hash(store.ledger.entry(index)).hex(), **view})

    def entry_raw(self, store: AttestationStore, request: Request) -> Answer:
        index = self._entry(store, request.parts[0])
        headers = (("Content-Disposition", f'attachment; filename="entry-{index}.msgpack"'),)
        return Answer(200, "application/octet-stream", store.ledger.entry(index), headers)

    def entry_proof(self, store: AttestationStore, request: Request) -> Answer:
        index = self._entry(store, request.parts[0])
        download = f"entry-{index}-proof.json" if request.params.get("download") else None
        return json_answer(proofs.build_proof(store, index), download=download)

    def node(self, peers_only: bool = False) -> NodeView | PeersView:
        view = node_view(self.status_path, time.time())
        if peers_only and view["available"]:
            status = view["status"]
            return {
                "available": True,
                "peers": status.get("peers", []),
                "bans": status.get("bans"),
                "sync": status.get("sync"),
            }
        return view
