"""An engine step computes as docs/arithmetic.md 1 says even when foreign code changed its thread's control word.

A daemon replays lab runs and engine runs on the same worker threads; a lab script (its module code runs
when it is loaded) may call torch.set_flush_denormal(True), which sets MXCSR's flush-to-zero and
denormals-are-zero for that thread, or change its rounding (fesetround). The engine writes the standard
control word before drawing the initial state and before each step (kernels.standard_float_modes), so the
next engine replay on that thread gives the golden bits.
"""

import pytest

import kernels
from kernels.cpu_float_modes import STANDARD_CONTROL, STATUS_FLAGS, _mxcsr, nonstandard_modes
from p2paudit.engine.config import train_config
from p2paudit.engine.schedule import batch_for_step
from p2paudit.engine.state import init_state
from p2paudit.engine.step import train_step
from p2paudit.run.digest import digest_bytes, digest_state
from p2paudit.run.golden import GOLDEN_TINY_DIGESTS, GOLDEN_TINY_STEPS
from p2paudit.run.shards import corpus_tokens
from tests.float_modes import flushing_denormals, rounding


def _golden_run() -> str:
    """The tiny golden run's last state digest, on the cpu backend at arithmetic 2."""
    backend = kernels.get_backend("cpu", 2)
    cfg = train_config("tiny", steps=GOLDEN_TINY_STEPS, seed=0)
    tokens = corpus_tokens()
    data_key = digest_bytes(tokens.tobytes())
    state = init_state(cfg)
    assert nonstandard_modes() in ([], None)  # written before the initial state was drawn
    for n in range(GOLDEN_TINY_STEPS):
        state = train_step(state, batch_for_step(tokens, data_key, cfg, n), cfg, backend).state
    return digest_state(state).text()


def test_an_engine_run_under_flush_to_zero_reaches_the_golden_digest():
    with flushing_denormals():
        assert nonstandard_modes() == ["flush-to-zero", "denormals-are-zero"]
        assert _golden_run() == GOLDEN_TINY_DIGESTS[2]


@pytest.mark.parametrize("mode, name", [(0xC00, "rounding toward zero"), (0x400, "rounding toward -inf")])
def test_an_engine_run_after_fesetround_rounds_to_nearest(mode, name):
    with rounding(mode):
        assert nonstandard_modes() == [name]
        assert _golden_run() == GOLDEN_TINY_DIGESTS[2]


def test_the_standard_control_word_keeps_the_status_flags():
    """Only the control bits are written (0x1F80: masks set, nearest, no flushing); the sticky status
    flags (bits 0-5) stay as the arithmetic left them."""
    with flushing_denormals():
        before = int(_mxcsr()) & 0xFFFF
        kernels.standard_float_modes()
        after = int(_mxcsr()) & 0xFFFF
    assert after & ~STATUS_FLAGS == STANDARD_CONTROL
    assert after & STATUS_FLAGS & before == before & STATUS_FLAGS  # none cleared (more may have been set)
