"""kernels/lab_math.py's functions on the `cpu` backend: the same names, operations, order and bits, compiled.

lab_math writes each function as a chain of numpy float32 ufuncs: the
definition, and what the reference backend runs. Each ufunc is one pass over
the array and a call from Python, so a RoPE table of (T, D/2) values (sin,
cos and 10000 ** x, recomputed by the lab's model every layer) cost 120-220
us a call in an 11m step, and GELU's dozen passes over a (B, T, 4C)
activation ran on one thread. Here each element goes through the same
float32 operations (one rounding each, never contracted, the no-FMA audit
holds that) in one compiled loop on every thread; exp is kernels/cpu_scalar's
exp_f32 and log_f32, the same bits as the reference's (sections 3.1, 3.2); arrays below PARALLEL_MIN
elements stay on the calling thread. Inputs are C-contiguous float32 arrays
of any shape, as lab_math's (a strided one is refused, with lab_math's own
message, as all bad input is); a new float32 array out.
tests/lab/test_cpu_lab_math.py holds every function bitwise to lab_math.
"""

from __future__ import annotations

import math
import types
from typing import Any

import numpy as np
from numba import njit, prange
from numba.extending import overload

from kernels import KernelInputError, validate
from kernels import constants as K
from kernels.cpu_scalar import exp_f32, log_f32
from kernels.lab_math import (
    COS_C,
    GELU_K0,
    GELU_K1,
    GELU_K3,
    PIO2_1,
    PIO2_2,
    PIO2_3,
    PIO2_4,
    SIN_C,
    TANH_C,
    TANH_SPLIT,
    TRIG_LIMIT,
    TWO_OVER_PI,
)

F32 = np.float32
ZERO, HALF, ONE, TWO, SHIFTER = K.ZERO, K.HALF, K.ONE, K.TWO, K.SHIFTER
NAN = F32(np.nan)
SIN, COS, TANH, GELU, RSQRT, RECIPROCAL, SIGMOID = range(7)  # _unary_flat's functions


@njit(inline="always")
def _horner5(z, c):
    """c[0] then q = q * z + c[i] (lab_math._horner over a five-coefficient tuple)."""
    q = c[0]
    q = q * z + c[1]
    q = q * z + c[2]
    q = q * z + c[3]
    return q * z + c[4]


@njit(inline="always")
def _trig(x, shift):
    """lab_math._trig of one float32: sin (shift 0) or cos (shift 1)."""
    bad = not (abs(x) <= TRIG_LIMIT)  # NaN compares false: bad too
    xc = ZERO if bad else x
    t = xc * TWO_OVER_PI
    n = (t + SHIFTER) - SHIFTER
    r = (((xc - n * PIO2_1) - n * PIO2_2) - n * PIO2_3) - n * PIO2_4
    q = (np.int32(n) + np.int32(shift)) & np.int32(3)
    z = r * r
    s = r + (r * z) * _horner5(z, SIN_C)
    c = ONE - (z * HALF - (z * z) * _horner5(z, COS_C))
    y = s if (q & np.int32(1)) == 0 else c
    y = -y if q >= 2 else y
    return NAN if bad else y


@njit(inline="always")
def _tanh(x):
    """lab_math._tanh of one float32."""
    a = abs(x)
    z = a * a
    q = TANH_C[0]
    for i in range(1, 6):
        q = q * z + TANH_C[i]
    small = a + (a * z) * q
    big = ONE - TWO / (exp_f32(a * TWO) + ONE)
    y = np.float32(math.copysign(small if a < TANH_SPLIT else big, x))  # exact through float64 and back
    return x if x != x else y


@njit(inline="always")
def _gelu(x):
    t = _tanh(GELU_K0 * (x + GELU_K1 * ((x * x) * x)))
    return (HALF * x) * (ONE + t)


# unary_flat's functions: lab_math's of one float32, the one statement of each (_function runs them in Python,
# its overload compiles the literal op's alone)
_FUNCTIONS = {
    SIN: lambda x: _trig(x, 0),
    COS: lambda x: _trig(x, 1),
    TANH: lambda x: _tanh(x),
    GELU: lambda x: _gelu(x),
    RSQRT: lambda x: ONE / np.sqrt(x),
    RECIPROCAL: lambda x: ONE / x,
    SIGMOID: lambda x: ONE / (ONE + exp_f32(-x)),
}
_COMPILED_FUNCTIONS = {op: njit(inline="always")(f) for op, f in _FUNCTIONS.items()}


def _function(op, x):
    """lab_math's function `op` of one float32 (_FUNCTIONS). Compiled, the overload below generates the code
    of a literal op alone (numba types a constant argument as a literal) where this is inlined, not all
    seven (seven copies of all seven made unary_flat take 20 s to compile)."""
    return _FUNCTIONS[op](x)


@overload(_function, inline="always", prefer_literal=True)
def _function_literal(op, x):
    """_function's code for the literal op."""
    f = _COMPILED_FUNCTIONS.get(getattr(op, "literal_value", None))
    return None if f is None else lambda op, x: f(x)


@njit(inline="always")
def _map(op, x, out):
    for i in prange(x.shape[0]):
        out[i] = _function(op, x[i])


