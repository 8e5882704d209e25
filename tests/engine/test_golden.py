"""Pinned outputs of the engine's own arithmetic-free parts: init, batch order, trace names.

These depend on no kernel (only Philox, the init rule, the batch rule and the
op sequence of docs/engine.md), so a change here means ENGINE_VERSION must
change: every run published before would no longer replay.
"""

import hashlib

import numpy as np

import kernels
from p2paudit.engine.config import train_config
from p2paudit.engine.schedule import batch_for_step
from p2paudit.engine.state import init_state
from p2paudit.engine.step import train_step

INIT_TINY_SEED0 = "4f6824655932b96a7064933be331fe35db7fc25f5ab369139bfe73bbec3c6da4"
BATCH_TINY_STEP3 = "fb1c7b446dad46d07296611980f7045b7f4bb1e3a425310fc491248bba4cf16d"
TRACE_NAMES_TINY_M1 = (189, "e8ba3d5e2c834d4727b36d34f5acc1db16454869366f8e31123a7cb2e9965cf7")
TOKENS = np.frombuffer(bytes(range(256)) * 8, dtype=np.uint8)


def test_init_state_is_pinned():
    h = hashlib.sha256()
    for name, tensor in init_state(train_config("tiny", seed=0)).items():
        h.update(name.encode() + b"\0" + tensor.tobytes())
    assert h.hexdigest() == INIT_TINY_SEED0


def test_batch_order_is_pinned():
    batch = batch_for_step(TOKENS, b"golden", train_config("tiny", seed=0), 3)
    assert hashlib.sha256(batch.tobytes()).hexdigest() == BATCH_TINY_STEP3


def test_trace_op_names_are_pinned():
    cfg = train_config("tiny", micro_batches=1)
    names: list[str] = []
    batch = batch_for_step(TOKENS, b"golden", cfg, 0)
    train_step(init_state(cfg), batch, cfg, kernels.get_backend("reference"), trace=lambda n, v: names.append(n))
    assert (len(names), hashlib.sha256("\n".join(names).encode()).hexdigest()) == TRACE_NAMES_TINY_M1
