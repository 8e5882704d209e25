"""The golden digests on the cpu backend: the README says any backend reaches them, not only the reference.

tests/run/test_publisher.py checks the constant through the publisher on the
reference backend. Here the same run (`train_config("tiny", steps=8, seed=0)`,
the shipped corpus, batches keyed by the corpus's raw SHA-256) is stepped on
the cpu backend through the engine alone, and the digest of state 8 must be
the committed constant of its arithmetic version. No fallback: a missing or broken cpu backend fails.
"""

import pytest

import kernels
from p2paudit.engine.config import train_config
from p2paudit.engine.schedule import batch_for_step
from p2paudit.engine.state import init_state
from p2paudit.engine.step import train_step
from p2paudit.run.digest import digest_bytes, digest_state
from p2paudit.run.golden import GOLDEN_TINY_DIGESTS, GOLDEN_TINY_STEPS
from p2paudit.run.shards import corpus_tokens


@pytest.mark.parametrize("arithmetic", [1, 2])
def test_cpu_backend_reaches_the_golden_digest(arithmetic):
    backend = kernels.get_backend("cpu", arithmetic)
    cfg = train_config("tiny", steps=GOLDEN_TINY_STEPS, seed=0)
    tokens = corpus_tokens()
    data_key = digest_bytes(tokens.tobytes())  # the manifest's data.data_key, raw 32 bytes
    state = init_state(cfg)
    for n in range(GOLDEN_TINY_STEPS):
        state = train_step(state, batch_for_step(tokens, data_key, cfg, n), cfg, backend).state
    assert int(state["step"]) == GOLDEN_TINY_STEPS
    assert digest_state(state).text() == GOLDEN_TINY_DIGESTS[arithmetic]


def test_the_versions_have_different_golden_digests():
    assert GOLDEN_TINY_DIGESTS[1] != GOLDEN_TINY_DIGESTS[2]
