"""What the API and `ledger disputes` say a claim's attestations add up to: a lone key's mismatch is a finding,
a step most keys upheld is not called failed, and one redundancy default is shared by init, daemon and explorer."""

from __future__ import annotations

import json
import sqlite3

import click
import pytest
from click.testing import CliRunner

from p2paudit.cli import cli
from p2paudit.defaults import DEFAULT_REDUNDANCY
from p2paudit.explorer.server import make_server, start_in_thread
from p2paudit.identity import load_config
from tests.explorer.conftest import fetch
from tests.explorer.verdict_helpers import AGREED, ERRORS, LONE, MOSTLY, UPHELD, VERDICT_RUN, build_verdict_ledger

RUN = VERDICT_RUN.hex()


@pytest.fixture(scope="module")
def ledger_path(tmp_path_factory):
    return build_verdict_ledger(tmp_path_factory.mktemp("verdicts"))


@pytest.fixture(scope="module")
def verdict_server(ledger_path):
    made = make_server("127.0.0.1:0", ledger_path)
    start_in_thread(made)
    yield made
    made.shutdown()
    made.server_close()


def _verdict(server, step):
    return fetch(server, f"/api/v1/runs/{RUN}/steps/{step}").json()["verdict"]


def test_each_step_opens_with_one_sentence_and_a_tone_that_agrees(verdict_server):
    lone = _verdict(verdict_server, LONE)
    assert lone["tone"] == "failed" and lone["mismatch_keys"] == 1
    assert lone["sentence"].startswith(
        "No key that checked step 0 reproduced it (1 independent check); 1 key reported a different state"
    )
    mostly = _verdict(verdict_server, MOSTLY)
    assert mostly["tone"] == "split"
    assert mostly["sentence"].startswith(
        "3 of 4 independent checks reproduced step 1 exactly; 1 key reported a different state"
    )
    assert _verdict(verdict_server, UPHELD)["tone"] == "upheld"
    assert _verdict(verdict_server, AGREED)["tone"] == "failed"
    errors = _verdict(verdict_server, ERRORS)
    assert errors["tone"] == "none" and "could not replay it" in errors["sentence"]
    assert _verdict(verdict_server, 7) == {**_verdict(verdict_server, 7), "tone": "none", "checked_keys": 0}


def test_a_lone_mismatch_is_a_finding_in_the_api(verdict_server):
    found = fetch(verdict_server, "/api/v1/disputes").json()
    assert (found["total"], found["disputed_total"]) == (3, 1)
    assert [(d["step"], d["disputed"]) for d in found["disputes"]] == [(LONE, False), (MOSTLY, True), (AGREED, False)]
    run = fetch(verdict_server, f"/api/v1/runs/{RUN}").json()["verdict"]
    assert run["tone"] == "failed" and "on 3 steps a key reported a different result" in run["sentence"]


def test_ledger_disputes_counts_a_lone_auditors_finding(ledger_path, tmp_path):
    def ledger(*args):
        result = CliRunner().invoke(
            cli, ["ledger", *args, "--ledger", str(ledger_path)], env={"P2PAUDIT_HOME": str(tmp_path)}
        )
        assert result.exit_code == 0, result.output
        return result.output

    text = ledger("disputes")
    assert text.startswith("3 claims with a finding: 1 disputed between keys, 2 not disputed\n")
    assert f"run {RUN[:16]}... step {LONE}: a mismatch, 1 key(s), no other outcome" in text
    found = json.loads(ledger("disputes", "--json"))
    assert [(d["step"], d["disputed"]) for d in found] == [(LONE, False), (MOSTLY, True), (AGREED, False)]
    conn = sqlite3.connect(f"file:{ledger_path}?mode=ro", uri=True)  # the SQL view, for sqlite-utils and datasette
    rows = conn.execute("SELECT step, disputed, keys, mismatches FROM findings ORDER BY step").fetchall()
    assert rows == [(LONE, 0, 1, 1), (MOSTLY, 1, 4, 1), (AGREED, 0, 2, 2)]


def test_one_redundancy_default_for_init_daemon_plan_and_explorer(verdict_server, tmp_path):
    home = tmp_path / "node"
    assert CliRunner().invoke(cli, ["init"], env={"P2PAUDIT_HOME": str(home)}).exit_code == 0
    assert load_config(home / "config.json").redundancy == DEFAULT_REDUNDANCY
    options = [(cli.commands[name], "redundancy") for name in ("daemon", "plan")]
    options.append((cli.commands["ledger"].commands["coverage"], "min_count"))
    for command, name in options:
        (option,) = [p for p in command.params if isinstance(p, click.Option) and p.name == name]
        assert option.default == DEFAULT_REDUNDANCY, command.name
    coverage = fetch(verdict_server, f"/api/v1/runs/{RUN}/coverage").json()
    assert coverage["min"] == DEFAULT_REDUNDANCY


def test_a_daemons_status_counts_findings_beside_disputes(ledger_path, tmp_path):
    from p2paudit.attest.queries import disputes, finding_count
    from p2paudit.attest.store import AttestationStore
    from tests.attest.attest_helpers import key
    from tests.explorer.explorer_helpers import write_status

    with AttestationStore.open_readonly(ledger_path) as store:  # what node.status writes for the run
        assert (finding_count(store, VERDICT_RUN), len(disputes(store, VERDICT_RUN))) == (3, 1)
    home = tmp_path / "home"
    home.mkdir()
    write_status(home / "status.json", key(1))
    data = json.loads((home / "status.json").read_text())
    data["runs"][0].update(findings=3, disputes=1)
    (home / "status.json").write_text(json.dumps(data))
    result = CliRunner().invoke(cli, ["status"], env={"P2PAUDIT_HOME": str(home)})
    assert result.exit_code == 0, result.output
    assert "10/20 checked 2x, 3 with a finding, 1 of them disputed" in result.output