@njit(parallel=True, cache=True)
def unary_flat(op, x, out):
    """out[i] = function op (SIN, COS, TANH, GELU, RSQRT, RECIPROCAL, SIGMOID) of x[i], flat float32 arrays."""
    if op == SIN:
        _map(SIN, x, out)
    elif op == COS:
        _map(COS, x, out)
    elif op == TANH:
        _map(TANH, x, out)
    elif op == GELU:
        _map(GELU, x, out)
    elif op == RSQRT:
        _map(RSQRT, x, out)
    elif op == RECIPROCAL:
        _map(RECIPROCAL, x, out)
    else:
        _map(SIGMOID, x, out)


@njit(parallel=True, cache=True)
def gelu_tanh_backward_flat(x, dy, out):
    """lab_math.gelu_tanh_backward per element of flat float32 arrays."""
    for i in prange(x.shape[0]):
        v = x[i]
        x2 = v * v
        t = _tanh(GELU_K0 * (v + GELU_K1 * (x2 * v)))
        left = HALF * (ONE + t)
        right = ((HALF * v) * (ONE - t * t)) * (GELU_K0 * (ONE + GELU_K3 * x2))
        out[i] = dy[i] * (left + right)


@njit(parallel=True, cache=True)
def exp_scaled_flat(x, c, out):
    """out[i] = exp(x[i] * c), the product rounded once: lab_math.pow_scalar_base with c = log(base)."""
    for i in prange(x.shape[0]):
        out[i] = exp_f32(x[i] * c)


# The same loops on the calling thread alone, for arrays below PARALLEL_MIN elements: waking the other threads
# cost more than a RoPE table's few thousand elements (cos of (256, 16): 32 us a call in an 11m step).
PARALLEL_MIN = 1 << 15


def serial_twin(kernel: Any, name: str) -> Any:
    """kernel's Python function compiled again to run on the calling thread alone (prange as range; IEEE
    division, as in the parallel loops), cached under its own `name`: numba's disk cache knows a function by
    its module, qualified name and first line, not by its options, so a plain twin of the same function
    loaded whichever of the two had compiled first (the lab's large arrays then ran on one thread, or its
    small ones paid for waking the others)."""
    py = kernel.py_func
    twin = types.FunctionType(py.__code__, py.__globals__, name, py.__defaults__, py.__closure__)
    twin.__qualname__ = name
    twin.__doc__ = py.__doc__
    return njit(cache=True, error_model="numpy")(twin)


_unary_serial = serial_twin(unary_flat, "_unary_serial")
_gelu_backward_serial = serial_twin(gelu_tanh_backward_flat, "_gelu_backward_serial")
_exp_scaled_serial = serial_twin(exp_scaled_flat, "_exp_scaled_serial")


@njit(cache=True)
def _log_one(x):
    """log of one float32 (section 3.2: the reference's bits)."""
    return log_f32(x)


def _flat(x: np.ndarray) -> np.ndarray:
    """x's values as one row: a view (validate has checked that x is C-contiguous)."""
    return x.reshape(-1)


def _unary(x: np.ndarray, op: int) -> np.ndarray:
    validate.check_elementwise(x)
    out = np.empty(x.shape, F32)
    (unary_flat if x.size >= PARALLEL_MIN else _unary_serial)(op, _flat(x), out.reshape(-1))
    return out


def sin(x: np.ndarray) -> np.ndarray:
    """sin(x), |x| <= 65536 (NaN outside, and for inf and NaN); any shape."""
    return _unary(x, SIN)


def cos(x: np.ndarray) -> np.ndarray:
    """cos(x), |x| <= 65536 (NaN outside, and for inf and NaN); any shape."""
    return _unary(x, COS)


def tanh(x: np.ndarray) -> np.ndarray:
    """tanh(x), any shape (+-1 beyond |x| ~ 9, NaN for NaN, -0.0 for -0.0)."""
    return _unary(x, TANH)


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """(0.5 x) (1 + tanh(K0 (x + K1 ((x x) x)))): GELU's tanh form in this order."""
    return _unary(x, GELU)


def gelu_tanh_backward(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """dy (0.5 (1 + t) + ((0.5 x) (1 - t t)) (K0 (1 + K3 x x))), t = tanh of the forward's inner value."""
    validate.check_pair(x, "x", dy, "dy")
    out = np.empty(x.shape, F32)
    kernel = gelu_tanh_backward_flat if x.size >= PARALLEL_MIN else _gelu_backward_serial
    kernel(_flat(x), _flat(dy), out.reshape(-1))
    return out


def reciprocal(x: np.ndarray) -> np.ndarray:
    """1 / x, one rounding."""
    return _unary(x, RECIPROCAL)


def rsqrt(x: np.ndarray) -> np.ndarray:
    """1 / sqrt(x): the correctly rounded root, then one division (two roundings)."""
    return _unary(x, RSQRT)


def sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)), the same s as silu_backward's (section 3.3)."""
    return _unary(x, SIGMOID)


def pow_scalar_base(base: np.float32, x: np.ndarray) -> np.ndarray:
    """base ** x as exp(x * log(base)) for a float32 base > 0: log once on the host value, then exp per element."""
    validate.check_elementwise(x)
    if not (base > 0 and np.isfinite(base)):
        raise KernelInputError(f"pow with a scalar base needs a finite base > 0, got {float(base)!r}")
    log_base = F32(_log_one(F32(base)))  # the reference's log of the base (numba returns it as a Python float)
    out = np.empty(x.shape, F32)
    (exp_scaled_flat if x.size >= PARALLEL_MIN else _exp_scaled_serial)(_flat(x), log_base, out.reshape(-1))
    return out
