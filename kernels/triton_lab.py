"""Op table 1's elementwise functions on the triton backend: kernels/lab_math.py's list, same names, same bits.

Each function takes a float32 numpy array (copied to the device, the result
copied back as numpy) or a tensor on the backend's device (kept there), as
kernels/triton_backend.py's functions do, and refuses what lab_math refuses
(kernels.validate; pow needs a finite base > 0). The kernels are in
kernels/triton_lab_kernels.py; tests/kernels/test_triton_lab.py holds them
bitwise equal to lab_math under TRITON_INTERPRET=1.

Importing needs CUDA or TRITON_INTERPRET=1, as for kernels.triton_backend.
"""

from __future__ import annotations

from kernels.triton_math import MODE  # first: raises ImportError without a device

if MODE == "compile":
    raise ImportError("triton backend needs CUDA or TRITON_INTERPRET=1 (P2PAUDIT_TRITON_COMPILE_ONLY=1 only compiles)")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from kernels import KernelInputError, reference, validate  # noqa: E402
from kernels import triton_io as io  # noqa: E402
from kernels import triton_lab_kernels as tk  # noqa: E402
from kernels import triton_launch as L  # noqa: E402
from kernels.triton_io import Arr  # noqa: E402

F32 = np.float32
ZERO = F32(0.0)  # the factor of the kernels that read none


def _unary(x: Arr, op: int, c: np.float32 = ZERO) -> Arr:
    """lab_unary_kernel's function `op` of a float32 array of any shape (c: EXP_SCALED's factor)."""
    validate.check_elementwise(io.checkable(x, "x"))
    tx = io.device_tensor(x)
    y = torch.empty_like(tx)
    scalar = L.device_scalars(c)
    L.launch(tk.lab_unary_kernel, L.flat_grid(tx.numel()), tx, y, scalar, tx.numel(), OP=op, BLOCK=L.FLAT_BLOCK)
    return io.to_caller(y, x)


def sin(x: Arr) -> Arr:
    """sin(x), |x| <= 65536 (NaN outside, and for inf and NaN); any shape."""
    return _unary(x, tk.SIN)


def cos(x: Arr) -> Arr:
    """cos(x), |x| <= 65536 (NaN outside, and for inf and NaN); any shape."""
    return _unary(x, tk.COS)


def tanh(x: Arr) -> Arr:
    """tanh(x), any shape (+-1 beyond |x| ~ 9, NaN for NaN, -0.0 for -0.0)."""
    return _unary(x, tk.TANH)


def gelu_tanh(x: Arr) -> Arr:
    """(0.5 x) (1 + tanh(K0 (x + K1 ((x x) x)))): GELU's tanh form in this order."""
    return _unary(x, tk.GELU)


def gelu_tanh_backward(x: Arr, dy: Arr) -> Arr:
    """dy (0.5 (1 + t) + ((0.5 x) (1 - t t)) (K0 (1 + K3 x x))), t = tanh of the forward's inner value."""
    io.torch_mode(x, dy)  # refuses a mix; the result comes back in the kind of x
    validate.check_pair(io.checkable(x, "x"), "x", io.checkable(dy, "dy"), "dy")
    tx, tdy = io.device_tensor(x), io.device_tensor(dy)
    dx = torch.empty_like(tx)
    L.launch(tk.gelu_backward_kernel, L.flat_grid(tx.numel()), tx, tdy, dx, tx.numel(), BLOCK=L.FLAT_BLOCK)
    return io.to_caller(dx, x)


def reciprocal(x: Arr) -> Arr:
    """1 / x, one rounding (div_rn)."""
    return _unary(x, tk.RECIPROCAL)


def rsqrt(x: Arr) -> Arr:
    """1 / sqrt(x): sqrt_rn, then div_rn (two roundings)."""
    return _unary(x, tk.RSQRT)


def sigmoid(x: Arr) -> Arr:
    """1 / (1 + exp(-x)), the same s as silu_backward's (section 3.3)."""
    return _unary(x, tk.SIGMOID)


def pow_scalar_base(base: np.float32, x: Arr) -> Arr:
    """base ** x as exp(x * log(base)) for a float32 base > 0: log once on the host (section 3.2), exp per element."""
    validate.check_elementwise(io.checkable(x, "x"))
    if not (base > 0 and np.isfinite(base)):
        raise KernelInputError(f"pow with a scalar base needs a finite base > 0, got {float(base)!r}")
    log_base = reference.log(np.array(base, dtype=F32))
    return _unary(x, tk.EXP_SCALED, F32(log_base))
