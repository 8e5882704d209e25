"""The node's Ed25519 identity: create, store, load, sign, verify (a leaf module).

One key does everything a node signs: run manifests, attestations, ledger
checkpoints, and (through `peer_id_of`) it is the libp2p identity too, so a
peer id seen on the network names the same key that signs attestations.

The private key is stored as an unencrypted PKCS#8 PEM file with mode 0600.
`load_identity` refuses a key file that group or others may read or write:
such a key must be treated as leaked, and silently using it would hide that.

This module imports only the standard library, `cryptography`, PyNaCl's
libsodium bindings (for fast verification) and `p2paudit.errors`; it must not
pull in libp2p (slow, and above it in layering).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import asdict, dataclass
from pathlib import Path

import nacl.bindings as _sodium
import nacl.exceptions as _sodium_errors
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from p2paudit.durable import write_durably
from p2paudit.errors import InputError
from p2paudit.regular_files import read_regular

PUBLIC_KEY_SIZE = 32
SIGNATURE_SIZE = 64
KEY_FILE_NAME = "node.key"
# A PEM Ed25519 PKCS#8 key is ~119 bytes; anything far larger is not a key file.
MAX_KEY_FILE_SIZE = 4096

_BASE58_ALPHABET = b"123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
# libp2p's crypto.proto: KeyType enum value for Ed25519.
_LIBP2P_KEY_TYPE_ED25519 = 1
# Multihash codes: identity (0x00) is used when the encoded key is <= 42 bytes.
_MULTIHASH_IDENTITY = 0x00
_MULTIHASH_SHA256 = 0x12
_MAX_INLINE_KEY_LEN = 42


@dataclass(frozen=True)
class Identity:
    """A node's key pair; `public_key` is the 32 raw Ed25519 public key bytes."""

    private_key: Ed25519PrivateKey
    public_key: bytes

    def __repr__(self) -> str:  # never print private material
        return f"Identity(public_key={self.public_key.hex()})"


def home_dir() -> Path:
    """The node's home: $P2PAUDIT_HOME if set and non-empty, else ~/.p2paudit."""
    env = os.environ.get("P2PAUDIT_HOME")
    return Path(env).expanduser() if env else Path.home() / ".p2paudit"


def identity_from_private_key(private_key: Ed25519PrivateKey) -> Identity:
    """Wrap an Ed25519 private key object with its raw public key."""
    public = private_key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return Identity(private_key=private_key, public_key=public)


def identity_from_seed(seed: bytes) -> Identity:
    """An identity from a 32-byte Ed25519 seed (deterministic keys for tests and benchmarks)."""
    if len(seed) != 32:
        raise InputError(f"Ed25519 seed has {len(seed)} bytes, want 32")
    return identity_from_private_key(Ed25519PrivateKey.from_private_bytes(seed))


def generate_identity() -> Identity:
    """A fresh random identity."""
    return identity_from_private_key(Ed25519PrivateKey.generate())


def private_seed(identity: Identity) -> bytes:
    """The 32 raw private key bytes (for libp2p, which wants them to build its key pair)."""
    return identity.private_key.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )


def _encode_pem(identity: Identity) -> bytes:
    return identity.private_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def save_identity(identity: Identity, path: Path | str, overwrite: bool = False) -> None:
    """Write the private key as PKCS#8 PEM, mode 0600, atomically.

    The key is written to a temporary file in the same directory (created 0600,
    so it is never readable by others even briefly), fsynced, then linked into
    place: `os.link` fails if `path` exists, so an existing key is never
    replaced unless `overwrite` is true (then `os.replace`). Parent directories
    are created with mode 0700. Raises InputError if the key exists.
    """
    path = Path(path)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.exists() and not overwrite:
        raise InputError(f"key file {path} already exists; refusing to overwrite it")
    try:
        write_durably(path, _encode_pem(identity), mode=0o600, replace=overwrite)
    except FileExistsError:
        raise InputError(f"key file {path} already exists; refusing to overwrite it") from None


