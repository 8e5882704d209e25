"""Helpers shared by the run tests."""

from pathlib import Path

from p2paudit.identity import sign
from p2paudit.run.digest import digest_bytes, format_digest
from p2paudit.run.manifest import MANIFEST_FILE, SIGNATURE_DOMAIN, SIGNATURE_FILE, canonical_json


def sign_raw(run_dir: Path, body_bytes: bytes, identity) -> None:
    """Write `body_bytes` as the manifest, exactly as given, with a valid signature over them."""
    (run_dir / MANIFEST_FILE).write_bytes(body_bytes)
    envelope = {
        "format": "p2paudit-run-signature",
        "version": 1,
        "run_id": format_digest(digest_bytes(body_bytes)),
        "scheme": "ed25519",
        "public_key": identity.public_key.hex(),
        "signature": sign(identity, SIGNATURE_DOMAIN + body_bytes).hex(),
    }
    (run_dir / SIGNATURE_FILE).write_bytes(canonical_json(envelope))
