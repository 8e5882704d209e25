"""`p2paudit ledger check-proof` names as signer only a key whose signature it verified for the checkpoint's origin.

The proof file is the adversary's to write: its "vkey", extra signature lines
and origin are whatever makes a false inclusion look signed. Each forged file
here starts from a real proof of a real ledger the CLI made.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ledger import Checkpoint, NoteSigner, leaf_hash, sign_checkpoint
from p2paudit.attest.store import AttestationStore, origin_for
from p2paudit.cli import cli
from p2paudit.explorer.proofs import build_proof
from p2paudit.identity import identity_from_seed, save_identity

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "attest"))
from attest_helpers import RUN, key, make_signed  # noqa: E402

NODE = identity_from_seed(hashlib.sha256(b"check-proof node").digest())
EVIL = key(66)  # the adversary's own key
FOREIGN = key(67)  # the key of a log that is not a p2paudit ledger
FOREIGN_ORIGIN = "example.com/log"


def run(home: Path, *args: str):
    return CliRunner().invoke(cli, list(args), env={"P2PAUDIT_HOME": str(home)})


@pytest.fixture
def proof(tmp_path) -> dict:
    """A real proof of entry 1 against a checkpoint the node signed (ledger of 3 entries)."""
    home = tmp_path / "home"
    save_identity(NODE, home / "node.key")
    assert run(home, "ledger", "add-run", "--id", RUN.hex(), "--steps", "5").exit_code == 0
    for step in range(3):
        path = tmp_path / f"a{step}.bin"
        path.write_bytes(make_signed(key(step + 1), step=step).encoded)
        assert run(home, "ledger", "import", str(path)).exit_code == 0
    assert run(home, "ledger", "checkpoint").exit_code == 0
    with AttestationStore.open_readonly(home / "ledger.db") as store:
        return build_proof(store, 1)


def check(tmp_path: Path, data: dict, *key_args: str):
    path = tmp_path / "proof.json"
    path.write_text(json.dumps(data))
    return run(tmp_path / "home", "ledger", "check-proof", str(path), *key_args)


def one_line_error(result, code: int) -> str:
    assert result.exit_code == code, result.output
    return result.output.strip().splitlines()[-1]


def signed_for(origin: str, signer, size: int, root_hex: str) -> str:
    return sign_checkpoint(Checkpoint(origin, size, bytes.fromhex(root_hex)), NoteSigner(origin, signer.private_key))


def extra_line(note: str, name: str, signer) -> str:
    """The note with one more signature line: `signer`'s, under `name`, over the same text."""
    text = note[: note.rfind("\n\n") + 1]
    return note + NoteSigner(name, signer.private_key).signature_line(text)


def test_the_real_proof_names_the_origin_key_it_checked(proof, tmp_path):
    result = check(tmp_path, proof)
    assert result.exit_code == 0, result.output
    assert f"signed by {origin_for(NODE.public_key)} (key {NODE.public_key.hex()}, the key its origin names)" in (
        result.output
    )
    result = check(tmp_path, proof, "--key", NODE.public_key.hex())
    assert result.exit_code == 0 and "the key given" in result.output, result.output


def test_another_keys_line_for_another_origin_is_not_a_signer(proof, tmp_path):
    # The adversary adds its own signature line under its own name and offers its vkey: today's
    # check verified that line and reported the checkpoint "signed by" the node's origin with --key EVIL.
    forged = dict(
        proof,
        checkpoint=extra_line(proof["checkpoint"], "evil.example/log", EVIL),
        vkey=NoteSigner("evil.example/log", EVIL.private_key).verifier.vkey,
    )
    refused = one_line_error(check(tmp_path, forged, "--key", EVIL.public_key.hex()), 1)
    assert "names key" in refused and "not the key given" in refused
    result = check(tmp_path, forged)  # without --key: the node's own signature, the extra line unread
    assert result.exit_code == 0, result.output
    assert f"key {NODE.public_key.hex()}, the key its origin names); 1 other signature line(s) not checked" in (
        result.output
    )
    assert EVIL.public_key.hex() not in result.output


