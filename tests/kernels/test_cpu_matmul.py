"""The `cpu` matmul at the edges of its blocking: bitwise equal to the reference.

kernels/cpu_matmul.py packs A into TILE_ROWS-row panels and B into
TILE_COLS-column panels (the last ones padded with zeros), packs PACK_K values
of k and PACK_GROUP panels per packing task, splits C into (CHUNK_PANELS_A
panels) x (CHUNK_PANELS_B panels) tasks and folds k in chunks of K_BLOCK
through the register micro-kernel. Shapes one below, at and one above each
size, in every layout and batched, must give the reference's bits; and
the fold must run over k left to right across chunk boundaries, which a
cancellation case shows (BLAS, the failing baseline, sums in another order).
"""

from __future__ import annotations

import numba
import numpy as np
import pytest
from kernel_cases import describe_difference

from kernels import KernelInputError, cpu, reference
from kernels import cpu_matmul as mm
from kernels.cpu_matmul import CHUNK_PANELS_A, CHUNK_PANELS_B
from kernels.cpu_pack import K_BLOCK, PACK_GROUP, PACK_K, a_panels_shape, pack_operands, pack_task_count
from kernels.cpu_tile import TILE_COLS, TILE_ROWS
from kernels.cpu_transpose import BLOCK_K

F32 = np.float32
ROW_CHUNK = CHUNK_PANELS_A * TILE_ROWS  # rows of C per task
COL_CHUNK = CHUNK_PANELS_B * TILE_COLS  # columns of C per task


def _operands(rng, m, k, n, layout, batch=None):
    """Random a, b for `layout` with awkward magnitudes (subnormal to large)."""
    lead = () if batch is None else (batch,)
    a_shape = lead + ((k, m) if layout == "tn" else (m, k))
    b_shape = lead + ((n, k) if layout == "nt" else (k, n))
    scale_a = rng.choice(np.array([1e-40, 1e-3, 1.0, 1e3], F32), a_shape)
    scale_b = rng.choice(np.array([1e-3, 1.0, 1e3], F32), b_shape)
    return (rng.standard_normal(a_shape) * scale_a).astype(F32), (rng.standard_normal(b_shape) * scale_b).astype(F32)


FUNCS = {"nn": "matmul", "nt": "matmul_nt", "tn": "matmul_tn"}
EDGE_SHAPES = [
    (1, 1, 1),
    (TILE_ROWS + 1, 5, TILE_COLS + 1),  # one register tile and both edges
    (TILE_ROWS, 2, TILE_COLS),  # exactly one tile
    (TILE_ROWS - 1, 3, TILE_COLS - 1),  # one padded tile
    (ROW_CHUNK - 1, 3, COL_CHUNK + 1),
    (ROW_CHUNK + 1, K_BLOCK + 1, COL_CHUNK - 1),
    (2 * ROW_CHUNK, K_BLOCK, 2 * COL_CHUNK),
    (5, 2 * K_BLOCK + 3, 1),
    (3, PACK_K + 1, PACK_GROUP * TILE_COLS + 1),  # two k chunks and two panel groups of packing
    (PACK_GROUP * TILE_ROWS + 1, PACK_K - 1, 2),
    (3, 0, 4),  # K = 0: every entry is +0.0
    (0, 4, 3),
    (4, 3, 0),
]


@pytest.mark.parametrize("layout", sorted(FUNCS))
@pytest.mark.parametrize("m,k,n", EDGE_SHAPES)
def test_matmul_edges_match_reference(layout, m, k, n):
    rng = np.random.default_rng(m * 7919 + k * 104729 + n)
    a, b = _operands(rng, m, k, n, layout)
    got = getattr(cpu, FUNCS[layout])(a, b)
    assert describe_difference(got, getattr(reference, FUNCS[layout])(a, b)) is None


@pytest.mark.parametrize("layout", sorted(FUNCS))
def test_batched_matmul_matches_reference(layout):
    rng = np.random.default_rng(11)
    a, b = _operands(rng, ROW_CHUNK + 3, 19, COL_CHUNK + 5, layout, batch=3)
    got = getattr(cpu, FUNCS[layout])(a, b)
    assert got.shape == (3, ROW_CHUNK + 3, COL_CHUNK + 5)
    assert describe_difference(got, getattr(reference, FUNCS[layout])(a, b)) is None


