"""The training state: an ordered dict of named numpy arrays, and its deterministic init.

Order and names (C = n_embd, F = mlp_mult * C, V = vocab_size, T = seq_len):

    params/wte (V, C)  params/wpe (T, C)
    params/h.<l>.ln1 (C,)  params/h.<l>.attn.wq|wk|wv|wo (C, C)
    params/h.<l>.ln2 (C,)  params/h.<l>.mlp.w_fc (C, F)  params/h.<l>.mlp.w_proj (F, C)
    params/ln_f (C,)  [params/lm_head (V, C) when the head is untied]
    opt/m/<param> and opt/v/<param> for every param, in the same order
    step  int64 0-d: the number of updates done

The llama family (F = model.mlp_hidden, KV = n_kv_head * head_dim) has no
wpe (positions are rotary), (C, KV) wk and wv, and a SwiGLU MLP:

    params/wte (V, C)
    params/h.<l>.ln1 (C,)  params/h.<l>.attn.wq (C, C) wk (C, KV) wv (C, KV) wo (C, C)
    params/h.<l>.ln2 (C,)  params/h.<l>.mlp.w_gate (C, F) w_up (C, F) w_proj (F, C)
    params/ln_f (C,)  [params/lm_head (V, C) when the head is untied]

Linear maps are stored (in, out): y = x @ W. Every float tensor is float32.
"""

from __future__ import annotations

import numpy as np

import kernels
from p2paudit.engine import rng
from p2paudit.engine.config import ModelConfig, TrainConfig
from p2paudit.errors import InputError

# Init: matrices uniform on [-INIT_BOUND, INIT_BOUND) (std about 0.02); the two
# projections that write into the residual stream are scaled by 1/sqrt(2 n_layer).
INIT_BOUND = np.float32(0.035)


def param_shapes(model: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Parameter names (without the "params/" prefix) and shapes, in state order."""
    C, F, V, T = model.n_embd, model.mlp_hidden, model.vocab_size, model.seq_len
    KV = model.kv_heads * model.head_dim
    shapes: dict[str, tuple[int, ...]] = {"wte": (V, C)}
    if not model.is_llama:
        shapes["wpe"] = (T, C)
    for layer in range(model.n_layer):
        p = f"h.{layer}."
        shapes[p + "ln1"] = (C,)
        for w, width in (("wq", C), ("wk", KV), ("wv", KV), ("wo", C)):
            shapes[p + "attn." + w] = (C, width)
        shapes[p + "ln2"] = (C,)
        for w in ("w_gate", "w_up") if model.is_llama else ("w_fc",):
            shapes[p + "mlp." + w] = (C, F)
        shapes[p + "mlp.w_proj"] = (F, C)
    shapes["ln_f"] = (C,)
    if not model.tied_head:
        shapes["lm_head"] = (V, C)
    return shapes


def state_shapes(cfg: TrainConfig) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Every state tensor's name -> (shape, dtype), in state order."""
    params = param_shapes(cfg.model)
    out: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
    for prefix in ("params/", "opt/m/", "opt/v/"):
        for name, shape in params.items():
            out[prefix + name] = (shape, np.dtype(np.float32))
    out["step"] = ((), np.dtype(np.int64))
    return out


def state_names(cfg: TrainConfig) -> list[str]:
    """The state's tensor names in order."""
    return list(state_shapes(cfg))


def init_param(model: ModelConfig, name: str, shape: tuple[int, ...], tensor_id: int, seed: int) -> np.ndarray:
    """One parameter's initial value: norm gains 1.0, others uniform from Philox (seed, tensor_id)."""
    if len(shape) == 1:
        return np.ones(shape, dtype=np.float32)
    bound = INIT_BOUND
    if name.endswith("attn.wo") or name.endswith("mlp.w_proj"):
        bound = np.float32(bound / np.sqrt(np.float32(2 * model.n_layer)))  # sqrt is correctly rounded
    n = int(np.prod(shape))
    u = rng.uniform_float32(seed, (rng.DOMAIN_INIT, tensor_id, 0), n)  # (n,) in [0, 1)
    centred = u * np.float32(2.0) - np.float32(1.0)  # exact: u has 24 bits and lies in [0, 1)
    return (centred * bound).reshape(shape)


def init_state(cfg: TrainConfig) -> dict[str, np.ndarray]:
    """The state before step 0: parameters from the seed, moments zero, step 0."""
    kernels.standard_float_modes()  # the initialisers' float32 arithmetic rounds as docs/arithmetic.md 1 says
    params = param_shapes(cfg.model)
    state: dict[str, np.ndarray] = {}
    for tensor_id, (name, shape) in enumerate(params.items()):
        state["params/" + name] = init_param(cfg.model, name, shape, tensor_id, cfg.seed)
    for prefix in ("opt/m/", "opt/v/"):
        for name, shape in params.items():
            state[prefix + name] = np.zeros(shape, dtype=np.float32)
    state["step"] = np.array(0, dtype=np.int64)
    return state


def check_state(state: dict[str, np.ndarray], cfg: TrainConfig) -> None:
    """Raise InputError naming the first tensor that is missing, extra, or of the wrong dtype or shape."""
    if not isinstance(state, dict):
        raise InputError(f"state is a {type(state).__name__}, want a dict of arrays")
    want = state_shapes(cfg)
    extra = [n for n in state if n not in want]
    if extra:
        raise InputError(f"state has unexpected tensor {extra[0]} ({len(extra)} extra in all)")
    for name, (shape, dtype) in want.items():
        if name not in state:
            raise InputError(f"state lacks tensor {name}")
        t = state[name]
        if not isinstance(t, np.ndarray):
            raise InputError(f"state tensor {name} is a {type(t).__name__}, want a numpy array")
        if t.dtype != dtype:
            raise InputError(f"state tensor {name} has dtype {t.dtype}, want {dtype}")
        if t.shape != shape:
            raise InputError(f"state tensor {name} has shape {t.shape}, want {shape}")
    if int(state["step"]) < 0:
        raise InputError(f"state step is {int(state['step'])}, want >= 0")


def count_params(model: ModelConfig) -> int:
    """Number of trainable parameters."""
    return sum(int(np.prod(s)) for s in param_shapes(model).values())
