"""A whole training step on the Triton backend (interpreted on CPU) has the reference's bits.

TRITON_INTERPRET=1 must be set before Triton kernels are defined, so the
Triton side runs in a fresh process; it reports the SHA-256 of every tensor
of the new state, compared here with the reference backend's.
"""

import dataclasses
import hashlib
import json
import os
import subprocess
import sys

import pytest
from engine_helpers import shrunk_config, text_corpus

import kernels
from p2paudit.engine.schedule import batch_for_step
from p2paudit.engine.state import init_state
from p2paudit.engine.step import train_step

SCRIPT = r"""
import dataclasses, hashlib, json, sys
import numpy as np
import kernels
from p2paudit.engine.config import TrainConfig
from p2paudit.engine.schedule import batch_for_step
from p2paudit.engine.state import init_state
from p2paudit.engine.step import train_step
cfg = TrainConfig.from_dict(json.loads(sys.argv[1]))
tokens = np.frombuffer(open(sys.argv[2], "rb").read(), dtype=np.uint8)
state = init_state(cfg)
result = train_step(state, batch_for_step(tokens, b"triton-test", cfg, 0), cfg, kernels.get_backend("triton"))
print(json.dumps({k: hashlib.sha256(v.tobytes()).hexdigest() for k, v in result.state.items()}))
"""


def state_digests(state):
    return {k: hashlib.sha256(v.tobytes()).hexdigest() for k, v in state.items()}


def assert_interpreted_step_is_the_reference(script: str, tmp_path) -> None:
    """Run `script` (config JSON, corpus path) under TRITON_INTERPRET=1 on a one-layer, one-sequence
    shrunk config (the interpreter is slow); its per-tensor SHA-256s must be the reference step's."""
    cfg = shrunk_config(micro_batches=2, seq_len=8)
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, n_layer=1), batch_size=1)
    corpus = tmp_path / "corpus.bin"
    corpus.write_bytes(text_corpus().tobytes())
    env = dict(os.environ, TRITON_INTERPRET="1")
    out = subprocess.run(
        [sys.executable, "-c", script, json.dumps(cfg.to_dict()), str(corpus)],
        capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.splitlines()[-1])
    batch = batch_for_step(text_corpus(), b"triton-test", cfg, 0)
    want = state_digests(train_step(init_state(cfg), batch, cfg, kernels.get_backend("reference")).state)
    differ = [k for k in want if got.get(k) != want[k]]
    assert list(got) == list(want) and not differ, f"{len(differ)} tensors differ, first {differ[:1]}"


@pytest.mark.slow
@pytest.mark.triton
def test_triton_step_matches_reference(tmp_path):
    assert_interpreted_step_is_the_reference(SCRIPT, tmp_path)


STREAMED_SCRIPT = r"""
import hashlib, json, pathlib, sys, tempfile
import numpy as np
import kernels
from p2paudit.engine.config import TrainConfig
from p2paudit.engine.schedule import batch_for_step
from p2paudit.engine.state import init_state
from p2paudit.engine.streaming import streamed_step
from p2paudit.run.spill import DiskGradStore
cfg = TrainConfig.from_dict(json.loads(sys.argv[1]))
tokens = np.frombuffer(open(sys.argv[2], "rb").read(), dtype=np.uint8)
state = init_state(cfg)
params = {k: v for k, v in state.items() if k.startswith("params/")}
out = {}
with tempfile.TemporaryDirectory() as tmp, DiskGradStore(pathlib.Path(tmp)) as store:
    streamed_step(params, 0, lambda n: (state["opt/m/" + n], state["opt/v/" + n]),
                  batch_for_step(tokens, b"triton-test", cfg, 0), out.__setitem__, cfg, kernels.get_backend("triton"), store)
print(json.dumps({k: hashlib.sha256(out[k].tobytes()).hexdigest() for k in state}))
"""


@pytest.mark.slow
@pytest.mark.triton
def test_streamed_triton_step_matches_reference(tmp_path):
    """engine.streaming on the Triton backend (partial sums spilled to disk) has train_step's bits."""
    assert_interpreted_step_is_the_reference(STREAMED_SCRIPT, tmp_path)
