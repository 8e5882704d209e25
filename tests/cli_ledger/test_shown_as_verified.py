"""What `ledger show` and `ledger equivocations` print is what was verified: a signer's own time is its claim,
a split view's signer is the key whose signatures verified, never the name the signer chose."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from click.testing import CliRunner

from ledger import Checkpoint, NoteSigner, sign_checkpoint
from p2paudit.attest.store import AttestationStore, origin_for
from p2paudit.cli import cli
from p2paudit.identity import identity_from_seed, save_identity

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "attest"))
from attest_helpers import RUN, key, make_signed  # noqa: E402

NODE = identity_from_seed(hashlib.sha256(b"shown node").digest())


def run(home: Path, *args: str):
    return CliRunner().invoke(cli, list(args), env={"P2PAUDIT_HOME": str(home)})


def test_show_labels_the_signers_time_as_its_claim_and_prints_a_date(tmp_path):
    home = tmp_path / "home"
    save_identity(NODE, home / "node.key")
    assert run(home, "ledger", "add-run", "--id", RUN.hex(), "--steps", "3").exit_code == 0
    for n, time_ms in enumerate((1_700_000_000_000, 2**63 - 1)):  # a date, and the largest a record can carry
        path = tmp_path / f"a{n}.bin"
        path.write_bytes(make_signed(key(n + 1), step=1, time_ms=time_ms).encoded)
        assert run(home, "ledger", "import", str(path)).exit_code == 0
    shown = run(home, "ledger", "show", "--step", "1")
    assert shown.exit_code == 0, shown.output
    assert "claims time 2023-11-14 22:13:20 UTC (the signer's word, not checked)" in shown.output
    assert f"claims time {2**63 - 1} ms since 1970 (the signer's word, not checked)" in shown.output
    assert " ms\n" not in shown.output


def test_a_split_view_names_the_key_that_signed_it_not_the_name_it_chose(tmp_path):
    home = tmp_path / "home"
    save_identity(NODE, home / "node.key")
    cheat = key(9)
    origin = origin_for(cheat.public_key)
    signer = NoteSigner(origin, cheat.private_key)
    with AttestationStore.open(home / "ledger.db", origin_for(NODE.public_key)) as store:
        for label in (b"one", b"two"):
            note = sign_checkpoint(Checkpoint(origin, 1, hashlib.sha256(label).digest()), signer)
            store.ledger.add_peer_checkpoint(note, signer.verifier, [])
    shown = run(home, "ledger", "equivocations")
    assert shown.exit_code == 0, shown.output
    assert f"log {origin} key {cheat.public_key.hex()[:16]}...: size 1 signed with 2 roots" in shown.output