def test_a_forged_tree_signed_by_another_key_under_another_name_is_refused(proof, tmp_path):
    # A tree the node never had (one fake entry), claimed for the node's origin, signed by EVIL.
    fake = make_signed(EVIL, step=4).encoded
    root = leaf_hash(fake).hex()
    text = Checkpoint(proof["origin"], 1, bytes.fromhex(root)).body()
    note = text + "\n" + NoteSigner("evil.example/log", EVIL.private_key).signature_line(text)
    forged = dict(
        proof,
        index=0,
        size=1,
        leaf_hash=root,
        root=root,
        proof=[],
        entry=base64.b64encode(fake).decode(),
        checkpoint=note,
        vkey=NoteSigner("evil.example/log", EVIL.private_key).verifier.vkey,
    )
    refused = one_line_error(check(tmp_path, forged), 1)
    assert f"no signature by key {NODE.public_key.hex()[:16]}" in refused
    assert "evil.example/log" in refused  # what the lines do name
    forged["vkey"] = None
    assert "no signature by key" in one_line_error(check(tmp_path, forged), 1)


def test_the_right_key_name_with_a_wrong_signature_does_not_verify(proof, tmp_path):
    note = proof["checkpoint"]
    text, line = note[: note.rfind("\n\n") + 1], note[note.rfind("\n\n") + 2 :].rstrip("\n")
    name, blob = line[2:].split(" ")
    raw = bytearray(base64.b64decode(blob))
    raw[-1] ^= 1  # the key id stays right: only the signature is wrong
    bad = f"\u2014 {name} {base64.b64encode(bytes(raw)).decode()}\n"
    forged = dict(proof, checkpoint=extra_line(text + "\n" + bad, "evil.example/log", EVIL))
    forged["vkey"] = NoteSigner("evil.example/log", EVIL.private_key).verifier.vkey
    assert "does not verify" in one_line_error(check(tmp_path, forged), 1)
    assert "not the key given" in one_line_error(check(tmp_path, forged, "--key", EVIL.public_key.hex()), 1)
    assert "does not verify" in one_line_error(check(tmp_path, forged, "--key", NODE.public_key.hex()), 1)


def test_a_foreign_origin_is_checked_only_with_its_key(proof, tmp_path):
    note = signed_for(FOREIGN_ORIGIN, FOREIGN, proof["size"], proof["root"])
    foreign = dict(
        proof,
        origin=FOREIGN_ORIGIN,
        checkpoint=note,
        vkey=NoteSigner(FOREIGN_ORIGIN, FOREIGN.private_key).verifier.vkey,
    )
    result = check(tmp_path, foreign)  # the file's vkey is the file's word: nothing is named as signer
    assert result.exit_code == 2, result.output
    assert "proven: entry 1 is in the tree of size 3" in result.output
    assert (
        result.output.strip()
        .splitlines()[-1]
        .startswith("Error: the checkpoint's signature was not checked: pass --key HEX")
    )
    assert "signed by" not in result.output
    result = check(tmp_path, foreign, "--key", FOREIGN.public_key.hex())
    assert result.exit_code == 0 and f"signed by {FOREIGN_ORIGIN} (key {FOREIGN.public_key.hex()}" in result.output
    # The same key's signature under another name is no signature for this origin.
    text = note[: note.rfind("\n\n") + 1]
    other = dict(
        foreign, checkpoint=text + "\n" + NoteSigner("other.example/log", FOREIGN.private_key).signature_line(text)
    )
    other["vkey"] = NoteSigner("other.example/log", FOREIGN.private_key).verifier.vkey
    assert "no signature by key" in one_line_error(check(tmp_path, other, "--key", FOREIGN.public_key.hex()), 1)


def test_the_files_origin_must_be_its_checkpoints(proof, tmp_path):
    assert "its checkpoint" in one_line_error(check(tmp_path, dict(proof, origin=FOREIGN_ORIGIN)), 1)
    # An origin in the node form that is not the canonical spelling of a key: read as no node's log.
    lookalike = proof["origin"] + "1"
    note = signed_for(lookalike, EVIL, proof["size"], proof["root"])
    forged = dict(proof, origin=lookalike, checkpoint=note)
    assert "peer id" in one_line_error(check(tmp_path, forged), 1)
    assert "peer id" in one_line_error(check(tmp_path, forged, "--key", EVIL.public_key.hex()), 1)


def test_a_checkpoint_that_is_not_a_note_is_bad_input(proof, tmp_path):
    assert "not a signed checkpoint note" in one_line_error(check(tmp_path, dict(proof, checkpoint="x\n")), 2)
    assert "want a signed note" in one_line_error(check(tmp_path, dict(proof, checkpoint=7)), 2)
