"""Every file of a run is checked on read: one flipped bit anywhere is caught and the file is named."""

import json
import random
from pathlib import Path

import pytest

from p2paudit.errors import InputError
from p2paudit.identity import identity_from_seed
from p2paudit.run.checkpoint import checkpoint_path, load_checkpoint
from p2paudit.run.manifest import MANIFEST_FILE, SIGNATURE_FILE, read_manifest, write_manifest
from p2paudit.run.shards import load_tokens, shard_path

FLIPS = 12  # random bit positions per file, plus the first and last byte


def _flip(path: Path, bit: int) -> None:
    data = bytearray(path.read_bytes())
    data[bit // 8] ^= 1 << (bit % 8)
    path.write_bytes(bytes(data))


def _positions(path: Path, seed: int) -> list[int]:
    size = path.stat().st_size * 8
    rng = random.Random(seed)
    return [0, size - 1] + [rng.randrange(size) for _ in range(FLIPS)]


def _read_everything(run_dir: Path) -> None:
    from p2paudit.engine.config import TrainConfig
    from p2paudit.engine.state import state_names

    manifest = read_manifest(run_dir)
    load_tokens(run_dir, manifest.data)
    names = state_names(TrainConfig.from_dict(manifest.config_dict))
    for c in manifest.checkpoints:
        load_checkpoint(run_dir, c, manifest.state_digest(c), names)


def test_the_untouched_run_reads_back(published_run, publisher):
    _read_everything(published_run)
    manifest = read_manifest(published_run)
    assert manifest.checkpoints == (0, 2, 4)
    assert manifest.public_key == publisher.public_key
    assert [s.step for s in manifest.steps] == [0, 1, 2, 3]


@pytest.mark.parametrize(
    "relative", [MANIFEST_FILE, SIGNATURE_FILE, shard_path(0), shard_path(7), checkpoint_path(0), checkpoint_path(2)]
)
def test_one_flipped_bit_is_named(run_copy, relative):
    target = run_copy / relative
    original = target.read_bytes()
    for bit in _positions(target, seed=len(relative)):
        _flip(target, bit)
        with pytest.raises(InputError) as info:
            _read_everything(run_copy)
        assert str(target) in str(info.value), (bit, str(info.value))
        assert "\n" not in str(info.value)
        target.write_bytes(original)
    _read_everything(run_copy)  # restored: valid again, so the loop above tested the flips


@pytest.mark.parametrize("relative", [shard_path(3), checkpoint_path(4), MANIFEST_FILE, SIGNATURE_FILE])
def test_missing_or_truncated_files_are_named(run_copy, relative):
    target = run_copy / relative
    original = target.read_bytes()
    target.write_bytes(original[: len(original) // 2])
    with pytest.raises(InputError, match=str(target)):
        _read_everything(run_copy)
    target.unlink()
    with pytest.raises(InputError, match=str(target)):
        _read_everything(run_copy)


def test_a_body_resigned_by_another_key_verifies_but_names_that_key(run_copy):
    other = identity_from_seed(b"\x09" * 32)
    body = json.loads((run_copy / MANIFEST_FILE).read_bytes())
    write_manifest(run_copy, body, other)
    assert read_manifest(run_copy).public_key == other.public_key


def test_signature_of_another_body_fails(run_copy, publisher):
    body = json.loads((run_copy / MANIFEST_FILE).read_bytes())
    signature_file = run_copy / SIGNATURE_FILE
    kept = signature_file.read_bytes()
    body["steps"][1]["loss"] = 1.5
    write_manifest(run_copy, body, publisher)
    signature_file.write_bytes(kept)  # an old signature beside a new body
    with pytest.raises(InputError, match="is not the run id"):
        read_manifest(run_copy)


def test_non_canonical_manifest_is_refused(run_copy, publisher):
    body = json.loads((run_copy / MANIFEST_FILE).read_bytes())
    from p2paudit.identity import sign
    from p2paudit.run.digest import digest_bytes, format_digest
    from p2paudit.run.manifest import SIGNATURE_DOMAIN

    pretty = json.dumps(body, indent=1, sort_keys=True).encode()
    (run_copy / MANIFEST_FILE).write_bytes(pretty)
    envelope = {
        "format": "p2paudit-run-signature",
        "version": 1,
        "run_id": format_digest(digest_bytes(pretty)),
        "scheme": "ed25519",
        "public_key": publisher.public_key.hex(),
        "signature": sign(publisher, SIGNATURE_DOMAIN + pretty).hex(),
    }
    (run_copy / SIGNATURE_FILE).write_bytes(json.dumps(envelope, sort_keys=True, separators=(",", ":")).encode())
    with pytest.raises(InputError, match="not canonical JSON"):
        read_manifest(run_copy)


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("version", 2, "version is 2, want 1"),
        ("arithmetic_version", 99, r"arithmetic_version \(the version this verifier implements\) is 99"),
        ("engine_version", "0", r"engine_version \(the version this verifier runs\) is '0'"),
        ("checkpoints", [2, 4], r"checkpoints is \[2, 4\], want \[0, 2, 4\]"),
        ("loss_curve", [0.0], "loss_curve is"),
    ],
)
def test_signed_but_malformed_bodies_are_refused(run_copy, publisher, field, value, message):
    body = json.loads((run_copy / MANIFEST_FILE).read_bytes())
    body[field] = value
    write_manifest(run_copy, body, publisher)
    with pytest.raises(InputError, match=message):
        read_manifest(run_copy)
