"""Initial state: deterministic from the seed, named and shaped as documented, checked strictly."""

import dataclasses

import numpy as np
import pytest

from p2paudit.engine import rng
from p2paudit.engine.config import train_config
from p2paudit.engine.state import check_state, init_state, state_names
from p2paudit.errors import InputError


def test_init_is_deterministic_and_seeded():
    cfg = train_config("tiny", seed=3)
    a, b = init_state(cfg), init_state(cfg)
    assert list(a) == state_names(cfg)
    assert all(np.array_equal(a[n], b[n]) for n in a)
    c = init_state(dataclasses.replace(cfg, seed=4))
    assert not np.array_equal(a["params/wte"], c["params/wte"])
    assert np.array_equal(a["params/h.0.ln1"], c["params/h.0.ln1"])  # gains are 1.0 whatever the seed


def test_layout_and_init_statistics():
    cfg = train_config("tiny")
    s = init_state(cfg)
    assert state_names(cfg)[:3] == ["params/wte", "params/wpe", "params/h.0.ln1"]
    assert state_names(cfg)[-1] == "step" and s["step"].dtype == np.int64 and int(s["step"]) == 0
    assert s["opt/m/wte"].shape == s["params/wte"].shape and not s["opt/v/h.1.mlp.w_fc"].any()
    wq, wo = s["params/h.0.attn.wq"], s["params/h.0.attn.wo"]
    assert np.abs(wq).max() <= 0.035 and 0.018 < wq.std() < 0.022
    assert wo.std() < wq.std() * 0.6  # residual projections are scaled down by 1/sqrt(2 n_layer)
    assert not np.array_equal(s["params/h.0.attn.wq"], s["params/h.0.attn.wk"])


def test_init_follows_docs_engine_section_3_literally():
    # Index i counts every parameter, 1-d ones too; 2-d values are ((u * 2) - 1) * a from
    # the words of stream (seed, (1, i, 0)); a is given in the document by its bits.
    cfg = train_config("tiny", seed=9)
    s = init_state(cfg)
    names = [n for n in state_names(cfg) if n.startswith("params/")]
    assert names.index("params/h.0.attn.wq") == 3
    a = np.array(0x3D0F5C29, np.uint32).view(np.float32)[()]
    a_resid = np.array(0x3C8F5C29, np.uint32).view(np.float32)[()]  # tiny: a / sqrt(2 * 2)
    assert a == np.float32(0.035) and a_resid == np.float32(a / np.sqrt(np.float32(4)))
    for i, name in enumerate(names):
        t = s[name]
        if t.ndim == 1:
            assert (t == 1.0).all(), name
            continue
        words = rng.random_uint32(9, (1, i, 0), t.size)
        u = (words >> np.uint32(8)).astype(np.float32) * np.float32(2.0**-24)
        bound = a_resid if name.endswith(("attn.wo", "mlp.w_proj")) else a
        want = ((u * np.float32(2.0)) - np.float32(1.0)) * bound
        assert t.tobytes() == want.reshape(t.shape).tobytes(), name


def test_check_state_names_the_offending_tensor():
    cfg = train_config("tiny")
    s = init_state(cfg)
    check_state(s, cfg)
    bad = dict(s, **{"params/wpe": s["params/wpe"][:-1]})
    with pytest.raises(InputError, match=r"params/wpe has shape \(63, 64\), want \(64, 64\)"):
        check_state(bad, cfg)
    bad = dict(s, **{"opt/m/ln_f": s["opt/m/ln_f"].astype(np.float64)})
    with pytest.raises(InputError, match="opt/m/ln_f has dtype float64"):
        check_state(bad, cfg)
    bad = {k: v for k, v in s.items() if k != "opt/v/wte"}
    with pytest.raises(InputError, match="lacks tensor opt/v/wte"):
        check_state(bad, cfg)
    with pytest.raises(InputError, match="unexpected tensor params/extra"):
        check_state(dict(s, **{"params/extra": s["step"]}), cfg)
