"""Matrix products of the `cpu` backend (docs/arithmetic.md 2.3), batched or not.

c[i, j] = left fold over k = 0..K-1 of a[i, k] * b[k, j], starting from +0.0:
`acc + (a * b)` per k in arithmetic version 1 (matmul_streamed, matmul_packed),
`fma(a, b, acc)` in version 2 (the `_fused` kernels); one source, two compiled kernels each, since
`fused` is a literal each entry point hands down to kernels/cpu_tile.py and
kernels/cpu_scalar.mac_f32. Only the k order is pinned, so the kernel is free
to choose everything else:

- Both operands are packed into panels (kernels/cpu_pack.py): A into panels
  of TILE_ROWS rows stored k-major, in blocks of KL = min(K, K_BLOCK)
  values of k (KB, MP, KL, TILE_ROWS), B into panels of TILE_COLS columns (K,
  TILE_COLS), whatever layout each was given in (a or aᵀ, b or bᵀ), the last
  panel padded with zeros. So the micro-kernel reads
  both operands of one k contiguously, every tile of C is a whole register
  tile (the padded rows and columns are computed and thrown away), and no
  operand row lands on the cache set of the next one (a row stride of 4 KiB
  would). A is packed once per call into a buffer kept per thread between
  calls (_Scratch: a fresh one of hundreds of MB, the head's products, is a
  page fault per page on every call).
- matmul_rows (causal = FULL and B at most ROWS_PANELS_B panels wide, N <=
  256: a model's products into its width): a task is one run of C's rows,
  at most ROWS_CHUNK of them, with every column, in one batch element; per
  k block its thread packs its own rows of A and the whole of B's block into
  buffers of its own (both stay in L2) and folds them. A is read once, by
  the thread that needs it, and never written out packed: against
  matmul_streamed (each thread's run of B columns over all of A's panels,
  packed first) the N = 256 products of a model of width 256 took 3-15%
  less (docs/benchmarks.md); where B is wider each thread packing all of it
  costs more than it saves.
- matmul_streamed (every other product with causal = FULL whose B panels keep
  every thread busy): a task is one run of at most CHUNK_PANELS_B B panels
  over all of C's rows, in one batch element; its thread packs the run into
  a buffer of its own, which stays in L2 while the task's row chunks
  (CHUNK_PANELS_A A panels each) fold against it. Packing all of B first
  wrote it to memory and read it back (a third of a head product's fold).
- matmul_packed (the causal attention products, and B too narrow for the
  threads): both operands packed first; a task is one (CHUNK_PANELS_A A
  panels) x (CHUNK_PANELS_B B panels) block of C in one batch element.
- Runs and chunks are cut as evenly as the counts allow, and their number a
  multiple of the threads where one more does it (task_grid, stream_grid):
  prange hands each thread an equal run of tasks. Outputs are independent.
- The task keeps its accumulators in a buffer (the folds start at +0.0),
  tile by tile: (column panels, rows, TILE_COLS), so each register tile's
  12 x 32 accumulators are 1.5 KiB in a row, and runs k as the OUTER loop,
  K_BLOCK (256) values at a time: for each B panel of the block (K_BLOCK x
  32 floats, 32 KiB, stays in L1) every A panel of the task's rows goes
  through the register micro-kernel of kernels/cpu_tile.py, which loads its
  12 x 32 tile of accumulators, folds the block's k (version 1: per k two
  panel vectors, twelve broadcasts of A, 24 vmulps and 24 vaddps, no FMA;
  version 2: 24 vfmadd231ps), and stores the tile. The block's A panels
  stream from L2, one after the other. A block of 256 rather than 128 halves
  the tiles' loads and stores; with the micro-kernel's prefetch of A it
  measured a percent or two better, within this machine's noise.
  Each output gets exactly one fold step per k, k increasing, from +0.0: the
  left fold of the document.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numba
import numpy as np
from numba import njit, prange

from kernels.cpu_pack import (
    K_BLOCK,
    PACK_K,
    a_panels_shape,
    pack_k_major,
    pack_operands,
    pack_task_count,
    pack_transposed,
)
from kernels.cpu_scalar import bits_from_f32, mac_f32
from kernels.cpu_tile import TILE_COLS, TILE_ROWS, fold_tile, fold_tile_into

CHUNK_PANELS_A = 16  # A panels (of TILE_ROWS rows) per task: 192 rows
CHUNK_PANELS_B = 12  # B panels (of TILE_COLS columns) per task: 384 columns
ROWS_PANELS_B = 8  # B panels up to which a product cuts C by rows only (matmul_rows): N <= 256
ROWS_CHUNK = 1024  # C's rows per matmul_rows task at most (768-1,536 measured alike on M = 8,192)
NEG_ZERO_BITS = -(2**31)  # -0.0 as an int32


# What a causal attention product may leave out (`causal` of matmul_packed). Each is exact only under
# the caller's preconditions (kernels/cpu.py checks them, else asks for FULL); a "tile" is the register
# tile of rows [i0, i1) and columns [j0, j0 + TILE_COLS):
FULL = 0  # every k of every output
K_UPTO_ROW = 1  # a tile folds k < i1 only: A[i, k] is +-0 for k > i, B finite
K_FROM_ROW = 2  # a tile folds k >= i0 only: A[i, k] is +-0 for k < i, B finite
COLS_UPTO_ROW = 3  # a tile whose columns all lie past its last row is not computed (left +0.0)


@njit(inline="always")
def _tile_k_range(causal, i0, j0, m, k_count):
    """The k range [lo, hi) that the tile at (i0, j0) folds under `causal` (A has m rows)."""
    i1 = min(m, i0 + TILE_ROWS)  # rows [i0, i1) are real
    if causal == K_UPTO_ROW:
        return 0, min(k_count, i1)
    if causal == K_FROM_ROW:
        return min(k_count, i0), k_count
    if causal == COLS_UPTO_ROW and j0 > i1 - 1:
        return 0, 0
    return 0, k_count


@njit(parallel=True, cache=True)
def matmul_packed(ap, bp, c, causal, row_chunks, col_chunks):
    """_matmul_packed in arithmetic version 1: acc + (a * b) per k."""
    _matmul_packed(ap, bp, c, causal, row_chunks, col_chunks, False)


@njit(parallel=True, cache=True)
def matmul_packed_fused(ap, bp, c, causal, row_chunks, col_chunks):
    """_matmul_packed in arithmetic version 2: fma(a, b, acc) per k."""
    _matmul_packed(ap, bp, c, causal, row_chunks, col_chunks, True)


def task_grid(bh: int, mp: int, nq: int, threads: int) -> tuple[int, int]:
    """(row_chunks, col_chunks): how the A panels (mp) and B panels (nq) of C are cut into tasks.

    At most CHUNK_PANELS_A A panels and CHUNK_PANELS_B B panels a task, the
    panels split as evenly as the counts allow (_chunk_bounds), and, where
    cutting one more row chunk can do it, bh * row_chunks * col_chunks a
    multiple of `threads`: prange hands each thread an equal run of tasks, so
    tasks of unequal size, or one task too many, leave a thread idle (16, 16,
    16, 16, 16, 6 panels with 2 threads: one ran 1,608 tiles, the other
    1,144). The grid changes no bit: each output's fold is the same in any
    task.
    """
    rows = max(1, -(-mp // CHUNK_PANELS_A))
    cols = max(1, -(-nq // CHUNK_PANELS_B))
    if threads > 1:
        for extra in range(threads):
            if (bh * (rows + extra) * cols) % threads == 0 and rows + extra <= mp:
                return rows + extra, cols
    return rows, cols


@njit(inline="always")
def _chunk_bounds(index, chunks, count):
    """[lo, hi) of chunk `index` of `count` items cut into `chunks` runs whose sizes differ by at most one."""
    return index * count // chunks, (index + 1) * count // chunks


@njit(inline="always")
def _matmul_packed(ap, bp, c, causal, row_chunks, col_chunks, fused):
    """C (BH, M, N), written into c, from the panels of pack_operands (ap of A (BH, M, K), bp of B (BH, K, N)).

    A task is one (batch element, run of A panels, run of B panels) block of
    C, the runs cut by task_grid's (row_chunks, col_chunks); it folds k from
    0 to K-1, KL values at a time, into accumulators that start at +0.0.
    Preconditions: ap and bp come from one pack_operands call of operands
    with M rows and N columns; 1 <= row_chunks <= ap.shape[2], 1 <= col_chunks
    <= bp.shape[1].

    `causal` (FULL, K_UPTO_ROW, K_FROM_ROW, COLS_UPTO_ROW) leaves out terms
    that cannot change the fold: a fold starts at +0.0 and a round-to-nearest
    sum is -0.0 only when both addends are, so no accumulator is ever -0.0
    and adding a product +-0.0 (a zero of A times a finite B) changes nothing,
    wherever in the fold it falls. The terms kept are added in the same
    increasing k order.

    Version 2 (fused) differs in one place: fma(a, b, +0.0) of a negative
    product too small for float32 rounds to -0.0, so an accumulator can be
    -0.0 there, and a later term +0.0 (a masked +-0.0 times a finite b of the
    same sign) would turn it into +0.0. Leading terms are still safe to leave
    out (the accumulator is +0.0 until the first one kept), trailing ones
    (K_UPTO_ROW) are not: an accumulator that ends -0.0 is carried through the
    terms left out, in order (_finish_negative_zeros); they are rare.
    """
    bh, n_kb, mp, kl = ap.shape[0], ap.shape[1], ap.shape[2], ap.shape[3]
    nq, k_count = bp.shape[1], bp.shape[2]
    m = c.shape[1]
    per_z = row_chunks * col_chunks
    for task in prange(bh * per_z):
        # Row chunks vary fastest: consecutive tasks share their B panels.
        z = task // per_z
        cc = (task - z * per_z) // row_chunks
        rc = task - z * per_z - cc * row_chunks
        p_lo, p_hi = _chunk_bounds(rc, row_chunks, mp)
        q_lo, q_hi = _chunk_bounds(cc, col_chunks, nq)
        acc = np.zeros((q_hi - q_lo, (p_hi - p_lo) * TILE_ROWS, TILE_COLS), np.float32)  # folds start at +0.0
        for kb in range(n_kb):
            k0 = kb * kl
            k1 = min(k_count, k0 + kl)
            for q in range(q_lo, q_hi):
                strip = bp[z, q, k0:k1]  # (k1 - k0, TC)
                tiles = acc[q - q_lo]
                j0 = q * TILE_COLS
                for p in range(p_lo, p_hi):
                    lo, hi = _tile_k_range(causal, p * TILE_ROWS, j0, m, k_count)
                    s, e = max(lo, k0), min(hi, k1)
                    if s < e:
                        fold_tile(ap[z, kb, p], strip, tiles, (p - p_lo) * TILE_ROWS, 0, s - k0, e - s, fused)
        if fused and causal == K_UPTO_ROW:
            for q in range(q_lo, q_hi):
                for p in range(p_lo, p_hi):
                    hi = _tile_k_range(causal, p * TILE_ROWS, q * TILE_COLS, m, k_count)[1]
                    if hi < k_count:
                        _finish_negative_zeros(ap[z], p, bp[z, q], acc[q - q_lo], (p - p_lo) * TILE_ROWS, hi)
        _store_tiles(c, z, acc, p_lo * TILE_ROWS, q_lo * TILE_COLS)


@njit(inline="always")
def _store_tiles(c, z, acc, i0, j0):
    """c[z, i0 + i, j0 + q * TILE_COLS + j] = acc[q, i, j], clipped to C's rows and columns (the padding dropped)."""
    rows = min(c.shape[1] - i0, acc.shape[1])
    for q in range(acc.shape[0]):
        x0 = j0 + q * TILE_COLS
        jw = min(TILE_COLS, c.shape[2] - x0)
        for i in range(rows):
            dst = c[z, i0 + i, x0 : x0 + jw]  # (jw,)
            src = acc[q, i]
            for j in range(jw):
                dst[j] = src[j]


