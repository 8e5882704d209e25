"""M micro-batches on one process equal the same M spread over W gloo processes, bit for bit."""

import numpy as np
import pytest
from engine_helpers import distributed_run, failing_before_a_collective_run, failing_run, shrunk_config, text_corpus

import kernels
from p2paudit.engine.distributed import rank_share, spawn_workers
from p2paudit.engine.schedule import batch_for_step
from p2paudit.engine.state import init_state
from p2paudit.engine.step import train_step
from p2paudit.errors import InputError

STEPS = 2


def single_process(cfg, tokens):
    backend = kernels.get_backend("reference")
    state, losses = init_state(cfg), []
    for n in range(STEPS):
        result = train_step(state, batch_for_step(tokens, b"dist-test", cfg, n), cfg, backend)
        state = result.state
        losses.append(result.loss)
    return state, losses


def test_rank_shares_are_aligned_blocks():
    cfg = shrunk_config(micro_batches=8)
    assert [list(rank_share(cfg, r, 4)) for r in range(4)] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    with pytest.raises(InputError, match="world size 3"):
        rank_share(cfg, 0, 3)
    with pytest.raises(InputError, match="world size 16"):
        rank_share(cfg, 0, 16)


@pytest.mark.slow
@pytest.mark.parametrize("world_size", [2, 4])
def test_w_processes_equal_one(world_size):
    cfg, tokens = shrunk_config(micro_batches=4), text_corpus()
    want_state, want_losses = single_process(cfg, tokens)
    results = spawn_workers(world_size, distributed_run, cfg, tokens, STEPS)
    assert len(results) == world_size
    for rank, got in enumerate(results):
        assert [x.tobytes() for x in got["losses"]] == [x.tobytes() for x in want_losses], f"rank {rank} loss"
        assert list(got["state"]) == list(want_state)
        differ = [k for k in want_state if got["state"][k].tobytes() != want_state[k].tobytes()]
        assert not differ, f"rank {rank}: {len(differ)} tensors differ, first {differ[0]}"
    assert int(want_state["step"]) == STEPS
    # A different split of the tree would not match: (g0 + g1 + g2) + g3 departs from the pairwise tree.
    g = np.float32([0.1, 1e8, -1e8, 0.3])
    assert (g[0] + g[1]) + (g[2] + g[3]) != ((g[0] + g[1]) + g[2]) + g[3]


@pytest.mark.slow
@pytest.mark.parametrize("body", [failing_run, failing_before_a_collective_run])
def test_a_failing_worker_fails_the_spawn_naming_its_error(body):
    """The spawn raises, naming what the failing rank's fn raised, also when a peer's own error (its
    group connection closed by the dying rank: during the group's start, or in a barrier) is what torch
    found first (this test failed once in CI that way, matching the peer's Gloo error)."""
    with pytest.raises(RuntimeError, match="rank 1 raised ValueError: rank 1 fails on purpose"):
        spawn_workers(2, body)
