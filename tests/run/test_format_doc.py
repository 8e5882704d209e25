"""docs/run-format.md, re-implemented from its words alone, agrees with the code bit for bit."""

import hashlib
import json
import struct

import pytest

from p2paudit.engine.config import train_config
from p2paudit.engine.schedule import batch_for_step, batch_key
from p2paudit.run.digest import digest_batch
from p2paudit.run.manifest import MANIFEST_FILE, read_manifest
from p2paudit.run.manifest_body import expected_checkpoints
from p2paudit.run.shards import load_tokens


def test_the_state_digest_folds_raw_tensor_digests(published_run):
    body = json.loads((published_run / MANIFEST_FILE).read_bytes())
    for state in [body["initial_state"]] + [s["output"] for s in body["steps"]]:
        names = sorted(state["tensors"], key=lambda n: n.encode("utf-8"))
        h = hashlib.sha256(b"p2paudit state v1\x00" + struct.pack("<I", len(names)))
        for name in names:
            h.update(bytes.fromhex(state["tensors"][name][len("sha256:") :]))  # 32 raw bytes, not the text
        assert "sha256:" + h.hexdigest() == state["digest"]


def test_shard_headers_are_little_endian_at_the_documented_offsets(published_run):
    body = json.loads((published_run / MANIFEST_FILE).read_bytes())
    offset = 0
    for i, shard in enumerate(body["data"]["shards"]):
        blob = (published_run / shard["path"]).read_bytes()
        assert blob[0:8] == b"P2PSHARD"
        assert int.from_bytes(blob[8:12], "little") == 1
        assert int.from_bytes(blob[12:16], "little") == i
        assert int.from_bytes(blob[16:24], "little") == offset
        assert int.from_bytes(blob[24:32], "little") == shard["tokens"] == len(blob) - 32
        assert "sha256:" + hashlib.sha256(blob).hexdigest() == shard["digest"]  # the whole file
        offset += shard["tokens"]
    tokens = b"".join((published_run / s["path"]).read_bytes()[32:] for s in body["data"]["shards"])
    assert "sha256:" + hashlib.sha256(tokens).hexdigest() == body["data"]["data_key"]  # headers excluded


def test_the_batch_key_takes_the_raw_data_key_and_the_batch_digest_is_another_digest(published_run):
    manifest = read_manifest(published_run)
    data_key, seed = manifest.data.data_key, manifest.config.seed
    h = hashlib.sha256(b"p2paudit/batch-key/v1\x00" + data_key + seed.to_bytes(8, "little")).digest()
    assert len(b"p2paudit/batch-key/v1\x00") == 22
    assert batch_key(data_key, seed) == int.from_bytes(h[:8], "little")
    tokens = load_tokens(published_run, manifest.data)
    batch = batch_for_step(tokens, data_key, train_config("tiny", steps=4), 1)
    assert digest_batch(batch) == manifest.steps[1].data_digest != data_key


def test_checkpoints_follow_the_documented_formula():
    for n in range(1, 30):
        for k in range(1, n + 1):
            documented = list(range(0, n // k * k + 1, k)) + ([] if n % k == 0 else [n])
            assert expected_checkpoints(n, n, k) == documented, (n, k)


@pytest.mark.slow  # 2.7 s (fast tier: pytest -m 'not slow')
def test_verify_range_prints_state_n_plus_1_for_step_n(published_run, tmp_path):
    import os
    import subprocess
    import sys

    env = dict(os.environ, P2PAUDIT_HOME=str(tmp_path / "home"))
    out = subprocess.run(
        [sys.executable, "-m", "p2paudit", "verify-range", "1", "--run", str(published_run), "--backend", "reference"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    manifest = read_manifest(published_run)
    line = next(x for x in out.stdout.splitlines() if "match" in x and "sha256:" in x)
    assert manifest.state_digest(2).text() in line and manifest.state_digest(1).text() not in line
