"""The JSON API over the test ledger: every endpoint's numbers, errors, downloads, and the read-only surface."""

from __future__ import annotations

import base64
import json
import re

import pytest

from ledger import Ledger
from p2paudit.errors import MismatchError
from p2paudit.explorer.proofs import check_proof
from tests.attest.attest_helpers import key
from tests.explorer.conftest import fetch
from tests.explorer.explorer_helpers import (
    BIG,
    BIG_DISPUTED,
    BIG_EVERY,
    BIG_STEPS,
    BUSY_PROGRESS,
    MARKUP,
    PUBLISHER,
    SMALL,
    SMALL_EQUIVOCATION,
)


def test_index_and_runs(server):
    index = fetch(server, "/api/v1/").json()
    assert index["ledger"]["size"] == 8027 and index["ledger"]["runs"] == 2 and index["node_status"]
    assert "/api/v1/runs/{run}/coverage" in index["endpoints"]
    runs = {run["run_id"]: run for run in fetch(server, "/api/v1/runs").json()["runs"]}
    small, big = runs[SMALL.hex()], runs[BIG.hex()]
    assert small["label"] == "small " + MARKUP
    assert small["totals"]["checked_steps"] == 10 and small["percent_checked"] == 50.0
    assert (small["totals"]["mismatch_steps"], small["totals"]["disputed_steps"]) == (3, 3)  # steps 3, 5, 7
    assert small["init"] == {"attestations": 2, "match": 1, "mismatch": 1, "error": 0}
    assert small["last_leaf"] == 25 and small["last_time_ms"] == 1_700_000_000_000
    assert big["steps"] == BIG_STEPS and big["totals"]["checked_steps"] == BIG_STEPS // BIG_EVERY
    assert fetch(server, f"/api/v1/runs/sha256:{BIG.hex()}").json()["totals"] == big["totals"]
    assert small["publisher"] == PUBLISHER.public_key.hex() and small["publishers"] == [small["publisher"]]
    assert big["publisher"] is None and big["publishers"] == []  # registered by id alone: unknown


def test_coverage_of_100000_steps_in_buckets_and_zoomed(server):
    whole = fetch(server, f"/api/v1/runs/{BIG.hex()}/coverage?buckets=1000&min=2").json()
    assert whole["bucket_count"] == 1000 and whole["steps_per_bucket"] == 100
    first, last = whole["buckets"][0], whole["buckets"][-1]
    assert (first["start"], first["stop"], first["checked_steps"], first["checks"]) == (0, 100, 4, 8)
    assert (first["covered_steps"], first["unchecked_steps"], first["disputed_steps"]) == (4, 96, 0)
    assert (last["start"], last["stop"], last["disputed_steps"], last["mismatches"]) == (99_900, 100_000, 1, 1)
    assert whole["totals"]["disputed_steps"] == 1 and whole["totals"]["steps"] == BIG_STEPS
    zoom = fetch(server, f"/api/v1/runs/{BIG.hex()}/coverage?from=99900&to=100000&buckets=1000").json()
    assert zoom["bucket_count"] == 100 and all(b["steps"] == 1 for b in zoom["buckets"])
    disputed = [b["start"] for b in zoom["buckets"] if b["disputed_steps"]]
    assert disputed == [BIG_DISPUTED]
    odd = fetch(server, f"/api/v1/runs/{BIG.hex()}/coverage?from=10&to=17&buckets=3").json()
    assert [(b["start"], b["stop"]) for b in odd["buckets"]] == [(10, 13), (13, 15), (15, 17)]


def test_coverage_filters_by_trusted_keys_and_redundancy(server):
    one = key(1).public_key.hex()
    trusted = fetch(server, f"/api/v1/runs/{BIG.hex()}/coverage?buckets=10&min=2&trusted={one}").json()
    assert trusted["trusted_only"] and trusted["trusted_keys"] == 1
    assert trusted["totals"]["checks"] == BIG_STEPS // BIG_EVERY and trusted["totals"]["covered_steps"] == 0
    both = f"{one},{key(2).public_key.hex()}+{key(99).public_key.hex()}"  # "+" is a space; key 99 never attested
    answer = fetch(server, f"/api/v1/runs/{BIG.hex()}/coverage?buckets=10&min=2&trusted={both}").json()
    assert answer["trusted_keys"] == 2 and answer["totals"]["covered_steps"] == BIG_STEPS // BIG_EVERY


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("buckets=0", "buckets=0"),
        ("buckets=4001", "buckets=4001"),
        ("from=50&to=10", "[50, 10)"),
        ("to=100001", "100001"),
        ("min=0", "min=0"),
        ("trusted=nothex", "hex"),
        ("from=1e3", "from="),
    ],
)
def test_bad_coverage_parameters_are_400_with_one_line(server, query, words):
    reply = fetch(server, f"/api/v1/runs/{BIG.hex()}/coverage?{query}")
    assert reply.status == 400 and words in reply.json()["error"] and "\n" not in reply.json()["error"]


