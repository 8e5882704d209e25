"""C2SP signed notes and checkpoints: the Go reference vector, good notes, wrong keys, altered bodies, malformed text."""

from __future__ import annotations

import base64

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ledger.errors import CheckpointError
from ledger.note import (
    Checkpoint,
    NoteSigner,
    NoteVerifier,
    key_id,
    open_checkpoint,
    open_note,
    parse_note,
    sign_checkpoint,
    sign_note,
)

# The example key and note of golang.org/x/mod/sumdb/note (its tests and documentation), used by
# C2SP signed-note implementations as the interoperability vector. Ed25519 is deterministic, so
# signing the text with the private key must give the published signature byte for byte.
GO_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
GO_SKEY_B64 = "AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"  # from "PRIVATE+KEY+PeterNeumann+c74f20a3+..."
GO_TEXT = "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n"
GO_NOTE = (
    GO_TEXT
    + "\n\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
)

ROOT = bytes(range(32))


def _go_signer() -> NoteSigner:
    raw = base64.b64decode(GO_SKEY_B64)
    assert raw[0] == 1  # Ed25519 type byte, then the 32-byte seed
    return NoteSigner("PeterNeumann", Ed25519PrivateKey.from_private_bytes(raw[1:]))


def _signer(name: str = "example.org/log") -> NoteSigner:
    return NoteSigner(name, Ed25519PrivateKey.generate())


def test_go_reference_vector_round_trips_byte_for_byte():
    verifier = NoteVerifier.from_vkey(GO_VKEY)
    assert verifier.key_id.hex() == "c74f20a3" and verifier.vkey == GO_VKEY
    signer = _go_signer()
    assert signer.verifier == verifier
    assert sign_note(GO_TEXT, [signer]) == GO_NOTE
    text, by = open_note(GO_NOTE, [verifier])
    assert text == GO_TEXT and by == (verifier,)
    with pytest.raises(CheckpointError, match="does not verify"):
        open_note(GO_NOTE.replace("cryptography", "cryptographY"), [verifier])


def test_key_id_is_the_c2sp_hash():
    pub = bytes(32)
    import hashlib

    assert key_id("a", pub) == hashlib.sha256(b"a\n\x01" + pub).digest()[:4]


def test_checkpoint_round_trip():
    signer = _signer()
    cp = Checkpoint("example.org/log", 1234, ROOT)
    note = sign_checkpoint(cp, signer)
    assert note.startswith(f"example.org/log\n1234\n{base64.b64encode(ROOT).decode()}\n\n\u2014 example.org/log ")
    assert open_checkpoint(note, [signer.verifier]) == cp
    assert open_checkpoint(note, signer.verifier) == cp
    with_ext = Checkpoint("example.org/log", 0, ROOT, ("ext line one", "two"))
    assert open_checkpoint(sign_checkpoint(with_ext, signer), [signer.verifier]) == with_ext


def test_wrong_key_is_rejected():
    note = sign_checkpoint(Checkpoint("o", 1, ROOT), _signer("k"))
    with pytest.raises(CheckpointError, match=r"no signature from a known key \(signed by k\+"):
        open_checkpoint(note, [_signer("k").verifier])  # same name, other key: another key id, ignored
    with pytest.raises(CheckpointError, match="no signature from a known key"):
        open_checkpoint(note, [])


def test_same_name_and_key_id_with_a_bad_signature_rejects_the_note():
    signer = _signer("k")
    note = sign_checkpoint(Checkpoint("o", 1, ROOT), signer)
    for old, new in [("o\n1\n", "o\n2\n"), ("o\n1\n", "p\n1\n")]:
        with pytest.raises(CheckpointError, match="does not verify"):
            open_checkpoint(note.replace(old, new, 1), [signer.verifier])
    sig_line = note.splitlines()[-1]
    blob = bytearray(base64.b64decode(sig_line.split(" ")[2]))
    blob[10] ^= 1
    bad = note.replace(sig_line, f"\u2014 k {base64.b64encode(bytes(blob)).decode()}")
    with pytest.raises(CheckpointError, match="does not verify"):
        open_checkpoint(bad, [signer.verifier])


