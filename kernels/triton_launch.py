"""Host side of the Triton backend: launching kernels, the generic trees, the matmul.

Works on torch tensors that already live on the backend's device (CUDA, or
CPU under TRITON_INTERPRET=1). Every launch goes through `launch`, which
turns off fused multiply-add contraction. Tile sizes are literals here; they
decide how work is spread, never the order of a reduction.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, TypeAlias

import numpy as np  # noqa: E402
import torch  # noqa: E402

from kernels import triton_kernels as tk  # noqa: E402
from kernels.triton_math import MODE  # first: the device check

DEVICE = torch.device("cuda" if MODE == "cuda" else "cpu")

FLAT_BLOCK = 1024  # elements per program of the flat elementwise kernels
ROW_LOG2W = 10  # rows up to 2^10 wide are reduced in one block; wider rows are folded first
FOLD_LOG2G = 3  # tree levels per fold pass (8 rows of the folded axis per program)
FOLD_BW = 128  # lanes per fold program
ROW_ELEMS = 4096  # elements per program in the row kernels: rows per block = ROW_ELEMS // width
MM_BM = 64  # matmul output tile
MM_BN = 64

# A @triton.jit function (triton.JITFunction): Triton ships no type information, so its kernels are Any.
JitKernel: TypeAlias = Any


def launch(kernel: JitKernel, grid: tuple[int, ...], *args: torch.Tensor | int, **constexprs: int) -> None:
    """Run `kernel` over `grid` with fp fusion off (no a*b+c contracted into an fma)."""
    if not all(g > 0 for g in grid):
        return
    # Under TRITON_INTERPRET=1 numpy evaluates the kernel and warns about inf
    # and NaN in lanes that the kernels mask or replace; those are expected.
    with np.errstate(all="ignore"):
        kernel[grid](*args, **constexprs, enable_fp_fusion=False)


def log2_p2(n: int) -> int:
    """log2 of P2(n), the smallest power of two >= n (P2(0) = P2(1) = 1)."""
    return max(n - 1, 0).bit_length()


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for a >= 0, b > 0."""
    return -(-a // b)


def rows_per_block(log2w: int) -> int:
    """Rows of width 2^log2w that one row-kernel program takes (a power of two >= 1)."""
    return max(1, ROW_ELEMS >> log2w)


SCALAR_CACHE_SIZE = 256  # distinct scalar vectors kept on the device (a step uses about 8)
_SCALARS: OrderedDict[tuple[int, bytes], torch.Tensor] = OrderedDict()


def device_scalars(*values: np.float32) -> torch.Tensor:
    """Host float32 scalars (already rounded by numpy) as a device float32 vector.

    The vectors are kept on the device by their bits (the kernels only read
    them), so a repeated scalar (eps, 1/sqrt(D), 1/N, ...) is uploaded once,
    not once per kernel call; at most SCALAR_CACHE_SIZE are kept.
    """
    host = np.array([np.float32(v) for v in values], dtype=np.float32)
    key = (torch.cuda.current_device() if DEVICE.type == "cuda" else -1, host.tobytes())
    cached = _SCALARS.get(key)
    if cached is not None:
        _SCALARS.move_to_end(key)
        return cached
    tensor = torch.from_numpy(host).to(DEVICE)
    _SCALARS[key] = tensor
    if len(_SCALARS) > SCALAR_CACHE_SIZE:
        _SCALARS.popitem(last=False)
    return tensor


def clear_scalar_cache() -> None:
    """Forget the device scalar vectors (tests count uploads from a cold cache)."""
    _SCALARS.clear()


def _fold(
    x: torch.Tensor, a: int, n: int, w: int, strides: tuple[int, int, int], valid: tuple[int, int, int], is_max: bool
) -> tuple[torch.Tensor, int]:
    """Run fold passes over axis n of the view (a, n, w) until one row is left.

    `valid` = (vn, vw, lim): element (a, n, w) exists iff n*vn + w*vw < lim.
    Returns the contiguous (a, 1, w) result as (tensor, w).
    """
    log2n = log2_p2(n)
    s_a, s_n, s_w = strides
    vn, vw, lim = valid
    while True:
        log2g = min(FOLD_LOG2G, log2n)
        nout = 1 << (log2n - log2g)
        y = torch.empty((a, nout, w), dtype=torch.float32, device=x.device)
        launch(
            tk.fold_kernel,
            (a * nout, cdiv(w, FOLD_BW)),
            x,
            y,
            w,
            s_a,
            s_n,
            s_w,
            vn,
            vw,
            lim,
            nout,
            LOG2G=log2g,
            BW=FOLD_BW,
            IS_MAX=is_max,
        )
        x, log2n = y, log2n - log2g
        s_a, s_n, s_w, vn, vw, lim = nout * w, w, 1, 1, 0, nout  # dense from here on
        if log2n == 0:
            return x, w


def reduce_rows(x: torch.Tensor, is_max: bool) -> torch.Tensor:
    """psum (or pmax) of each row of a contiguous (R, C) tensor -> (R,).

    Precondition: C >= 1 for pmax. A row of C = 0 sums to +0.0.
    """
    r, c = x.shape
    if c == 0:
        return torch.zeros(r, dtype=torch.float32, device=x.device)
    log2w = log2_p2(c)
    if log2w > ROW_LOG2W:
        # The top levels of each row's tree combine lanes i, i + 2^ROW_LOG2W, ...:
        # view row r as (chunks, lanes) and fold over the chunks first.
        lanes = 1 << ROW_LOG2W
        x, c = _fold(x, r, cdiv(c, lanes), lanes, (c, lanes, 1), (lanes, 1, c), is_max)
        x, log2w = x.reshape(r, lanes), ROW_LOG2W
    y = torch.empty(r, dtype=torch.float32, device=x.device)
    br = rows_per_block(log2w)
    launch(tk.row_tree_kernel, (cdiv(r, br),), x, y, r, c, c, BR=br, LOG2W=log2w, IS_MAX=is_max)
    return y


def reduce_cols(x: torch.Tensor) -> torch.Tensor:
    """psum down each column of a contiguous (R, C) tensor -> (C,). A column of R = 0 sums to +0.0."""
    r, c = x.shape
    if r == 0:
        return torch.zeros(c, dtype=torch.float32, device=x.device)
    if r == 1:
        return x[0].clone()  # psum of one value is the value
    y, _ = _fold(x, 1, r, c, (0, c, 1), (1, 0, r), is_max=False)
    return y.reshape(c)


def matmul(
    a: torch.Tensor, b: torch.Tensor, layout: str, scale: torch.Tensor | None = None, fused: bool = False
) -> torch.Tensor:
    """The product of layout "nn", "nt" or "tn" on 3-d contiguous (Z, ., .) tensors -> (Z, M, N).

    Precondition: shapes already checked (kernels.validate.check_matmul).
    With `scale` (a 1-element device tensor) every folded value is multiplied by it once.
    `fused`: arithmetic version 2's fold, fma(a, b, acc), instead of version 1's.
    """
    # Both operands go k-major, (Z, K, M) and (Z, K, N), so that step k of the
    # fold loads two contiguous vectors. Transposing is an exact copy.
    if layout in ("nn", "nt"):
        a = a.transpose(1, 2).contiguous()
    if layout == "nt":
        b = b.transpose(1, 2).contiguous()
    z, k, m = a.shape
    n = b.shape[2]
    c = torch.empty((z, m, n), dtype=torch.float32, device=a.device)
    s = scale if scale is not None else c  # never read without HAS_SCALE
    launch(
        tk.matmul_kernel,
        (cdiv(m, MM_BM), cdiv(n, MM_BN), z),
        a,
        b,
        c,
        s,
        m,
        n,
        k,
        k * m,
        1,
        m,
        k * n,
        n,
        1,
        m * n,
        n,
        1,
        BM=MM_BM,
        BN=MM_BN,
        HAS_SCALE=scale is not None,
        FUSED=fused,
    )
    return c


def flat_grid(numel: int) -> tuple[int]:
    """Grid of the flat elementwise kernels for `numel` elements."""
    return (cdiv(numel, FLAT_BLOCK),)
