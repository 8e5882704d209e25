"""train_step is a pure function with a complete trace, and the backends agree on its bits."""

import dataclasses

import numpy as np
import pytest
from engine_helpers import shrunk_config, text_corpus

import kernels
from p2paudit.engine.config import train_config
from p2paudit.engine.schedule import batch_for_step
from p2paudit.engine.state import check_state, init_state
from p2paudit.engine.step import PairwiseTree, micro_batch_grads, train_step, tree_reduce, tree_sum
from p2paudit.errors import InputError

REF = kernels.get_backend("reference")


def copy_state(state):
    return {k: v.copy() for k, v in state.items()}


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def setup(micro_batches=2, step=0):
    cfg = shrunk_config(micro_batches=micro_batches)
    return cfg, init_state(cfg), batch_for_step(text_corpus(), b"step-test", cfg, step)


def test_train_step_is_pure():
    cfg, state, batch = setup()
    state_before, batch_before = copy_state(state), batch.copy()
    r1 = train_step(state, batch, cfg, REF)
    r2 = train_step(state, batch, cfg, REF)
    assert all(same_bits(state[k], state_before[k]) for k in state)
    assert np.array_equal(batch, batch_before)
    assert list(r1.state) == list(state) and int(r1.state["step"]) == 1
    assert all(same_bits(r1.state[k], r2.state[k]) for k in state)
    assert isinstance(r1.loss, np.float32) and r1.loss == r2.loss
    check_state(r1.state, cfg)
    assert not any(r1.state[k] is state[k] for k in state)
    assert not np.array_equal(r1.state["params/wte"], state["params/wte"])


def test_loss_and_gradient_follow_the_micro_batch_tree():
    cfg, state, batch = setup(micro_batches=4)
    parts = [micro_batch_grads(state, batch[m], cfg, REF) for m in range(4)]
    losses = [loss for _, loss in parts]
    want_loss = np.float32(np.float32(np.float32(losses[0] + losses[1]) + np.float32(losses[2] + losses[3])) / 4)
    result = train_step(state, batch, cfg, REF)
    assert result.loss == want_loss
    g = [p[0] for p in parts]
    summed = tree_sum(g)
    assert same_bits(summed["wte"], (g[0]["wte"] + g[1]["wte"]) + (g[2]["wte"] + g[3]["wte"]))
    with pytest.raises(InputError, match="tree sum over 3 items"):
        tree_sum(g[:3])


def test_pairwise_tree_of_eight_and_its_subtrees():
    x = [np.float32(v) for v in (1.0, 1e8, -1e8, 1.0, 3.0, 5e7, -5e7, 0.5)]
    add = lambda a, b: np.float32(a + b)  # noqa: E731
    left = add(add(x[0], x[1]), add(x[2], x[3]))
    right = add(add(x[4], x[5]), add(x[6], x[7]))
    assert tree_reduce(x, add) == add(left, right)
    assert tree_reduce([tree_reduce(x[:4], add), tree_reduce(x[4:], add)], add) == add(left, right)
    serial = x[0]
    for v in x[1:]:
        serial = add(serial, v)
    assert serial != add(left, right)  # the order is what the test pins: a left fold gives other bits
    tree = PairwiseTree(add)
    for v in x[:3]:
        tree.push(v)
    with pytest.raises(InputError, match="tree sum over 3 items, want a power of two"):
        tree.total()


def test_trace_names_are_unique_and_bisect_a_corruption():
    cfg, state, batch = setup()
    names, values = [], []
    train_step(state, batch, cfg, REF, trace=lambda n, v: (names.append(n), values.append(v.copy())))
    assert len(names) == len(set(names))
    assert names[0] == "mb0/fwd/wte" and names[-1] == "update/ln_f/v"
    assert "mb1/fwd/h.1/attn.softmax" in names and "mb0/bwd/h.0/attn.wq.dw" in names and "loss" in names
    # Flip one low bit of one weight: the first op that departs names where it entered.
    bad = copy_state(state)
    bad["params/h.1.attn.wk"].view(np.uint32)[3, 5] ^= 1
    names2, values2 = [], []
    train_step(bad, batch, cfg, REF, trace=lambda n, v: (names2.append(n), values2.append(v.copy())))
    assert names2 == names
    first = next(i for i, (a, b) in enumerate(zip(values, values2)) if not same_bits(a, b))
    assert names[first] == "mb0/fwd/h.1/attn.k"


def test_bad_batch_and_state_are_input_errors():
    cfg, state, batch = setup()
    with pytest.raises(InputError, match=r"batch has shape \(1, 2, 17\), want \(2, 2, 17\)"):
        train_step(state, batch[:1], cfg, REF)
    with pytest.raises(InputError, match=r"token ids span \[\d+, 300\], want \[0, 256\)"):
        train_step(state, np.where(batch == batch[0, 0, 0], 300, batch), cfg, REF)
    with pytest.raises(InputError, match="lacks tensor step"):
        train_step({k: v for k, v in state.items() if k != "step"}, batch, cfg, REF)


def test_weight_decay_spares_norm_gains():
    cfg, state, batch = setup()
    cfg = dataclasses.replace(cfg, optim=dataclasses.replace(cfg.optim, lr=0.0, min_lr=0.0, weight_decay=0.5))
    new = train_step(state, batch, cfg, REF).state
    assert same_bits(new["params/wte"], state["params/wte"])  # lr 0: decay factor exactly 1
    cfg = dataclasses.replace(cfg, optim=dataclasses.replace(cfg.optim, lr=1e-3, min_lr=1e-3, beta1=0.0))
    new = train_step(state, batch, cfg, REF).state
    assert not same_bits(new["params/ln_f"], state["params/ln_f"])


def test_reference_and_cpu_backends_agree_bit_for_bit():
    cfg = train_config("tiny", micro_batches=2, seed=5)  # the real tiny model, two micro-batches
    state, batch = init_state(cfg), batch_for_step(text_corpus(), b"step-test", cfg, 0)
    cpu = kernels.get_backend("cpu")
    ref_trace, cpu_trace = {}, {}
    r_ref = train_step(state, batch, cfg, REF, trace=lambda n, v: ref_trace.__setitem__(n, v.copy()))
    r_cpu = train_step(state, batch, cfg, cpu, trace=lambda n, v: cpu_trace.__setitem__(n, v.copy()))
    departs = [n for n in ref_trace if not same_bits(ref_trace[n], cpu_trace[n])]
    assert not departs, f"first op that departs: {departs[0]}"
    assert all(same_bits(r_ref.state[k], r_cpu.state[k]) for k in state)
    assert r_ref.loss.tobytes() == r_cpu.loss.tobytes()