def test_bad_key_id_is_an_unknown_key():
    signer = _signer("k")
    note = sign_checkpoint(Checkpoint("o", 1, ROOT), signer)
    sig_line = note.splitlines()[-1]
    blob = bytearray(base64.b64decode(sig_line.split(" ")[2]))
    blob[0] ^= 0xFF
    bad = note.replace(sig_line, f"\u2014 k {base64.b64encode(bytes(blob)).decode()}")
    with pytest.raises(CheckpointError, match="no signature from a known key"):
        open_checkpoint(bad, [signer.verifier])


def test_unknown_signatures_are_ignored_and_cosignatures_counted():
    a, b, c = _signer("a"), _signer("b"), _signer("c")
    note = sign_note(Checkpoint("o", 5, ROOT).body(), [a, b, c])
    text, by = open_note(note, [b.verifier])
    assert by == (b.verifier,)
    _, by = open_note(note, [c.verifier, a.verifier])
    assert set(by) == {a.verifier, c.verifier}


MALFORMED = [
    ("", "does not end with a newline"),
    ("o\n1\nAAAA\n", "no blank line"),
    ("o\n1\n\n", "no signature lines"),
    ("o\n1\n\n\u2014 k AAAA", "does not end with a newline"),
    ("o\n1\n\n- k AAAAAAAAAAAA\n", "does not start with an em dash"),
    ("o\n1\n\n\u2014 k AAAA AAAA\n", "has 3 space-separated fields"),
    ("o\n1\n\n\u2014 k\n", "has 1 space-separated fields"),
    ("o\n1\n\n\u2014  AAAAAAAAAAAA\n", "key name is empty"),
    ("o\n1\n\n\u2014 a+b AAAAAAAAAAAA\n", "contains a space"),
    ("o\n1\n\n\u2014 k AAAA\n", "has 3 bytes"),
    ("o\n1\n\n\u2014 k !!!!\n", "not valid base64"),
    ("o\n1\n\n\u2014 k AAAAAAAAAAB=\n", "not canonical base64"),
    ("o\n\t1\n\n\u2014 k AAAAAAAAAAAA\n", "control character"),
    ("o\r\n1\n\n\u2014 k AAAAAAAAAAAA\n", "control character"),
    ("o\n1\n\n\u2014 k AAAAAAAAAAAA\n\n", "no signature lines"),
    ("o\n1\n\n" + "\u2014 k AAAAAAAAAAAA\n" * 101, "101 signatures, limit 100"),
]


@pytest.mark.parametrize("note,message", MALFORMED)
def test_malformed_notes_are_rejected_with_a_reason(note, message):
    with pytest.raises(CheckpointError, match=message):
        parse_note(note)


def test_not_utf8_is_rejected():
    with pytest.raises(CheckpointError, match="not valid UTF-8"):
        parse_note(b"o\xff\n1\n\n")


def _signed_body(body: str) -> tuple[str, NoteSigner]:
    s = _signer("k")
    return body + "\n" + s.signature_line(body), s


BAD_BODIES = [
    ("o\n1\n", "has 2 lines, want at least 3"),
    ("o\n01\n" + base64.b64encode(ROOT).decode() + "\n", "without leading zeros"),
    ("o\n-1\n" + base64.b64encode(ROOT).decode() + "\n", "without leading zeros"),
    ("o\n1 \n" + base64.b64encode(ROOT).decode() + "\n", "without leading zeros"),
    ("o\n18446744073709551616\n" + base64.b64encode(ROOT).decode() + "\n", r"not an integer in \[0, 2\^64\)"),
    ("o\n1\n" + base64.b64encode(ROOT[:31]).decode() + "\n", "root has 31 bytes, want 32"),
    ("o\n1\n" + base64.urlsafe_b64encode(b"\xff" * 32).decode() + "\n", "not valid base64"),
]


@pytest.mark.parametrize("body,message", BAD_BODIES)
def test_malformed_checkpoint_bodies_are_rejected(body, message):
    note, signer = _signed_body(body)
    with pytest.raises(CheckpointError, match=message):
        open_checkpoint(note, [signer.verifier])