@njit(parallel=True, cache=True)
def matmul_streamed(ap, b, b_transposed, c, col_chunks, row_chunks, local):
    """_matmul_streamed in arithmetic version 1: acc + (a * b) per k."""
    _matmul_streamed(ap, b, b_transposed, c, col_chunks, row_chunks, local, False)


@njit(parallel=True, cache=True)
def matmul_streamed_fused(ap, b, b_transposed, c, col_chunks, row_chunks, local):
    """_matmul_streamed in arithmetic version 2: fma(a, b, acc) per k."""
    _matmul_streamed(ap, b, b_transposed, c, col_chunks, row_chunks, local, True)


@njit(inline="always")
def _matmul_streamed(ap, b, b_transposed, c, col_chunks, row_chunks, local, fused):
    """C (BH, M, N) into c from A's panels (pack_operands) and B as given: each task packs its own B panels.

    A task is one column block of C in one batch element, all its rows: a
    run of B panels (col_chunks runs, cut evenly) that the task's thread packs
    into its own buffer local[thread], folded against the A panels,
    row_chunks runs of them, k in blocks of KL (A's). With one row chunk (C's rows
    fit the accumulator budget, stream_rows) the run is packed KL values
    of k at a time, just before the fold uses them, so it stays in L1 and L2
    whatever K is (a head product's K is the vocabulary); with several, the
    whole run is packed once and each row chunk folds against it. Packing all
    of B first (_matmul_packed) wrote it to memory and read it back. A tile's
    first k block starts at +0.0 in the registers, and its last ends in C
    where the tile lies whole within C (_visit): no accumulator buffer to
    clear and copy out but for the edges. The same folds in the same k order
    as _matmul_packed with FULL.
    Preconditions: ap is A's packing (BH, KB, MP, KL, TILE_ROWS); b is (BH, K, N),
    or (BH, N, K) when b_transposed; 1 <= col_chunks <= ceil(N / TILE_COLS),
    1 <= row_chunks <= MP; local (threads, >= the panels of a run, KL or
    more rows of k (K with several row chunks), TILE_COLS).
    """
    bh, n_kb, mp, kl = ap.shape[0], ap.shape[1], ap.shape[2], ap.shape[3]
    k_count = b.shape[2] if b_transposed else b.shape[1]
    n = c.shape[2]
    nq = (n + TILE_COLS - 1) // TILE_COLS
    chunk_rows = (mp + row_chunks - 1) // row_chunks * TILE_ROWS
    for task in prange(bh * col_chunks):
        z = task // col_chunks
        q_lo, q_hi = _chunk_bounds(task - z * col_chunks, col_chunks, nq)
        x0, run = q_lo * TILE_COLS, q_hi - q_lo
        me = numba.get_thread_id()
        panels = local[me : me + 1]  # (1, CQ, KL, TC): this thread's
        acc = np.empty((run, chunk_rows, TILE_COLS), np.float32)
        by_block = row_chunks == 1  # B packed a k block at a time, just before its fold; else the whole run once
        if not by_block:
            _pack_run(b, b_transposed, z, x0, n, 0, k_count, run, panels)
        for rc in range(row_chunks):
            p_lo, p_hi = _chunk_bounds(rc, row_chunks, mp)
            for kb in range(n_kb):
                k0 = kb * kl
                k1 = min(k_count, k0 + kl)
                if by_block:
                    _pack_run(b, b_transposed, z, x0, n, k0, k1, run, panels)  # k0..k1 as rows 0..k1-k0
                for q in range(run):
                    strip = panels[0, q, : k1 - k0] if by_block else panels[0, q, k0:k1]
                    for p in range(p_lo, p_hi):
                        _visit(
                            ap[z, kb, p],
                            strip,
                            acc[q],
                            (p - p_lo) * TILE_ROWS,
                            c,
                            z,
                            p * TILE_ROWS,
                            x0 + q * TILE_COLS,
                            k1 - k0,
                            kb == 0,
                            kb == n_kb - 1,
                            fused,
                        )
            _store_edges(c, z, acc[:, : (p_hi - p_lo) * TILE_ROWS], p_lo * TILE_ROWS, x0)


