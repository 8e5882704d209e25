"""Node identity: key files, permissions, signatures and the libp2p peer id."""

import os
import subprocess
import sys

import pytest

from p2paudit.errors import InputError
from p2paudit.identity import (
    generate_identity,
    home_dir,
    identity_from_seed,
    load_identity,
    parse_public_key_hex,
    peer_id_of,
    public_key_hex,
    save_identity,
    sign,
    verify_signature,
)


def test_home_dir_follows_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("P2PAUDIT_HOME", str(tmp_path / "h"))
    assert home_dir() == tmp_path / "h"
    monkeypatch.delenv("P2PAUDIT_HOME")
    assert home_dir().name == ".p2paudit"


def test_save_and_load_round_trip_with_mode_0600(tmp_path):
    ident = generate_identity()
    path = tmp_path / "sub" / "node.key"
    save_identity(ident, path)
    assert oct(path.stat().st_mode & 0o777) == oct(0o600)
    again = load_identity(path)
    assert again.public_key == ident.public_key
    assert len(again.public_key) == 32
    assert verify_signature(ident.public_key, sign(again, b"m"), b"m")
    assert not list(path.parent.glob(".*tmp"))


def test_save_refuses_to_overwrite_unless_asked(tmp_path):
    path = tmp_path / "node.key"
    first, second = generate_identity(), generate_identity()
    save_identity(first, path)
    with pytest.raises(InputError, match="already exists"):
        save_identity(second, path)
    assert load_identity(path).public_key == first.public_key
    save_identity(second, path, overwrite=True)
    assert load_identity(path).public_key == second.public_key


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620, 0o602])
def test_load_refuses_loose_permissions(tmp_path, mode):
    path = tmp_path / "node.key"
    save_identity(generate_identity(), path)
    os.chmod(path, mode)
    with pytest.raises(InputError, match=f"mode {mode:04o}"):
        load_identity(path)


def test_load_refuses_missing_and_malformed(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        load_identity(tmp_path / "nope.key")
    bad = tmp_path / "bad.key"
    bad.write_bytes(b"-----BEGIN PRIVATE KEY-----\nnot base64\n-----END PRIVATE KEY-----\n")
    os.chmod(bad, 0o600)
    with pytest.raises(InputError, match="not a PEM private key"):
        load_identity(bad)
    big = tmp_path / "big.key"
    big.write_bytes(b"x" * 5000)
    os.chmod(big, 0o600)
    with pytest.raises(InputError, match="5000 bytes"):
        load_identity(big)


def test_load_refuses_a_non_ed25519_key(tmp_path):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    path = tmp_path / "ec.key"
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    os.chmod(path, 0o600)
    with pytest.raises(InputError, match="want an Ed25519 key"):
        load_identity(path)


def test_verify_signature_is_false_on_anything_wrong():
    ident = identity_from_seed(bytes(range(32)))
    sig = sign(ident, b"hello")
    assert verify_signature(ident.public_key, sig, b"hello")
    assert not verify_signature(ident.public_key, sig, b"hellO")
    flipped = bytes([sig[0] ^ 1]) + sig[1:]
    assert not verify_signature(ident.public_key, flipped, b"hello")
    assert not verify_signature(ident.public_key, sig[:63], b"hello")
    assert not verify_signature(ident.public_key[:31], sig, b"hello")
    assert not verify_signature(b"\xff" * 32, sig, b"hello")  # not a valid point or wrong key
    assert not verify_signature(generate_identity().public_key, sig, b"hello")


def test_public_key_hex_round_trip():
    ident = generate_identity()
    assert parse_public_key_hex(public_key_hex(ident)) == ident.public_key
    with pytest.raises(InputError, match="31 bytes"):
        parse_public_key_hex("00" * 31)
    with pytest.raises(InputError, match="not hex"):
        parse_public_key_hex("zz" * 32)


def test_peer_id_matches_py_libp2p():
    from libp2p.crypto.ed25519 import create_new_key_pair
    from libp2p.peer.id import ID

    for seed in (b"\x01" * 32, bytes(range(32)), os.urandom(32)):
        pair = create_new_key_pair(seed)
        ours = identity_from_seed(seed)
        assert ours.public_key == pair.public_key.to_bytes()
        assert peer_id_of(ours.public_key) == ID.from_pubkey(pair.public_key).to_base58()
    assert peer_id_of(identity_from_seed(b"\x01" * 32).public_key).startswith("12D3KooW")


def test_identity_does_not_import_libp2p():
    code = "import sys, p2paudit.identity; print('libp2p' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr


def test_verify_agrees_with_openssl_on_random_messages():
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    for n in range(50):
        ident = identity_from_seed(os.urandom(32))
        message = os.urandom(n * 7)
        sig = sign(ident, message)
        if n % 2:
            sig = sig[: n % 64] + bytes([sig[n % 64] ^ (1 << (n % 8))]) + sig[n % 64 + 1 :]
        try:
            Ed25519PublicKey.from_public_bytes(ident.public_key).verify(sig, message)
            openssl = True
        except InvalidSignature:
            openssl = False
        assert verify_signature(ident.public_key, sig, message) is openssl is (n % 2 == 0)


def test_verify_rejects_non_bytes_without_raising():
    ident = identity_from_seed(bytes(32))
    sig = sign(ident, b"m")
    assert not verify_signature(bytearray(ident.public_key), sig, b"m")
    assert not verify_signature(ident.public_key, None, b"m")
