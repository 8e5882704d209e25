"""Each lab step's batch is published, and a replay trains on it (p2paudit/lab/batch.py, run/lab_run.py): a lab
may read its data from files the verifier never sees, and the published batch is bound to the claimed state."""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from p2paudit.audit.lab_sandbox import SANDBOX_ENV
from p2paudit.cli import cli
from p2paudit.errors import EXIT_MISMATCH, EXIT_OK, EXIT_USAGE, InputError
from p2paudit.identity import identity_from_seed
from p2paudit.lab import load_script, train_script
from p2paudit.lab.batch import MAX_BATCH_BYTES, batch_array, batch_claim
from p2paudit.run.lab_run import _batch_claim, lab_batch_path, publish_lab_run, read_lab_manifest
from tests.lab.lab_runs import TINY_SCRIPT

PUBLISHER = identity_from_seed(b"\x7c" * 32)

# The lab's batches come from its own data file (P2PAUDIT_TEST_DATA), which no verifier has.
READS_A_DATA_FILE = """

def batch(step):
    import os

    import numpy as np
    import torch

    tokens = np.load(os.environ["P2PAUDIT_TEST_DATA"])
    return torch.from_numpy(tokens[step])
"""


def _verify(home, *args: str):  # noqa: ANN001, ANN202
    return CliRunner().invoke(cli, ["verify-range", *args], env={"P2PAUDIT_HOME": str(home)})


def _publish(where, steps=2, change=None):  # noqa: ANN001, ANN202
    """The tiny script reading its tokens from a data file, trained `steps` steps and published; the data file
    removed after (`change` may rewrite the batches and their claims: a publisher's lie)."""
    data = where / "tokens.npy"
    np.save(data, np.random.default_rng(5).integers(0, 64, (steps, 2, 9), dtype=np.int64))
    script_path = where / "lab_data.py"
    script_path.write_text(TINY_SCRIPT + READS_A_DATA_FILE)
    script = load_script(script_path)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("P2PAUDIT_TEST_DATA", str(data))
        claims, states, batches = train_script(script, steps, values=True)
    if change is not None:
        claims, batches = change(claims, batches)
    publish_lab_run(where / "run", script, claims, states, batches, PUBLISHER)
    data.unlink()
    return where / "run"


@pytest.mark.parametrize("sandbox", ["bwrap", "none"])
def test_a_lab_whose_data_the_verifier_lacks_replays_on_the_published_batches(tmp_path, monkeypatch, sandbox):
    run = _publish(tmp_path)
    monkeypatch.setenv(SANDBOX_ENV, sandbox)
    monkeypatch.setenv("P2PAUDIT_TEST_DATA", str(tmp_path / "tokens.npy"))  # gone: `batch` would raise
    result = _verify(tmp_path / "home", "0-1", "--run", str(run))
    assert result.exit_code == EXIT_OK, result.output
    assert "3 match, 0 mismatch" in result.output
    assert len(read_lab_manifest(run).batches) == 2


def test_a_published_batch_is_bound_to_the_claimed_state(tmp_path):
    """A publisher who publishes other tokens for step 1 than the ones the step trained on (signed all the same)
    is caught: the replay on the published batch computes another state."""

    def other_tokens(claims, batches):  # noqa: ANN001, ANN202
        lie = batches[1].copy()
        lie[0, 0] = (lie[0, 0] + 1) % 64
        return dataclasses.replace(claims, batches=(claims.batches[0], batch_claim(lie))), [batches[0], lie]

    run = _publish(tmp_path, change=other_tokens)
    result = _verify(tmp_path / "home", "0-1", "--run", str(run))
    assert result.exit_code == EXIT_MISMATCH, result.output
    (step0,) = [line for line in result.output.splitlines() if line.startswith("step      0")]
    (step1,) = [line for line in result.output.splitlines() if line.startswith("step      1")]
    assert " match " in step0 and " mismatch " in step1 and "state after step 1 differs" in step1


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda b: b[:-1] + bytes([b[-1] ^ 1]), "its SHA-256 is not the manifest's"),
        (lambda b: b[:-8], "has 136 bytes, not the 144 of its claimed shape \\[2, 9\\]"),
        (lambda b: b + b"\0" * 8, "has 152 bytes, more than the 144 allowed"),
    ],
)
def test_a_batch_file_unlike_the_signed_one_is_refused_in_one_line(tmp_path, damage, message):
    run = _publish(tmp_path, steps=1)
    path = run / lab_batch_path(0)
    path.write_bytes(damage(path.read_bytes()))
    result = _verify(tmp_path / "home", "0", "--run", str(run))
    assert result.exit_code == EXIT_USAGE, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and lab_batch_path(0) in errors[0], result.output
    assert re.search(message, errors[0]), errors[0]


def test_a_missing_batch_file_is_named_in_one_line(tmp_path):
    run = _publish(tmp_path, steps=1)
    (run / lab_batch_path(0)).unlink()
    result = _verify(tmp_path / "home", "0", "--run", str(run))
    assert result.exit_code == EXIT_USAGE, result.output
    assert (
        result.output.splitlines()[-1]
        == f"Error: lab batch {run / lab_batch_path(0)} is missing (step 0 trained on it)"
    )


def test_what_batch_returns_must_be_int64_tokens_on_the_cpu():
    tokens = np.arange(18, dtype=np.int64).reshape(2, 9)
    assert np.array_equal(batch_array(torch.from_numpy(tokens), 0), tokens)
    assert np.array_equal(batch_array(tokens[:, ::2], 0), tokens[:, ::2])  # a view: copied, C order
    for bad, message in [
        (tokens.astype(np.int32), "batch\\(3\\) returned a int32 array \\(want int64 tokens\\)"),
        (torch.zeros(2, 9), "batch\\(3\\) returned a torch.float32 tensor on cpu"),
        ([1, 2, 3], "batch\\(3\\) returned list"),
        (np.zeros((1, 1, 1, 1, 1), dtype=np.int64), "not 1 to 4 positive dimensions"),
        (np.zeros((0, 9), dtype=np.int64), "not 1 to 4 positive dimensions"),
    ]:
        with pytest.raises(InputError, match=message):
            batch_array(bad, 3)


@pytest.mark.parametrize(
    "entry",
    [
        {"shape": [2, 9]},
        {"shape": [2, 9], "sha256": "sha256:" + "0" * 64, "more": 1},
        {"shape": "2x9", "sha256": "sha256:" + "0" * 64},
        {"shape": [2, True], "sha256": "sha256:" + "0" * 64},
        {"shape": [], "sha256": "sha256:" + "0" * 64},
        {"shape": [MAX_BATCH_BYTES], "sha256": "sha256:" + "0" * 64},
        {"shape": [2, 9], "sha256": "0" * 64},
    ],
)
def test_a_malformed_batch_entry_is_an_input_error(entry):
    with pytest.raises(InputError, match="steps\\[0\\].batch"):
        _batch_claim(json.loads(json.dumps(entry)), "manifest steps[0].batch")