def test_checkpoint_fields_are_checked():
    with pytest.raises(CheckpointError, match="root has 31 bytes"):
        Checkpoint("o", 1, ROOT[:31])
    with pytest.raises(CheckpointError, match="origin"):
        Checkpoint("", 1, ROOT)
    with pytest.raises(CheckpointError, match="size -1"):
        Checkpoint("o", -1, ROOT)
    with pytest.raises(CheckpointError, match="extension line"):
        Checkpoint("o", 1, ROOT, ("",))


BAD_VKEYS = [
    ("PeterNeumann+c74f20a3", "has 2 '\\+'-separated fields, want 3"),
    ("PeterNeumann+c74f20a4+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW", "does not match its key"),
    ("PeterNeumann+C74F20A3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW", "8 lowercase hex digits"),
    ("PeterNeumann+c74f20a3+AhpC2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW", "of type 02, want 33 of type 01"),
    ("PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10", "not canonical base64|not valid base64"),
    ("Peter Neumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW", "contains a space"),
    ("+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW", "key name is empty"),
]


@pytest.mark.parametrize("vkey,message", BAD_VKEYS)
def test_bad_verifier_keys_are_rejected(vkey, message):
    with pytest.raises(CheckpointError, match=message):
        NoteVerifier.from_vkey(vkey)


def test_every_truncation_and_byte_bump_of_the_vkey_is_rejected():
    for i in range(len(GO_VKEY)):
        for cut in (GO_VKEY[:i], GO_VKEY[i + 1 :]):
            with pytest.raises(CheckpointError):
                NoteVerifier.from_vkey(cut)
        bumped = GO_VKEY[:i] + chr(ord(GO_VKEY[i]) + 1) + GO_VKEY[i + 1 :]
        with pytest.raises(CheckpointError):
            NoteVerifier.from_vkey(bumped)


def test_signer_and_verifier_inputs_are_checked():
    with pytest.raises(CheckpointError, match="has 31 bytes, want 32"):
        NoteVerifier("k", bytes(31))
    with pytest.raises(CheckpointError, match="needs an Ed25519PrivateKey"):
        NoteSigner("k", "not a key")
    with pytest.raises(CheckpointError, match="must end with a newline"):
        sign_note("no newline", [_signer()])
    with pytest.raises(CheckpointError, match="at least one signer"):
        sign_note("text\n", [])


# The examples in the C2SP specifications themselves (their public keys are not published, so only the
# format is checked: the note text may hold blank lines, and the last blank line separates the signatures).
C2SP_NOTE_EXAMPLE = (
    "Ognuno sta solo sul cuor della terra\ntrafitto da un raggio di sole:\n\ned \u00e8 subito sera.\n\n"
    "\u2014 quasimodo.example/salvatore NnugSzTjtVAewIS+Z/iJhUPeFDkO/5QQ2i5ddnGITLlC+EhfLW9oJKONrMouFSQU0xMcXxj99ihAQwaqP3ZekRwNtIc=\n"
)
C2SP_CHECKPOINT_EXAMPLE = (
    "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n\n"
    "\u2014 example.com/behind-the-sofa Az3grlgtzPICa5OS8npVmf1Myq/5IZniMp+ZJurmRDeOoRDe4URYN7u5/Zhcyv2q1gGzGku9nTo+zyWE+xeMcTOAYQ8=\n"
)


def test_c2sp_signed_note_example_parses():
    note = parse_note(C2SP_NOTE_EXAMPLE)
    assert (
        note.text == "Ognuno sta solo sul cuor della terra\ntrafitto da un raggio di sole:\n\ned \u00e8 subito sera.\n"
    )
    assert [(s.name, len(s.key_id), len(s.signature)) for s in note.signatures] == [
        ("quasimodo.example/salvatore", 4, 64)
    ]
    with pytest.raises(CheckpointError, match="no signature from a known key"):
        open_note(C2SP_NOTE_EXAMPLE, [_signer("quasimodo.example/salvatore").verifier])


def test_c2sp_checkpoint_example_parses():
    note = parse_note(C2SP_CHECKPOINT_EXAMPLE)
    cp = Checkpoint.from_body(note.text)
    assert (cp.origin, cp.size) == ("example.com/behind-the-sofa", 20852163)
    assert cp.root == base64.b64decode("CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=") and cp.body() == note.text
    assert note.signatures[0].name == "example.com/behind-the-sofa" and len(note.signatures[0].signature) == 64