def _cancellation(k: int, big_at: tuple[int, int], small_at: int) -> tuple[np.ndarray, np.ndarray]:
    """a (1, k) with +2^25 and -2^25 at big_at and 1.0 at small_at; b all ones (k, 1)."""
    a = np.zeros((1, k), F32)
    a[0, big_at[0]], a[0, big_at[1]], a[0, small_at] = F32(2**25), F32(-(2**25)), F32(1.0)
    return a, np.ones((k, 1), F32)


def test_fold_runs_left_to_right_across_k_blocks():
    # Left fold: 2^25 + 1 rounds back to 2^25 (ulp 4), then -2^25 gives 0.
    # Any order that adds the two big values first gives 1.
    k = K_BLOCK + 2
    a, b = _cancellation(k, (0, K_BLOCK + 1), K_BLOCK - 1)
    assert cpu.matmul(a, b)[0, 0] == 0.0
    assert reference.matmul(a, b)[0, 0] == 0.0
    # The 1.0 after the cancellation survives: the order is by k, not by block.
    a2, _ = _cancellation(k, (0, K_BLOCK - 1), K_BLOCK + 1)
    assert cpu.matmul(a2, b)[0, 0] == 1.0


def test_stock_matmul_is_a_failing_baseline():
    # BLAS splits k over vector lanes: +2^25 and -2^25 (k = 0 and 128, one
    # lane for any lane count up to 128) cancel before the 1.0 of k = 1 (another
    # lane) joins, which gives 1; the left fold gives 0.
    k = 256
    a, b = _cancellation(k, (0, 128), 1)
    assert cpu.matmul(a, b)[0, 0] == 0.0
    stock = [float(np.matmul(a, b)[0, 0])]
    import torch

    stock.append(float(torch.from_numpy(a) @ torch.from_numpy(b)))
    assert 1.0 in stock, f"stock products {stock} happen to fold left to right here"


def test_signed_zero_start_of_fold():
    # The fold starts from +0.0, so a product of -0.0 alone gives +0.0.
    a = np.array([[-0.0]], F32)
    b = np.array([[1.0]], F32)
    assert np.signbit(cpu.matmul(a, b)[0, 0]) == np.signbit(reference.matmul(a, b)[0, 0]) == False  # noqa: E712


@pytest.mark.parametrize(
    "a_shape,b_shape,message",
    [
        ((3, 4), (5, 2), "b has 5 rows, want 4"),
        ((2, 3, 4), (3, 4, 2), "batch size 2"),
        ((3, 4), (2, 4, 2), "want both 2-d or both 3-d"),
    ],
)
def test_bad_shapes_are_refused(a_shape, b_shape, message):
    with pytest.raises(KernelInputError, match=message):
        cpu.matmul(np.zeros(a_shape, F32), np.zeros(b_shape, F32))


def test_non_contiguous_and_wrong_dtype_are_refused():
    a = np.zeros((4, 4), F32)
    with pytest.raises(KernelInputError, match="C-contiguous"):
        cpu.matmul(a.T, a)
    with pytest.raises(KernelInputError, match="float64"):
        cpu.matmul_nt(a, a.astype(np.float64))