def test_a_disputed_step_with_findings_and_loss_ulps(server):
    step = fetch(server, f"/api/v1/runs/{SMALL.hex()}/steps/5").json()
    assert step["disputed"] and len(step["attestations"]) == 3 and len(step["outcomes"]) == 2
    odd = [a for a in step["attestations"] if a["verdict"] == "mismatch"][0]
    assert odd["findings"] == ["data", "loss"] and odd["hardware"] == MARKUP
    found = {d["finding"]: d for d in odd["differences"]}
    assert set(found) == {"data", "loss"}
    assert (found["loss"]["claimed_value"], found["loss"]["observed_value"]) == (2.5, 3.5)
    assert found["loss"]["ulps"] == 2**51  # 2.5 and 3.5 lie in [2, 4), where one ulp is 2^-51
    assert base64.b64decode(odd["signed_attestation"])[:2] == b"\x93\x01"
    assert step["claims"][0]["claimed_loss"] == 2.5 and step["claims"][0]["attestations"] == 3


def test_the_diagnosis_the_evidence_holds_and_what_it_lacks(server):
    data_and_loss = fetch(server, f"/api/v1/runs/{SMALL.hex()}/steps/5").json()["diagnosis"]
    assert (data_and_loss["first_departure"], data_and_loss["stage"]) == ("data", "the batch read (data)")
    parts = {part["part"]: part for part in data_and_loss["parts"]}
    assert [parts[name]["agree"] for name in ("data", "loss", "state")] == [False, False, True]
    assert parts["loss"]["ulps_from_claim"] == [0, 2**51] and parts["loss"]["observed_values"] == [2.5, 3.5]
    assert [(s["verdict"], s["keys"], s["findings"]) for s in data_and_loss["sides"]] == [
        ("match", 2, []),
        ("mismatch", 1, ["data", "loss"]),
    ]
    assert data_and_loss["tensor"] is None and data_and_loss["operation"] is None
    assert "per-tensor digests" in data_and_loss["missing"] and "verify-range" in data_and_loss["missing"]
    state_only = fetch(server, f"/api/v1/runs/{SMALL.hex()}/steps/3").json()["diagnosis"]
    assert state_only["first_departure"] == "state" and "loss agrees to the bit" in state_only["stage"]
    init = fetch(server, f"/api/v1/runs/{SMALL.hex()}/init").json()["diagnosis"]
    assert init["first_departure"] == "init" and [p["part"] for p in init["parts"]] == ["init"]
    assert fetch(server, f"/api/v1/runs/{SMALL.hex()}/steps/1").json()["diagnosis"] is None  # all match


def test_equivocation_init_and_lookups(server):
    step = fetch(server, f"/api/v1/runs/{SMALL.hex()}/steps/{SMALL_EQUIVOCATION}").json()
    assert step["equivocating_keys"] == [key(4).public_key.hex()] and step["disputed"]
    init = fetch(server, f"/api/v1/runs/{SMALL.hex()}/init").json()
    assert init["subject"] == "init" and init["disputed"]
    assert [d["finding"] for a in init["attestations"] for d in a["differences"]] == ["init"]
    quiet = fetch(server, f"/api/v1/runs/{SMALL.hex()}/steps/15").json()
    assert quiet["attestations"] == [] and not quiet["disputed"]
    assert fetch(server, f"/api/v1/runs/{SMALL.hex()}/steps/20").status == 404
    assert fetch(server, f"/api/v1/runs/{'ab' * 32}").status == 404
    assert fetch(server, "/api/v1/entries/8027").status == 404
    assert fetch(server, "/api/v1/nothing").status == 404


def test_disputes_paged_and_per_run(server):
    every = fetch(server, "/api/v1/disputes").json()
    assert every["total"] == 5
    claims = [(d["run_id"], d["subject"], d["step"]) for d in every["disputes"]]
    assert (SMALL.hex(), "init", 0) in claims and (BIG.hex(), "step", BIG_DISPUTED) in claims
    page = fetch(server, "/api/v1/disputes?offset=4&limit=2").json()
    assert len(page["disputes"]) == 1
    mine = fetch(server, f"/api/v1/disputes?run={BIG.hex()}").json()
    assert mine["total"] == 1 and len(mine["disputes"][0]["sides"]) == 2
    assert fetch(server, "/api/v1/disputes?limit=0").status == 400


def test_checkpoints_cosignatures_split_views_and_equivocations(server, built):
    view = fetch(server, "/api/v1/checkpoints").json()
    newest, older = view["checkpoints"]
    assert (newest["size"], older["size"]) == (8027, 26)
    assert newest["consistent_with_previous"] is True and older["consistent_with_previous"] is None
    assert [c["cosigner"] for c in newest["cosignatures"]] == [built.witness.name]
    assert len(view["split_views"]) == 1 and len(view["split_views"][0]["roots"]) == 2
    assert {cp["status"] for cp in view["peer_checkpoints"]} == {"first", "split_view"}
    found = fetch(server, "/api/v1/equivocations").json()
    assert [(e["step"], e["verifier"]) for e in found["keys"]] == [(SMALL_EQUIVOCATION, key(4).public_key.hex())]


