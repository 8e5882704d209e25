"""Compile (or load from numba's cache) the cpu kernels a lab step calls, in this process, with our own models.

A lab replay runs the publisher's script in a sandboxed child (audit.lab_sandbox) that gets a private copy
of the kernels' cache: what the child compiles never reaches the cache this process loads (a script could
write anything there). So before a child starts, the process that judges it fills the cache itself by
training one step of this package's own sample models (p2paudit/lab/sample_models.py: a Llama with RoPE,
SwiGLU and grouped-query attention, a GPT-2 with LayerNorm, GELU tanh and a tied head) under the mode,
and by calling the kernels those small arrays do not reach (the threaded elementwise kernels from
PARALLEL_MIN elements, a product wider than 256 columns, one head's attention backward both with
p kept and recomputed: P2PAUDIT_LAB_ATTENTION_CACHE says which a step takes). Once per process
and arithmetic version: about a second with a warm cache; from a cold one, the compiles a lab step would
otherwise repeat in every child (a minute or more).
"""

from __future__ import annotations

import numpy as np

import kernels
from kernels import cpu_lab, cpu_lab_math
from kernels.cpu_elementwise import MULTIPLY
from p2paudit.lab import sample_models
from p2paudit.lab.session import LabRun

_WARMED: set[int] = set()


def warm_kernels(arithmetic: int) -> None:
    """Run the kernels of a cpu lab step of arithmetic version `arithmetic` once in this process (see above)."""
    if arithmetic in _WARMED:
        return
    # the mode refuses a step under another control word, which code run earlier on this thread (a lab
    # script trained here) may have left: the verifier's own steps start from the standard one
    kernels.standard_float_modes()
    tokens = sample_models.batches(1)[0]
    for model, opt in (
        sample_models.make(seed=0),
        sample_models.make(seed=0, kv_heads=2),
        sample_models.make_gpt2(seed=0),
    ):
        run = LabRun(model, opt, backend="cpu", arithmetic=arithmetic)
        with run.step(0):
            sample_models.train_step(model, opt, tokens)
    be = kernels.get_backend("cpu", arithmetic)
    be.matmul(np.ones((40, 16), np.float32), np.ones((16, 300), np.float32))
    q = np.ones((1, 20, 8), np.float32)
    be.attention_backward(q, q, q, be.attention(q, q, q)[1], q)
    cpu_lab.attention_backward_recomputed(q, q, q, q, arithmetic == 2)  # with no p kept (the default)
    big = np.ones(cpu_lab.PARALLEL_MIN, np.float32)
    cpu_lab.binary(big, big, MULTIPLY), cpu_lab.scale_in_place(big.copy(), np.float32(0.5)), cpu_lab.square_sum(big)
    cpu_lab_math.sin(big), cpu_lab_math.gelu_tanh_backward(big, big), cpu_lab_math.pow_scalar_base(np.float32(2), big)
    _WARMED.add(arithmetic)