@pytest.mark.parametrize("k", [K_BLOCK + 2 * BLOCK_K + 3, 2 * BLOCK_K + 5])  # blocks of K_BLOCK; one block of K
@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_every_cut_of_the_work_gives_the_reference_bits(layout, fused, k):
    # matmul_batched streams B through per-thread buffers (matmul_streamed) where its runs of B panels keep every
    # thread busy, else packs all of B first (matmul_packed); how either cuts C into tasks must change no bit.
    rng = np.random.default_rng(5)
    m, n = ROW_CHUNK + 7, 3 * COL_CHUNK + 40
    a, b = _operands(rng, m, k, n, layout, batch=2)
    want = getattr(reference, FUNCS[layout])(a, b, fused=fused)  # (2, M, N)
    b_t = layout == "nt"
    ap = np.full(a_panels_shape(2, m, k), np.nan, F32)  # the last k block's rows past K must never be read
    mp, nq = ap.shape[2], -(-n // TILE_COLS)
    bp = np.empty((2, nq, k, TILE_COLS), F32)
    k_chunks = -(-k // PACK_K)
    tasks = pack_task_count(2, mp, False, k_chunks), pack_task_count(2, nq, not b_t, k_chunks)
    pack_operands(a, False, b, b_t, ap, bp, *tasks)
    streamed = mm.matmul_streamed_fused if fused else mm.matmul_streamed
    packed = mm.matmul_packed_fused if fused else mm.matmul_packed
    for runs, row_chunks in ((1, 1), (2, 1), (5, 2), (nq, 3), (3, mp)):
        k_rows = k if row_chunks > 1 else ap.shape[3]  # one row chunk packs B a block of A's k at a time
        local = np.full((numba.config.NUMBA_NUM_THREADS, -(-nq // runs), k_rows, TILE_COLS), np.nan, F32)
        got = np.full((2, m, n), np.nan, F32)
        streamed(ap, b, b_t, got, runs, row_chunks, local)
        assert describe_difference(got, want) is None, f"streamed, {runs} runs of B panels, {row_chunks} row chunks"
    for rows, cols in ((1, 1), (2, 3), (mp, nq)):
        got = np.full((2, m, n), np.nan, F32)
        packed(ap, bp, got, mm.FULL, rows, cols)
        assert describe_difference(got, want) is None, f"packed, {rows} x {cols} tasks"


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("layout", sorted(FUNCS))
@pytest.mark.parametrize(
    "m,k,n",
    [
        (2 * TILE_ROWS + 5, K_BLOCK + 2 * BLOCK_K + 3, 3 * TILE_COLS + 7),
        (TILE_ROWS + 1, 3, 1),
        (2 * TILE_ROWS + 1, 0, 40),  # K = 0: one empty k block, which stores +0.0 everywhere
    ],
)
def test_every_row_cut_gives_the_reference_bits(layout, fused, m, k, n):
    # matmul_rows cuts C by rows only, each task packing its own rows of A and all of B a k block at a time:
    # one run, a run per A panel and the cuts between must all give the reference's bits, the scratch's
    # padding never read (NaN there would show).
    rng = np.random.default_rng(11)
    a, b = _operands(rng, m, k, n, layout, batch=2)
    want = getattr(reference, FUNCS[layout])(a, b, fused=fused)  # (2, M, N)
    a_t, b_t = layout == "tn", layout == "nt"
    rows = mm.matmul_rows_fused if fused else mm.matmul_rows
    mp, nq, kl = -(-m // TILE_ROWS), -(-n // TILE_COLS), max(1, min(k, K_BLOCK))
    for runs in sorted({1, 2, mp - 1, mp} - {0}):
        local_a = np.full((numba.config.NUMBA_NUM_THREADS, -(-mp // runs), kl, TILE_ROWS), np.nan, F32)
        local_b = np.full((numba.config.NUMBA_NUM_THREADS, nq, kl, TILE_COLS), np.nan, F32)
        got = np.full((2, m, n), np.nan, F32)
        rows(a, a_t, b, b_t, got, runs, local_a, local_b)
        assert describe_difference(got, want) is None, f"{runs} runs of rows"


@pytest.mark.parametrize(
    "bh,m,n,threads,want",
    [
        (1, 1024, 256, 2, 2),  # one run a thread
        (1, 8192, 256, 2, 8),  # runs of ROWS_CHUNK rows at most
        (1, 1000, 256, 3, 3),  # a multiple of the threads where one more run does it
        (2, 1024, 256, 2, 1),  # two batch elements: one run each
        (1, 1024, 257, 2, 0),  # B wider than ROWS_PANELS_B panels: another kernel's
        (1, TILE_ROWS, 32, 2, 0),  # one row panel cannot keep two threads busy
        (1, 0, 32, 2, 0),
    ],
)
def test_row_grid(bh, m, n, threads, want):
    assert mm.ROWS_PANELS_B * TILE_COLS == 256 and mm.ROWS_CHUNK == 1024  # the cases above assume these
    assert mm.row_grid(bh, m, n, threads) == want


def test_products_into_a_narrow_b_take_the_row_kernel(monkeypatch):
    # matmul_batched hands a FULL product with N <= 256 to matmul_rows (and a causal one never)
    seen = []
    for name in ("matmul_rows", "matmul_rows_fused"):
        kernel = getattr(mm, name)
        monkeypatch.setattr(mm, name, lambda *args, kernel=kernel, name=name: seen.append(name) or kernel(*args))
    rng = np.random.default_rng(2)
    a, b = _operands(rng, 100, 40, 256, "nn")
    assert describe_difference(cpu.matmul(a, b, fused=True), reference.matmul(a, b, fused=True)) is None
    assert seen == ["matmul_rows_fused"]
    cpu.matmul(a, np.ascontiguousarray(np.concatenate([b, b[:, :1]], axis=1)))
    assert seen == ["matmul_rows_fused"]  # N = 257: not the row kernel