def test_downloads_raw_bytes_and_a_proof_that_checks_offline(server, built):
    raw = fetch(server, "/api/v1/entries/20/raw")
    with Ledger.open_readonly(built.path) as ledger:
        assert raw.body == ledger.entry(20)
    assert raw.headers["Content-Type"] == "application/octet-stream"
    assert 'filename="entry-20.msgpack"' in raw.headers["Content-Disposition"]
    reply = fetch(server, "/api/v1/entries/20/proof?download=1")
    assert "attachment" in reply.headers["Content-Disposition"]
    proof = reply.json()
    assert proof["size"] == 26  # the smallest signed checkpoint that includes it
    found = check_proof(proof, built.owner.public_key)
    assert found.entry_checked and found.signed_by == proof["origin"]
    late = fetch(server, "/api/v1/entries/8026/proof").json()
    assert late["size"] == 8027 and check_proof(late).signed_by is not None
    tampered = dict(proof, root=proof["root"][:-2] + ("00" if proof["root"][-2:] != "00" else "01"))
    with pytest.raises(MismatchError):
        check_proof(tampered)
    with pytest.raises(MismatchError):
        check_proof(proof, key(9).public_key)


def test_only_get_is_served(server):
    for method in ("POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "BREW"):
        reply = fetch(server, "/api/v1/runs", method=method)
        assert reply.status == 405 and reply.headers["Allow"] == "GET", method


@pytest.mark.parametrize(
    "path",
    [
        "/../pyproject.toml",
        "/static/../api.py",
        "/static/%2e%2e/api.py",
        "/%2e%2e/%2e%2e/etc/passwd",
        "/static/..%2fserver.py",
        "//etc/passwd",
        "/static/app.js/",
        "/api.py",
    ],
)
def test_static_files_only_by_exact_name(server, path):
    assert fetch(server, path).status == 404


def test_headers_json_escaping_and_host_check(server):
    page = fetch(server, "/run.html")
    assert page.status == 200 and "script-src 'self'" in page.headers["Content-Security-Policy"]
    assert page.headers["X-Content-Type-Options"] == "nosniff"
    assert fetch(server, "/static/app.js").headers["Content-Type"].startswith("text/javascript")
    for path in ("/api/v1/runs", "/api/v1/node", "/api/v1/checkpoints", f"/api/v1/runs/{SMALL.hex()}/steps/3"):
        body = fetch(server, path).body
        assert b"<" not in body and b">" not in body and b"&" not in body, path
    assert MARKUP in json.dumps(fetch(server, "/api/v1/node").json(), ensure_ascii=False)
    assert fetch(server, "/api/v1/runs", headers={"Host": "evil.example:8321"}).status == 421
    assert fetch(server, "/api/v1/runs", headers={"Host": "localhost:1"}).status == 200


def test_node_and_peers(server):
    node = fetch(server, "/api/v1/node").json()
    busy = node["status"]["busy"]
    assert node["available"] and (busy["run_id"], busy["step"], busy["progress"]) == (SMALL.hex(), 4, BUSY_PROGRESS)
    assert node["running"] is True and node["age_seconds"] >= 0
    now = node["progress"]  # aged by the status's age: more elapsed, less left, the same share
    assert now["fraction"] == 0.4 and now["counts"] == BUSY_PROGRESS["counts"]
    # The status file is the session's, written when this worker first needed it: under xdist that may be
    # minutes ago (the browser group runs first, then this test comes round on its worker), so the progress
    # is held to the age the same answer reports (one clock reading; age_seconds is rounded to 0.1 s).
    age = node["age_seconds"]
    assert now["elapsed"] == pytest.approx(BUSY_PROGRESS["elapsed"] + age, abs=0.06)
    assert now["eta_seconds"] == pytest.approx(max(0.0, BUSY_PROGRESS["eta_seconds"] - age), abs=0.06)
    peers = fetch(server, "/api/v1/peers").json()
    assert peers["peers"][1] == MARKUP and peers["bans"][0]["reason"] == MARKUP
    assert [s["state"] for s in peers["sync"]] == ["ok", "backing-off"] and peers["sync"][1]["error"] == MARKUP


def test_shipped_pages_never_parse_text_as_html_and_load_nothing_from_elsewhere():
    from importlib import resources

    static = resources.files("p2paudit.explorer") / "static"
    names = [item.name for item in static.iterdir()]
    assert {"index.html", "run.html", "step.html", "ledger.html", "node.html", "disputes.html", "app.js"} <= set(names)
    for item in static.iterdir():
        text = item.read_text()
        for word in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "http://", "https://"):
            assert word not in text, f"{item.name} uses {word}"
        if item.name.endswith(".html"):
            assert "<script>" not in text and " style=" not in text, item.name  # no inline script or style
            assert not re.search(r"\son[a-z]+=", text), item.name  # no inline event handler
