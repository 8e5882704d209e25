"""An engine step computes with subnormals kept even when foreign code turned flush-to-zero on for its thread.

A daemon replays lab runs and engine runs on the same worker threads; a lab script (its module code runs
when it is loaded) may call torch.set_flush_denormal(True), which sets MXCSR's flush-to-zero and
denormals-are-zero for that thread. The engine's step turns both off first (kernels.keep_subnormals), so
the next engine replay on that thread gives the golden bits.
"""

import pytest
import torch

import kernels
from kernels.cpu_float_modes import X86, flush_modes
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
        assert flush_modes() == (True, True)
        backend = kernels.get_backend("cpu", 2)
        cfg = train_config("tiny", steps=GOLDEN_TINY_STEPS, seed=0)
        tokens = corpus_tokens()
        data_key = digest_bytes(tokens.tobytes())
        state = train_step(init_state(cfg), batch_for_step(tokens, data_key, cfg, 0), cfg, backend).state
        assert flush_modes() == (False, False)  # turned off before the step's first kernel
        for n in range(1, GOLDEN_TINY_STEPS):
            state = train_step(state, batch_for_step(tokens, data_key, cfg, n), cfg, backend).state
        assert digest_state(state).text() == GOLDEN_TINY_DIGESTS[2]
    finally:
        torch.set_flush_denormal(False)


def test_keep_subnormals_clears_only_the_two_bits():
    """Rounding mode, exception masks and flags stay as they were: only bits 15 and 6 are cleared."""
    from kernels.cpu_float_modes import DENORMALS_ARE_ZERO, FLUSH_TO_ZERO, _mxcsr

    if not X86 or not torch.set_flush_denormal(True):
        pytest.skip("flush-to-zero is x86's MXCSR here")
    try:
        before = int(_mxcsr()) & 0xFFFF
        assert before & FLUSH_TO_ZERO and before & DENORMALS_ARE_ZERO
        kernels.keep_subnormals()
        assert int(_mxcsr()) & 0xFFFF & ~0x3F == before & ~(FLUSH_TO_ZERO | DENORMALS_ARE_ZERO) & ~0x3F
    finally:
        torch.set_flush_denormal(False)
