"""An engine step computes with subnormals kept even when foreign code turned flush-to-zero on for its thread.

A daemon replays lab runs and engine runs on the same worker threads; a lab script (its module code runs
when it is loaded) may call torch.set_flush_denormal(True), which sets MXCSR's flush-to-zero and
denormals-are-zero for that thread, or change its rounding (fesetround). The engine's step writes the
standard control word first (kernels.standard_float_modes), so the next engine replay on that thread gives
the golden bits.
"""

import ctypes
import ctypes.util

import pytest
import torch

import kernels
from kernels.cpu_float_modes import X86, nonstandard_modes
from p2paudit.engine.config import train_config
from p2paudit.engine.schedule import batch_for_step
from p2paudit.engine.state import init_state
from p2paudit.engine.step import train_step
from p2paudit.run.digest import digest_bytes, digest_state
from p2paudit.run.golden import GOLDEN_TINY_DIGESTS, GOLDEN_TINY_STEPS
from p2paudit.run.shards import corpus_tokens


def test_an_engine_step_turns_flush_to_zero_off_and_reaches_the_golden_digest():
    if not X86 or not torch.set_flush_denormal(True):
        pytest.skip("flush-to-zero is x86's MXCSR here")
    try:
        assert nonstandard_modes() == ["flush-to-zero", "denormals-are-zero"]
        backend = kernels.get_backend("cpu", 2)
        cfg = train_config("tiny", steps=GOLDEN_TINY_STEPS, seed=0)
        tokens = corpus_tokens()
        data_key = digest_bytes(tokens.tobytes())
        state = train_step(init_state(cfg), batch_for_step(tokens, data_key, cfg, 0), cfg, backend).state
        assert nonstandard_modes() == []  # turned off before the step's first kernel
        for n in range(1, GOLDEN_TINY_STEPS):
            state = train_step(state, batch_for_step(tokens, data_key, cfg, n), cfg, backend).state
        assert digest_state(state).text() == GOLDEN_TINY_DIGESTS[2]
    finally:
        torch.set_flush_denormal(False)


def test_the_standard_control_word_keeps_the_status_flags():
    """Only the control bits are written (0x1F80: masks set, nearest, no flushing); the sticky status
    flags (bits 0-5) stay as the arithmetic left them."""
    from kernels.cpu_float_modes import STANDARD_CONTROL, STATUS_FLAGS, _mxcsr

    if not X86 or not torch.set_flush_denormal(True):
        pytest.skip("flush-to-zero is x86's MXCSR here")
    try:
        before = int(_mxcsr()) & 0xFFFF
        kernels.standard_float_modes()
        after = int(_mxcsr()) & 0xFFFF
        assert after & ~STATUS_FLAGS == STANDARD_CONTROL
        assert after & STATUS_FLAGS & before == before & STATUS_FLAGS  # none cleared (more may have been set)
    finally:
        torch.set_flush_denormal(False)


@pytest.mark.parametrize("mode, name", [(0xC00, "rounding toward zero"), (0x400, "rounding toward -inf")])
def test_an_engine_step_rounds_to_nearest_after_fesetround(mode, name):
    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    if not X86 or libm.fesetround(mode) != 0:
        pytest.skip("fesetround's x86 modes are not available here")
    try:
        assert nonstandard_modes() == [name]
        backend = kernels.get_backend("cpu", 2)
        cfg = train_config("tiny", steps=GOLDEN_TINY_STEPS, seed=0)
        tokens = corpus_tokens()
        data_key = digest_bytes(tokens.tobytes())
        state = init_state(cfg)
        for n in range(GOLDEN_TINY_STEPS):
            state = train_step(state, batch_for_step(tokens, data_key, cfg, n), cfg, backend).state
        assert digest_state(state).text() == GOLDEN_TINY_DIGESTS[2]
    finally:
        libm.fesetround(0)
