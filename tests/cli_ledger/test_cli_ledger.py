"""`p2paudit ledger ...` through click's runner: every command, exit codes 0/1/2, one-line errors."""

from __future__ import annotations

import base64
import hashlib
import json
import sqlite3
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ledger import NoteVerifier, leaf_hash, open_checkpoint, verify_consistency, verify_inclusion
from p2paudit.attest.intoto import export_dsse, import_dsse
from p2paudit.attest.queries import check_dispute, check_equivocation
from p2paudit.attest.record import decode_signed
from p2paudit.attest.store import AttestationStore, origin_for
from p2paudit.cli import cli
from p2paudit.identity import identity_from_seed, save_identity

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "attest"))
from attest_helpers import RUN, key, make_signed  # noqa: E402

NODE = identity_from_seed(hashlib.sha256(b"cli node").digest())
A, B, C = key(1), key(2), key(3)


@pytest.fixture
def home(tmp_path):
    home = tmp_path / "home"
    save_identity(NODE, home / "node.key")
    return home


def run(home, *args):
    result = CliRunner().invoke(cli, list(args), env={"P2PAUDIT_HOME": str(home)})
    return result


def _one_line_error(result, code):
    assert result.exit_code == code, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    return lines[0]


@pytest.fixture
def filled(home, tmp_path):
    """A ledger with a dispute (step 1), an equivocation (B, step 2) and coverage of steps 0-3 of 5."""
    assert run(home, "ledger", "add-run", "--id", RUN.hex(), "--steps", "5", "--label", "demo").exit_code == 0
    items = [
        make_signed(A, step=0),
        make_signed(B, step=0),
        make_signed(A, step=1),
        make_signed(C, step=1, verdict="mismatch"),
        make_signed(B, step=2),
        make_signed(B, step=2, verdict="error"),
        make_signed(C, step=3, verdict="error"),
    ]
    for n, item in enumerate(items):
        path = tmp_path / f"a{n}.bin"
        path.write_bytes(item.encoded)
        result = run(home, "ledger", "import", str(path))
        assert result.exit_code == 0, result.output
        assert f"stored at index {n}" in result.output
    return items


def test_import_twice_and_dsse_import(home, filled, tmp_path):
    path = tmp_path / "again.bin"
    path.write_bytes(filled[0].encoded)
    assert "already stored at index 0" in run(home, "ledger", "import", str(path)).output
    envelope = tmp_path / "x.json"
    envelope.write_text(export_dsse(make_signed(C, step=4), A))
    result = run(home, "ledger", "import", str(envelope))
    assert result.exit_code == 0 and "stored at index 7" in result.output
    assert f"DSSE envelope signed by {A.public_key.hex()[:16]}" in result.output
    path.write_bytes(make_signed(C, step=0, verdict="mismatch").encoded)
    assert "stored at index 8 (dispute with stored attestations)" in run(home, "ledger", "import", str(path)).output


def test_import_refusals(home, filled, tmp_path):
    bad = tmp_path / "bad.bin"
    bad.write_bytes(filled[0].encoded[:-1] + bytes([filled[0].encoded[-1] ^ 1]))
    assert "bad signature" in _one_line_error(run(home, "ledger", "import", str(bad)), 2)
    unknown = tmp_path / "unknown.bin"
    unknown.write_bytes(make_signed(A, run=hashlib.sha256(b"nope").digest()).encoded)
    assert "unknown run" in _one_line_error(run(home, "ledger", "import", str(unknown)), 2)
    envelope = json.loads(export_dsse(make_signed(C, step=4), A))
    envelope["signatures"][0]["sig"] = base64.b64encode(bytes(64)).decode()
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(envelope))
    assert "no valid DSSE signature" in _one_line_error(run(home, "ledger", "import", str(forged)), 2)
    assert "missing is missing" in _one_line_error(run(home, "ledger", "import", str(tmp_path / "missing")), 2)
    with AttestationStore.open(home / "ledger.db") as store:
        assert store.ledger.size == len(filled)