def load_identity(path: Path | str) -> Identity:
    """Load a key written by `save_identity`.

    Raises InputError if the file is missing, not a regular file, owned by
    another user, group/other readable or writable, too large, or does not
    hold an Ed25519 PKCS#8 PEM key.
    """
    path = Path(path)
    try:
        # O_NONBLOCK: a FIFO planted as the key must not hang the node.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise InputError(f"key file {path} does not exist (run `p2paudit init`)") from None
    except OSError as exc:
        raise InputError(f"key file {path} cannot be read: {exc.strerror}") from None
    try:  # checked before fdopen, which refuses a directory with an error naming only the descriptor
        _check_key_file(path, os.fstat(fd))
    except InputError:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(MAX_KEY_FILE_SIZE + 1)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise InputError(f"key file {path} is not a PEM private key: {exc}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise InputError(f"key file {path} holds a {type(key).__name__}, want an Ed25519 key")
    return identity_from_private_key(key)


def _check_key_file(path: Path, info: os.stat_result) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise InputError(f"key file {path} is not a regular file")
    if info.st_uid != os.geteuid():
        raise InputError(
            f"key file {path} is owned by uid {info.st_uid}, not by this user (uid {os.geteuid()}); "
            f"a node signs only with its own key"
        )
    loose = stat.S_IMODE(info.st_mode) & 0o077
    if loose:
        raise InputError(
            f"key file {path} has mode {stat.S_IMODE(info.st_mode):04o}, readable or writable by others; "
            f"want 0600 (chmod 600 {path})"
        )
    if info.st_size > MAX_KEY_FILE_SIZE:
        raise InputError(f"key file {path} has {info.st_size} bytes, more than {MAX_KEY_FILE_SIZE}; not a key")


def node_key_path(home: Path | None = None) -> Path:
    """The node key: the one its config.json names when there is a config, else HOME/node.key
    (HOME: `home`, default home_dir()).

    Every command that signs as the node (train, verify-range --attest, id,
    ledger checkpoint, the daemon) finds its key here, so one node never signs
    with two keys.
    """
    home = home_dir() if home is None else Path(home)
    config_path = home / CONFIG_FILE_NAME
    if config_path.exists():
        return Path(load_config(config_path).key)
    return home / KEY_FILE_NAME


def load_node_identity() -> Identity:
    """The node's key (see node_key_path); InputError if there is none yet (run `p2paudit init`)."""
    return load_identity(node_key_path())


def ensure_node_identity(home: Path | None = None) -> tuple[Identity, bool]:
    """(the node's key, whether it was created now): set up as `p2paudit init` would when missing,
    in `home` (default home_dir()).

    Race-safe: two processes creating the key at once both end up with the
    one key that was linked into place first (os.link never replaces a file).
    """
    home = home_dir() if home is None else Path(home)
    path = node_key_path(home)
    if path.exists():
        return load_identity(path), False
    created = True
    try:
        save_identity(generate_identity(), path)
    except InputError:
        if not path.exists():
            raise
        created = False  # another process created it first; use theirs
    config_path = home / CONFIG_FILE_NAME
    if not config_path.exists():
        try:
            save_config(default_config(home=home), config_path)
        except InputError:
            if not config_path.exists():
                raise
    return load_identity(path), created


def sign(identity: Identity, message: bytes) -> bytes:
    """The 64-byte Ed25519 signature of `message`."""
    return identity.private_key.sign(message)


def verify_signature(public_key: bytes, signature: bytes, message: bytes) -> bool:
    """True iff `signature` is a valid Ed25519 signature of `message` by `public_key`.

    A malformed key or signature (wrong length, not a curve point, small
    order) is simply False: callers decide what a failed check means, and no
    library exception leaks out. Verification is libsodium's (PyNaCl, already
    a dependency of libp2p): twice as fast as OpenSSL's here, which is what
    lets a node check thousands of gossiped attestations a second. It is the
    one verifier used for every attestation, so all nodes accept exactly the
    same set of signatures; signing stays with `cryptography` (Ed25519
    signatures are deterministic, the bytes are the same either way).
    """
    if type(public_key) is not bytes or len(public_key) != PUBLIC_KEY_SIZE:
        return False
    if type(signature) is not bytes or len(signature) != SIGNATURE_SIZE:
        return False
    try:
        # crypto_sign_open wants the "combined" form: signature followed by the message.
        _sodium.crypto_sign_open(signature + message, public_key)
    except (_sodium_errors.CryptoError, ValueError, TypeError):
        return False
    return True


def public_key_hex(identity_or_key: Identity | bytes) -> str:
    """Lower-case hex of a raw public key (or an identity's)."""
    key = identity_or_key.public_key if isinstance(identity_or_key, Identity) else identity_or_key
    return key.hex()


def parse_public_key_hex(text: str) -> bytes:
    """32 raw key bytes from 64 hex digits; InputError naming what is wrong otherwise."""
    text = text.strip()
    try:
        key = bytes.fromhex(text)
    except ValueError:
        raise InputError(f"public key {text[:80]!r} is not hex") from None
    if len(key) != PUBLIC_KEY_SIZE:
        raise InputError(f"public key has {len(key)} bytes, want {PUBLIC_KEY_SIZE}")
    return key


def encode_uvarint(value: int) -> bytes:
    """The unsigned LEB128 (multiformats varint) encoding of a non-negative integer."""
    if value < 0:
        raise InputError(f"varint value {value} is negative")
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _base58btc(data: bytes) -> str:
    number = int.from_bytes(data, "big")
    out = bytearray()
    while number:
        number, rem = divmod(number, 58)
        out.append(_BASE58_ALPHABET[rem])
    # Each leading zero byte is written as a leading '1'.
    pad = len(data) - len(data.lstrip(b"\x00"))
    return (b"1" * pad + bytes(reversed(out))).decode("ascii")


def peer_id_of(public_key: bytes) -> str:
    """The libp2p peer id (base58btc string) of a raw Ed25519 public key.

    As libp2p derives it: the key is serialised as the protobuf
    `PublicKey{Type: Ed25519, Data: key}` (field 1 varint, field 2 bytes); an
    encoding of at most 42 bytes is wrapped in an identity multihash, a longer
    one is sha256-multihashed. For Ed25519 it is always 36 bytes, so inline.
    """
    if len(public_key) != PUBLIC_KEY_SIZE:
        raise InputError(f"public key has {len(public_key)} bytes, want {PUBLIC_KEY_SIZE}")
    proto = b"\x08" + encode_uvarint(_LIBP2P_KEY_TYPE_ED25519) + b"\x12" + encode_uvarint(len(public_key)) + public_key
    if len(proto) <= _MAX_INLINE_KEY_LEN:
        multihash = bytes([_MULTIHASH_IDENTITY]) + encode_uvarint(len(proto)) + proto
    else:  # kept for completeness; unreachable for 32-byte keys
        multihash = bytes([_MULTIHASH_SHA256]) + encode_uvarint(32) + hashlib.sha256(proto).digest()
    return _base58btc(multihash)


CONFIG_FILE_NAME = "config.json"
CONFIG_FORMAT = "p2paudit-config"
CONFIG_VERSION = 1
MAX_CONFIG_FILE_SIZE = 64 * 1024


@dataclass(frozen=True)
class NodeConfig:
    """What `p2paudit init` writes beside the key (JSON, so no extra parser is needed)."""

    node_name: str
    listen: str  # a libp2p multiaddr; loopback by default, a node is opened up on purpose
    ledger: str
    redundancy: int
    key: str
    peers: tuple[str, ...] = ()  # bootstrap peers (/p2p/ multiaddrs) the daemon keeps for good
    follow: tuple[str, ...] = ()  # publisher keys (64 hex) whose announced runs the daemon audits


def default_config(name: str | None = None, redundancy: int = 3, home: Path | None = None) -> NodeConfig:
    """The configuration for a fresh node under `home` (default home_dir())."""
    home = home_dir() if home is None else Path(home)
    if type(redundancy) is not int or redundancy < 1:
        raise InputError(f"redundancy is {redundancy}, want an integer >= 1")
    return NodeConfig(
        node_name=name or os.uname().nodename or "p2paudit-node",
        listen="/ip4/127.0.0.1/tcp/0",
        ledger=str(home / "ledger.db"),
        redundancy=redundancy,
        key=str(home / KEY_FILE_NAME),
    )


def save_config(config: NodeConfig, path: Path | str) -> None:
    """Write the config as JSON atomically; refuses to replace an existing file."""
    path = Path(path)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fields = {**asdict(config), "peers": list(config.peers), "follow": list(config.follow)}
    text = json.dumps({"format": CONFIG_FORMAT, "version": CONFIG_VERSION, **fields}, indent=2) + "\n"
    try:
        write_durably(path, text.encode(), replace=False)
    except FileExistsError:
        raise InputError(f"config file {path} already exists; refusing to overwrite it") from None


def load_config(path: Path | str) -> NodeConfig:
    """Read a config written by `save_config`; InputError naming the bad field otherwise."""
    path = Path(path)
    try:
        data = json.loads(read_regular(path, "config file", MAX_CONFIG_FILE_SIZE))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise InputError(f"config file {path} is not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != CONFIG_FORMAT or data.get("version") != CONFIG_VERSION:
        raise InputError(f"config file {path} is not a {CONFIG_FORMAT} version {CONFIG_VERSION} file")
    expected = {"node_name": str, "listen": str, "ledger": str, "redundancy": int, "key": str}
    for name, kind in expected.items():
        if type(data.get(name)) is not kind:
            raise InputError(f"config file {path}: {name} is {data.get(name)!r}, want a {kind.__name__}")
    if data["redundancy"] < 1:
        raise InputError(f"config file {path}: redundancy is {data['redundancy']}, want >= 1")
    peers = data.get("peers", [])  # optional: configs written before the daemon have none
    if type(peers) is not list or not all(type(p) is str and 0 < len(p) <= 512 for p in peers) or len(peers) > 256:
        raise InputError(f"config file {path}: peers must be a list of at most 256 multiaddr strings")
    follow = data.get("follow", [])  # optional too
    if type(follow) is not list or len(follow) > 64 or not all(_is_key_hex(k) for k in follow):
        raise InputError(f"config file {path}: follow must be a list of at most 64 public keys (64 hex digits)")
    unknown = sorted(set(data) - set(expected) - {"format", "version", "peers", "follow"})
    if unknown:
        raise InputError(f"config file {path}: unknown field {unknown[0]!r}")
    return NodeConfig(**{name: data[name] for name in expected}, peers=tuple(peers), follow=tuple(follow))


def _is_key_hex(text: object) -> bool:
    return type(text) is str and len(text) == 64 and all(c in "0123456789abcdef" for c in text)