@njit(parallel=True, cache=True)
def matmul_rows(a, a_transposed, b, b_transposed, c, row_chunks, local_a, local_b):
    """_matmul_rows in arithmetic version 1: acc + (a * b) per k."""
    _matmul_rows(a, a_transposed, b, b_transposed, c, row_chunks, local_a, local_b, False)


@njit(parallel=True, cache=True)
def matmul_rows_fused(a, a_transposed, b, b_transposed, c, row_chunks, local_a, local_b):
    """_matmul_rows in arithmetic version 2: fma(a, b, acc) per k."""
    _matmul_rows(a, a_transposed, b, b_transposed, c, row_chunks, local_a, local_b, True)


@njit(inline="always")
def _matmul_rows(a, a_transposed, b, b_transposed, c, row_chunks, local_a, local_b, fused):
    """C (BH, M, N) into c from A (BH, M, K) (or aᵀ (BH, K, M)) and B (BH, K, N) (or bᵀ (BH, N, K)) as given.

    A task is one run of C's rows (row_chunks runs of A panels per batch
    element, cut evenly) and all of its columns. For each k block (KL =
    min(K, K_BLOCK) values, at least one) the task's thread packs its rows
    of A into local_a[thread] and every B panel into local_b[thread], then
    folds each (B panel, A panel) tile through _visit: the first block
    starts at +0.0, the last ends in C. The same folds in the same k order
    as _matmul_streamed. Preconditions: 1 <= row_chunks <= ceil(M /
    TILE_ROWS); local_a (threads, >= the panels of a run, >= KL, TILE_ROWS),
    local_b (threads, >= ceil(N / TILE_COLS), >= KL, TILE_COLS).
    """
    bh, m, n = c.shape[0], c.shape[1], c.shape[2]
    k_count = b.shape[2] if b_transposed else b.shape[1]
    kl = max(1, min(k_count, K_BLOCK))
    n_kb = max(1, (k_count + kl - 1) // kl)  # K = 0: one empty block, which stores +0.0
    mp = (m + TILE_ROWS - 1) // TILE_ROWS
    nq = (n + TILE_COLS - 1) // TILE_COLS
    for task in prange(bh * row_chunks):
        z = task // row_chunks
        p_lo, p_hi = _chunk_bounds(task - z * row_chunks, row_chunks, mp)
        me = numba.get_thread_id()
        a_panels = local_a[me : me + 1]  # (1, run, KL, TR): this thread's
        b_panels = local_b[me : me + 1]  # (1, NQ, KL, TC)
        acc = np.empty((nq, (p_hi - p_lo) * TILE_ROWS, TILE_COLS), np.float32)
        for kb in range(n_kb):
            k0 = kb * kl
            k1 = min(k_count, k0 + kl)
            _pack_run(a, not a_transposed, z, p_lo * TILE_ROWS, m, k0, k1, p_hi - p_lo, a_panels)  # k0.. as rows 0..
            _pack_run(b, b_transposed, z, 0, n, k0, k1, nq, b_panels)
            for q in range(nq):
                strip = b_panels[0, q, : k1 - k0]
                for p in range(p_lo, p_hi):
                    _visit(
                        a_panels[0, p - p_lo, : k1 - k0],
                        strip,
                        acc[q],
                        (p - p_lo) * TILE_ROWS,
                        c,
                        z,
                        p * TILE_ROWS,
                        q * TILE_COLS,
                        k1 - k0,
                        kb == 0,
                        kb == n_kb - 1,
                        fused,
                    )
        _store_edges(c, z, acc, p_lo * TILE_ROWS, 0)


def row_grid(bh: int, m: int, n: int, threads: int) -> int:
    """How many runs of rows matmul_rows cuts each batch element's C into (0: not matmul_rows' product).

    As few as keep a run within ROWS_CHUNK rows, then (where one more run per
    batch element does it) bh * runs a multiple of `threads`. 0 where B is
    wider than ROWS_PANELS_B panels or the row panels cannot keep every thread busy.
    """
    mp = -(-m // TILE_ROWS)
    if -(-n // TILE_COLS) > ROWS_PANELS_B or bh * mp < threads or m == 0 or n == 0:
        return 0
    runs = min(mp, max(1, -(-m // ROWS_CHUNK)))
    while (bh * runs) % threads and runs < mp:
        runs += 1
    return runs


@njit(inline="always")
def _visit(apanel, strip, tiles, i0, c, z, ci, cj, kw, first, last, fused):
    """Fold one k block (kw values) into the tile at (i0, 0) of `tiles`, which is C's tile at (ci, cj).

    The first block starts the tile at +0.0 (the fold's start); the last
    ends a tile that lies whole within C in C itself, and any other in
    `tiles` (_store_edges copies the part within C). Four call sites: which
    start and end are compiled must be literals.
    """
    if last and ci + TILE_ROWS <= c.shape[1] and cj + TILE_COLS <= c.shape[2]:
        if first:
            fold_tile_into(apanel, strip, tiles, i0, 0, c[z], ci, cj, 0, kw, fused, True)
        else:
            fold_tile_into(apanel, strip, tiles, i0, 0, c[z], ci, cj, 0, kw, fused, False)
    elif first:
        fold_tile_into(apanel, strip, tiles, i0, 0, tiles, i0, 0, 0, kw, fused, True)
    else:
        fold_tile(apanel, strip, tiles, i0, 0, 0, kw, fused)


@njit(inline="always")
def _store_edges(c, z, acc, i0, j0):
    """_store_tiles for the tiles that do not lie whole within C (_visit wrote the others into C)."""
    m, n = c.shape[1], c.shape[2]
    rows = min(m - i0, acc.shape[1])
    for q in range(acc.shape[0]):
        x0 = j0 + q * TILE_COLS
        jw = min(TILE_COLS, n - x0)
        for i in range(rows):
            if jw == TILE_COLS and i0 + (i // TILE_ROWS + 1) * TILE_ROWS <= m:
                continue  # a whole tile: in C already
            dst = c[z, i0 + i, x0 : x0 + jw]  # (jw,)
            src = acc[q, i]
            for j in range(jw):
                dst[j] = src[j]


@njit(inline="always")
def _pack_run(b, b_transposed, z, x0, n, k0, k1, run, panels):
    """panels[0, q, k - k0] = B's run of panels from column x0, for k in [k0, k1) and q < run (+0.0 past N)."""
    if b_transposed:
        src = b[z : z + 1, x0:, k0:k1]  # (1, N - x0, k1 - k0)
        for q in range(run):
            pack_transposed(src, 0, n - x0, 0, k1 - k0, q, panels)
    else:
        pack_k_major(b[z : z + 1, k0:k1, x0:], 0, n - x0, 0, k1 - k0, 0, run, panels)


def _l2_bytes(default: int = 1 << 20) -> int:
    """This CPU's L2 cache per core, from Linux's sysfs (cpu0's level-2 data or unified cache); `default` elsewhere."""
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip()
        except OSError:
            continue
        if level == "2" and kind in ("Data", "Unified") and size[:-1].isdigit():
            return int(size[:-1]) * {"K": 1 << 10, "M": 1 << 20}.get(size[-1], 0)
    return default


# A streamed task's accumulators (one row chunk x its run's columns): four fifths of L2, the rest for the
# A block streaming past and the B panel. At 2 MiB of L2 that is 1,024 rows x 384 columns in one chunk, so B
# is packed a block at a time and read once (against 512 KiB: four chunks, B packed whole and read four times;
# head dx 247 -> 290 GFLOP/s, the K = 3072 products 3-7% up, docs/benchmarks.md). Bits do not depend on it.
ACC_BYTES = max(512 * 1024, _l2_bytes() * 4 // 5)


def stream_rows(mp: int, run_panels: int) -> int:
    """How many row chunks a streamed task cuts the mp A panels into: as few as keep its accumulators within
    ACC_BYTES (at least CHUNK_PANELS_A panels a chunk). One chunk lets the task pack B as it folds."""
    most = max(CHUNK_PANELS_A, ACC_BYTES // (TILE_ROWS * TILE_COLS * 4 * max(1, run_panels)))
    return max(1, -(-mp // most))


def stream_grid(bh: int, nq: int, threads: int) -> int:
    """How many runs of B panels _matmul_streamed cuts B's nq panels into (0: too few for the threads).

    At most CHUNK_PANELS_B panels a run, and where one more run per batch
    element does it, bh * runs a multiple of `threads` (prange gives each
    thread an equal run of tasks). 0 when bh * runs cannot keep every thread
    busy: _matmul_packed, which also cuts rows, does it then.
    """
    runs = max(1, -(-nq // CHUNK_PANELS_B))
    if bh * nq < threads:
        return 0
    for extra in range(threads):
        if (bh * (runs + extra)) % threads == 0 and runs + extra <= nq:
            return runs + extra
    return runs if bh * runs >= threads else 0


@njit(inline="always")
def _finish_negative_zeros(apanels, p, bpanel, tiles, i0, k_lo):
    """Version 2: fold the terms k in [k_lo, K) into every accumulator of A panel p's tile that is -0.0.

    apanels (KB, MP, KL, TILE_ROWS) are A's blocked panels, bpanel (K, TILE_COLS) the tile's B panel,
    tiles[i0 : i0 + TILE_ROWS] its accumulators. Every other accumulator is left as it is: those terms are
    +-0.0 (the caller's precondition), and fma(+-0.0, b, acc) is acc unless acc is -0.0.
    """
    k_hi, kl = bpanel.shape[0], apanels.shape[2]
    for i in range(TILE_ROWS):
        for j in range(TILE_COLS):
            if bits_from_f32(tiles[i0 + i, j]) == NEG_ZERO_BITS:
                x = tiles[i0 + i, j]
                for k in range(k_lo, k_hi):
                    x = mac_f32(x, apanels[k // kl, p, k % kl, i], bpanel[k, j], True)
                tiles[i0 + i, j] = x


@njit(parallel=True, cache=True)
def masked_zeros(p):
    """True if p (BH, T, T) is +-0.0 wherever j > t (the causal mask's zeros; NaN is not zero).

    Every row on the threads, each counted without a branch (vectorised): a head's P is tens of MB."""
    bh, t_count, _ = p.shape
    nonzero = 0
    for r in prange(bh * t_count):
        z = r // t_count
        t = r - z * t_count
        row = p[z, t]  # (T,)
        count = 0
        for j in range(t + 1, t_count):
            count += row[j] != 0.0
        nonzero += count
    return nonzero == 0


class _Scratch(threading.local):
    """Per-thread buffers for the packed operands, kept between calls and grown to the largest asked for.

    A fresh buffer of hundreds of MB (the head's products) costs a page fault
    per 4 KiB page on every call, which measured up to half the product's own
    time; a kept one is faulted in once.
    """

    def __init__(self) -> None:
        self.buffers: dict[str, np.ndarray] = {}

    def take(self, slot: str, shape: tuple[int, ...]) -> np.ndarray:
        size = int(np.prod(shape))
        buf = self.buffers.get(slot)
        if buf is None or buf.size < size:
            buf = np.empty(size, np.float32)
            self.buffers[slot] = buf
        return buf[:size].reshape(shape)


_SCRATCH = _Scratch()
_NO_PANELS = np.empty((0, 0, 0, TILE_COLS), np.float32)  # pack_operands' B panels where B is not packed first


def release_scratch() -> None:
    """Drop this thread's kept packing buffers (the next product allocates them afresh)."""
    _SCRATCH.buffers.clear()


def matmul_batched(
    a: np.ndarray,
    a_transposed: bool,
    b: np.ndarray,
    b_transposed: bool,
    n: int,
    causal: int = FULL,
    fused: bool = False,
) -> np.ndarray:
    """The product of two 3-d operands given in either layout; n is the output's column count.

    `causal`: see _matmul_packed. `fused`: arithmetic version 2's fold (fma)
    instead of version 1's. Precondition: the shapes agree (kernels/validate.py).
    """
    bh, m, k_count = (a.shape[0], a.shape[2], a.shape[1]) if a_transposed else a.shape
    threads = numba.get_num_threads()
    threads_max: int = numba.config.NUMBA_NUM_THREADS  # type: ignore[attr-defined]
    nq = -(-n // TILE_COLS)
    # numpy's allocation: huge pages (numba's own faulted a head-sized C in 4 KiB at a time)
    out = np.empty((bh, m, n), np.float32)  # (BH, M, N)
    row_runs = row_grid(bh, m, n, threads) if causal == FULL else 0
    if row_runs:  # C cut by rows; A and B packed a k block at a time by the task's own thread (_matmul_rows)
        kl = max(1, min(k_count, K_BLOCK))
        longest = ((m + TILE_ROWS - 1) // TILE_ROWS + row_runs - 1) // row_runs  # A panels of the longest run
        local_a = _SCRATCH.take("a_run", (threads_max, longest, kl, TILE_ROWS))
        local_b = _SCRATCH.take("b_block", (threads_max, nq, kl, TILE_COLS))
        (matmul_rows_fused if fused else matmul_rows)(a, a_transposed, b, b_transposed, out, row_runs, local_a, local_b)
        return out
    ap = _SCRATCH.take("a", a_panels_shape(bh, m, k_count))  # (BH, KB, MP, KL, TR)
    mp = ap.shape[2]
    k_chunks = max(1, -(-k_count // PACK_K))
    a_tasks = pack_task_count(bh, mp, a_transposed, k_chunks)
    runs = stream_grid(bh, nq, threads) if causal == FULL else 0
    if runs:  # B packed task by task, in cache (_matmul_streamed)
        pack_operands(a, a_transposed, b, b_transposed, ap, _NO_PANELS, a_tasks, 0)
        run_panels = -(-nq // runs)
        row_chunks = stream_rows(mp, run_panels)
        k_rows = k_count if row_chunks > 1 else ap.shape[3]
        local = _SCRATCH.take("b_run", (threads_max, run_panels, k_rows, TILE_COLS))
        (matmul_streamed_fused if fused else matmul_streamed)(ap, b, b_transposed, out, runs, row_chunks, local)
        return out
    bp = _SCRATCH.take("b", (bh, nq, k_count, TILE_COLS))  # (BH, NQ, K, TC)
    b_tasks = pack_task_count(bh, nq, not b_transposed, k_chunks)
    pack_operands(a, a_transposed, b, b_transposed, ap, bp, a_tasks, b_tasks)
    rows, cols = task_grid(bh, mp, nq, threads)
    (matmul_packed_fused if fused else matmul_packed)(ap, bp, out, causal, rows, cols)
    return out