def test_coverage_text_json_trusted_and_png(home, filled, tmp_path):
    result = run(home, "ledger", "coverage", "--run", RUN.hex(), "--min", "2")
    assert result.exit_code == 0, result.output
    assert "untrusted" in result.output
    result = run(home, "ledger", "coverage", "--run", "sha256:" + RUN.hex(), "--json")
    data = json.loads(result.output)
    assert data["trusted_keys"] is None
    everyone = data["all_keys"]
    assert (everyone["checked_at_least_once"], everyone["steps"], everyone["keys"]) == (3, 5, 3)
    assert everyone["percent_at_least_once"] == 60.0
    trust = tmp_path / "trust.txt"
    trust.write_text(f"# only A\n{A.public_key.hex()}\n")
    png = tmp_path / "cov.png"
    result = run(
        home,
        "ledger",
        "coverage",
        "--run",
        RUN.hex(),
        "--trusted",
        str(trust),
        "--min",
        "2",
        "--png",
        str(png),
        "--json",
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["trusted_keys"]["keys"] == 1 and data["trusted_keys"]["checked_at_least_once"] == 2
    assert data["all_keys"]["checked_at_least_min"] == 2  # steps 0 and 1
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_coverage_errors(home, filled, tmp_path):
    assert "not hex" in _one_line_error(run(home, "ledger", "coverage", "--run", "xyz"), 2)
    other = hashlib.sha256(b"other").hexdigest()
    assert "not known" in _one_line_error(run(home, "ledger", "coverage", "--run", other), 2)
    trust = tmp_path / "trust.txt"
    trust.write_text("1234\n")
    assert "line 1" in _one_line_error(run(home, "ledger", "coverage", "--run", RUN.hex(), "--trusted", str(trust)), 2)
    assert run(home, "ledger", "coverage", "--run", RUN.hex(), "--min", "0").exit_code == 2
    assert "no ledger" in _one_line_error(
        run(home, "ledger", "coverage", "--run", RUN.hex(), "--ledger", str(tmp_path / "none.db")), 2
    )


def test_disputes_and_equivocations(home, filled):
    result = run(home, "ledger", "disputes", "--json")
    assert result.exit_code == 0
    found = json.loads(result.output)
    assert [(d["step"], len(d["sides"])) for d in found] == [(1, 2)]
    sides = found[0]["sides"]
    assert check_dispute(
        base64.b64decode(sides[0][0]["signed_attestation"]), base64.b64decode(sides[1][0]["signed_attestation"])
    )
    assert "1 disputed claims" in run(home, "ledger", "disputes", "--run", RUN.hex()).output
    result = run(home, "ledger", "equivocations", "--json")
    data = json.loads(result.output)
    assert [(e["step"], e["verifier"]) for e in data["keys"]] == [(2, B.public_key.hex())]
    blobs = [base64.b64decode(e["signed_attestation"]) for e in data["keys"][0]["evidence"]]
    assert check_equivocation(*blobs)
    assert "1 key equivocations" in run(home, "ledger", "equivocations").output


def test_show(home, filled):
    result = run(home, "ledger", "show", "--step", "1", "--json")
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    assert [(s["index"], s["verdict"]) for s in shown] == [(2, "match"), (3, "mismatch")]
    assert "2 attestations" in run(home, "ledger", "show", "--step", "1", "--run", RUN.hex()).output
    assert "0 attestations" in run(home, "ledger", "show", "--step", "4").output
    assert "has 5 steps (0..4)" in _one_line_error(run(home, "ledger", "show", "--step", "5"), 2)


def test_proof_consistency_checkpoint(home, filled):
    data = json.loads(run(home, "ledger", "proof", "--index", "3", "--json").output)
    verify_inclusion(
        bytes.fromhex(data["leaf_hash"]), 3, 7, [bytes.fromhex(h) for h in data["proof"]], bytes.fromhex(data["root"])
    )
    assert data["leaf_hash"] == leaf_hash(filled[3].encoded).hex()
    assert run(home, "ledger", "proof", "--index", "3", "--size", "5").exit_code == 0
    assert "not in a tree of size 3" in _one_line_error(run(home, "ledger", "proof", "--index", "3", "--size", "3"), 2)
    data = json.loads(run(home, "ledger", "consistency", "3", "7", "--json").output)
    verify_consistency(
        3,
        7,
        [bytes.fromhex(h) for h in data["proof"]],
        bytes.fromhex(data["old_root"]),
        bytes.fromhex(data["new_root"]),
    )
    assert run(home, "ledger", "consistency", "5", "3").exit_code == 2
    note = run(home, "ledger", "checkpoint").output
    cp = open_checkpoint(note, NoteVerifier(origin_for(NODE.public_key), NODE.public_key))
    assert cp.size == 7 and cp.root.hex() == data["new_root"]


def test_export_raw_and_dsse(home, filled, tmp_path):
    out = tmp_path / "e.bin"
    assert run(home, "ledger", "export", "--index", "2", "-o", str(out)).exit_code == 0
    assert decode_signed(out.read_bytes()) == filled[2]
    assert run(home, "ledger", "export", "--index", "2").stdout_bytes == filled[2].encoded
    result = run(home, "ledger", "export", "--index", "2", "--dsse")
    imported = import_dsse(result.output.encode())
    assert imported.signed == filled[2] and imported.envelope_signers == (NODE.public_key,)
    assert "not in the ledger" in _one_line_error(run(home, "ledger", "export", "--index", "99"), 2)


def test_verify_ok_then_tampered(home, filled):
    result = run(home, "ledger", "verify")
    assert result.exit_code == 0 and "ok: 7 entries" in result.output
    # Tamper with the index behind the store's back (dropping the append-only trigger first).
    conn = sqlite3.connect(home / "ledger.db")
    conn.execute("DROP TRIGGER attest_index_no_update")
    conn.execute("UPDATE attest_index SET verdict = 0 WHERE leaf = 5")
    conn.commit()
    conn.close()
    line = _one_line_error(run(home, "ledger", "verify"), 1)
    assert "first bad index 5" in line


def test_verify_names_a_tampered_entry(home, filled):
    conn = sqlite3.connect(home / "ledger.db")
    conn.execute("DROP TRIGGER entries_no_update")
    flipped = bytearray(filled[4].encoded)
    flipped[-1] ^= 1
    conn.execute("UPDATE entries SET data = ? WHERE idx = 4", (bytes(flipped),))
    conn.commit()
    conn.close()
    result = run(home, "ledger", "verify", "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["first_bad_index"] == 4
    assert len(result.stderr.strip().splitlines()) == 1 and "first bad index 4" in result.stderr
    assert "first bad index 4" in _one_line_error(run(home, "ledger", "verify"), 1)


def test_add_run_errors(home, tmp_path):
    assert "both --id and --steps" in _one_line_error(run(home, "ledger", "add-run", "--id", RUN.hex()), 2)
    assert run(home, "ledger", "add-run", "--id", RUN.hex(), "--steps", "5").exit_code == 0
    line = _one_line_error(run(home, "ledger", "add-run", "--id", RUN.hex(), "--steps", "6"), 2)
    assert "registered with 5 steps" in line


def test_show_needs_run_when_several(home, filled):
    other = hashlib.sha256(b"second").hexdigest()
    assert run(home, "ledger", "add-run", "--id", other, "--steps", "2").exit_code == 0
    assert "knows 2 runs" in _one_line_error(run(home, "ledger", "show", "--step", "0"), 2)


def test_commands_without_a_node_key(tmp_path):
    empty = tmp_path / "empty"
    line = _one_line_error(run(empty, "ledger", "checkpoint"), 2)
    assert "p2paudit init" in line


@pytest.mark.slow
def test_add_run_from_a_published_run_directory(home, tmp_path):
    from p2paudit.run.manifest import read_manifest
    from p2paudit.run.publisher import TrainPlan, publish_run

    run_dir = tmp_path / "tiny-run"
    publish_run(TrainPlan(run_dir, "tiny", steps=2, ckpt_every=2, backend="cpu"), A)
    manifest = read_manifest(run_dir)
    result = run(home, "ledger", "add-run", str(run_dir))
    assert result.exit_code == 0, result.output
    assert f"run {manifest.run_id.hex()} known: 2 steps (tiny-run)" in result.output
    signed = make_signed(B, step=1, run=manifest.run_id)
    path = tmp_path / "a.bin"
    path.write_bytes(signed.encoded)
    assert run(home, "ledger", "import", str(path)).exit_code == 0
    path.write_bytes(make_signed(B, step=2, run=manifest.run_id).encoded)
    assert "has 2 steps" in _one_line_error(run(home, "ledger", "import", str(path)), 2)
    assert "not both" in _one_line_error(run(home, "ledger", "add-run", str(run_dir), "--steps", "2"), 2)
