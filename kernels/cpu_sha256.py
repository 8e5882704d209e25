"""SHA-256 (FIPS 180-4) of many messages at once, sixteen lanes of one vector register each.

    sha256_lanes(prefixes, datas, checks) -> (digests, nan_seen)

Message i is prefixes[i] || the bytes of datas[i] (a C-contiguous array of
any dtype, read in place: the bulk of a tensor is never copied); its digest
is the 32 bytes hashlib.sha256 gives for the same bytes (tests hold them
equal on messages of every length class). SHA-NI hashes one message at about
2 cycles a byte; the sixteen independent messages of this kernel share each
<16 x i32> instruction (rotates, additions, boolean functions), which on a
core with AVX-512 measured 2.2x hashlib's rate before the loads. It serves
states of many tensors (p2paudit.tensor_digest, whose caller hands it in):
one message stays on one lane, so a message far longer than the others would
leave fifteen lanes idle; the caller hashes those with hashlib.

How a message goes through a lane: its 64-byte blocks that lie wholly in the
data (the "middle") are read where the array holds them, at any alignment;
the blocks before (the prefix and the data's first bytes) and after (its last
bytes, the 0x80 byte, zeros and the bit length) are staged in one small
buffer. A lane takes the next message when its own ends, so lanes stay busy
while messages remain; an idle lane compresses a block of zeros whose result
is dropped. Each round loads one block per lane (16 unaligned <16 x i32>
loads), transposes them into the message schedule's sixteen words (four
stages of two-source shuffles), swaps their bytes to big-endian and runs the
64 rounds; the schedule and the working variables live in registers.

`checks[i]` (a float32 tensor's data): every float32 element the middle
blocks cover is tested for NaN in the kernel (a second load at the element
boundary, from L1), the elements outside the middle by numpy; nan_seen[i]
says that one was found (the digest format writes NaN canonically, which
this kernel does not: the caller hashes that tensor again its own way).

On a CPU without AVX-512 LLVM splits each vector in two or four and emulates
the rotates: still exact, slower than hashlib (`lanes_fast` says whether to
use it).

    sha256_streams(prefixes, datas, checks) -> (digests, nan_seen)

is the same function through the SHA-NI instructions (sha256rnds2, sha256msg1,
sha256msg2), STREAMS messages interleaved so that one's round latency hides
behind the other's, with the same staging and NaN test (128-bit vectors: a
wider one left the registers' upper halves in use, and each SSE-encoded SHA
instruction after it stalled; vzeroupper comes first where AVX is compiled
for). It serves a processor with SHA and without AVX-512 (`state_lanes`
chooses): on the development machine 1.2-1.9 GB/s a thread against hashlib's
0.8-1.2 and the lanes' 2.2-2.4.
"""

from __future__ import annotations

from collections.abc import Callable

import numba
import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

LANES = 16
BLOCK = 64
_K = (
    0x428A2F98, 0x71374491, 0xB5C0FBCF, 0xE9B5DBA5, 0x3956C25B, 0x59F111F1, 0x923F82A4, 0xAB1C5ED5,
    0xD807AA98, 0x12835B01, 0x243185BE, 0x550C7DC3, 0x72BE5D74, 0x80DEB1FE, 0x9BDC06A7, 0xC19BF174,
    0xE49B69C1, 0xEFBE4786, 0x0FC19DC6, 0x240CA1CC, 0x2DE92C6F, 0x4A7484AA, 0x5CB0A9DC, 0x76F988DA,
    0x983E5152, 0xA831C66D, 0xB00327C8, 0xBF597FC7, 0xC6E00BF3, 0xD5A79147, 0x06CA6351, 0x14292967,
    0x27B70A85, 0x2E1B2138, 0x4D2C6DFC, 0x53380D13, 0x650A7354, 0x766A0ABB, 0x81C2C92E, 0x92722C85,
    0xA2BFE8A1, 0xA81A664B, 0xC24B8B70, 0xC76C51A3, 0xD192E819, 0xD6990624, 0xF40E3585, 0x106AA070,
    0x19A4C116, 0x1E376C08, 0x2748774C, 0x34B0BCB5, 0x391C0CB3, 0x4ED8AA4A, 0x5B9CCA4F, 0x682E6FF3,
    0x748F82EE, 0x78A5636F, 0x84C87814, 0x8CC70208, 0x90BEFFFA, 0xA4506CEB, 0xBEF9A3F7, 0xC67178F2,
)  # fmt: skip
Lanes = Callable[[list[bytes], list[np.ndarray], list[bool]], tuple[list[bytes], list[bool]]]
_IV = (0x6A09E667, 0xBB67AE85, 0x3C6EF372, 0xA54FF53A, 0x510E527F, 0x9B05688C, 0x1F83D9AB, 0x5BE0CD19)
IV = np.array(_IV, np.uint32)
_ABS_MASK = 0x7FFFFFFF
_INF_BITS = 0x7F800000


def _transpose_masks() -> list[tuple[int, list[int], list[int]]]:
    """Per stage (b = 8, 4, 2, 1): the shuffle masks of rows i and i + b (into R_i || R_{i+b}) that swap bit b
    of every element's row and column index where they differ; after the four stages (r, c) is at (c, r)."""
    stages = []
    for b in (8, 4, 2, 1):
        low = [c if c & b == 0 else LANES + c - b for c in range(LANES)]
        high = [c + b if c & b == 0 else LANES + c for c in range(LANES)]
        stages.append((b, low, high))
    return stages


def _compress_signature(state, addrs, steps, checks, check_steps, nan, count):  # noqa: ANN001, ANN202
    """The compressions' numba signature (state 2-d; addrs, steps, checks, check_steps, nan 1-d; an integer
    count), or None for other argument types."""
    arrays = ((state, 2), (addrs, 1), (steps, 1), (checks, 1), (check_steps, 1), (nan, 1))
    if not all(isinstance(a, types.Array) and a.ndim == n for a, n in arrays) or not isinstance(count, types.Integer):
        return None
    return types.void(state, addrs, steps, checks, check_steps, nan, count)


def _compress_arguments(context, builder, signature, args):  # noqa: ANN001, ANN202
    """A compression's six arrays (numba array structs) and its block count as an intp."""
    arrays = zip(signature.args[:6], args[:6])
    st, ad, sp, ck, cs, nn = (context.make_array(t)(context, builder, a) for t, a in arrays)
    return st, ad, sp, ck, cs, nn, context.cast(builder, args[6], signature.args[6], types.intp)


@intrinsic
def _compress16(typingctx, state, addrs, steps, checks, check_steps, nan, count):
    """`count` blocks per lane: lane l's blocks at addrs[l], addrs[l] + steps[l], ... (steps 64, or 0 for an
    idle lane that keeps compressing its zero block), compressed into state[:, l] (state (8, 16) uint32);
    nan[l] |= 1 where one of the 16 little-endian words at checks[l] + r * check_steps[l] is a float32 NaN.
    The state, the addresses and the NaN flags stay in registers for the whole run."""
    sig = _compress_signature(state, addrs, steps, checks, check_steps, nan, count)
    if sig is None:
        return None

    def codegen(context, builder, signature, args):
        st, ad, sp, ck, cs, nn, run = _compress_arguments(context, builder, signature, args)
        i32, i64 = ir.IntType(32), ir.IntType(64)
        vec = ir.VectorType(i32, LANES)
        vec64 = ir.VectorType(i64, LANES)
        vecp = vec.as_pointer()

        def const(x):
            return ir.Constant(vec, [x] * LANES)

        fshr = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vec, [vec] * 3), "llvm.fshr.v16i32")
        bswap = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vec, [vec]), "llvm.bswap.v16i32")

        def rotr(x, r):
            return builder.call(fshr, [x, x, const(r)])

        def lane_vector(arr):  # <16 x i64> of a (16,) int64 array
            return builder.load(builder.bitcast(arr.data, vec64.as_pointer()), align=8)

        state_ptr = builder.bitcast(st.data, vecp)
        nan_ptr = builder.bitcast(nn.data, vecp)
        slots = [cgutils.alloca_once(builder, vec) for _ in range(8)]
        for j in range(8):
            builder.store(builder.load(builder.gep(state_ptr, [ir.Constant(i32, j)]), align=4), slots[j])
        addr_slot, check_slot = cgutils.alloca_once(builder, vec64), cgutils.alloca_once(builder, vec64)
        nan_slot = cgutils.alloca_once(builder, vec)
        builder.store(lane_vector(ad), addr_slot)
        builder.store(lane_vector(ck), check_slot)
        builder.store(builder.load(nan_ptr, align=4), nan_slot)
        step_v, check_step_v = lane_vector(sp), lane_vector(cs)
        with cgutils.for_range(builder, run):
            addr_v, check_v = builder.load(addr_slot), builder.load(check_slot)
            rows = []
            for lane in range(LANES):
                ptr = builder.inttoptr(builder.extract_element(addr_v, ir.Constant(i32, lane)), vecp)
                rows.append(builder.load(ptr, align=1))
            for b, low, high in _transpose_masks():
                new = list(rows)
                for i in range(LANES):
                    if i & b == 0:
                        j = i + b
                        new[i] = builder.shuffle_vector(rows[i], rows[j], ir.Constant(vec, low))
                        new[j] = builder.shuffle_vector(rows[i], rows[j], ir.Constant(vec, high))
                rows = new
            w = [builder.call(bswap, [r]) for r in rows]  # w[t]: word t of every lane's block
            # NaN test: any word of lane l's 16 at its check address with |bits| > +inf's bits
            nan_v = builder.load(nan_slot)
            for lane in range(LANES):
                ptr = builder.inttoptr(builder.extract_element(check_v, ir.Constant(i32, lane)), vecp)
                bits = builder.and_(builder.load(ptr, align=1), const(_ABS_MASK))
                over = builder.icmp_unsigned(">", bits, const(_INF_BITS))
                as_int = builder.bitcast(over, ir.IntType(LANES))
                seen = builder.zext(builder.icmp_unsigned("!=", as_int, ir.Constant(ir.IntType(LANES), 0)), i32)
                old = builder.extract_element(nan_v, ir.Constant(i32, lane))
                nan_v = builder.insert_element(nan_v, builder.or_(old, seen), ir.Constant(i32, lane))
            builder.store(nan_v, nan_slot)
            h0 = [builder.load(slot) for slot in slots]
            a, b_, c, d, e, f, g, h = h0
            for t in range(64):
                if t >= 16:
                    w15, w2 = w[t - 15], w[t - 2]
                    s0 = builder.xor(builder.xor(rotr(w15, 7), rotr(w15, 18)), builder.lshr(w15, const(3)))
                    s1 = builder.xor(builder.xor(rotr(w2, 17), rotr(w2, 19)), builder.lshr(w2, const(10)))
                    w.append(builder.add(builder.add(w[t - 16], s0), builder.add(w[t - 7], s1)))
                big_s1 = builder.xor(builder.xor(rotr(e, 6), rotr(e, 11)), rotr(e, 25))
                ch = builder.xor(builder.and_(e, f), builder.and_(builder.xor(e, const(0xFFFFFFFF)), g))
                t1 = builder.add(builder.add(builder.add(h, big_s1), builder.add(ch, const(_K[t]))), w[t])
                big_s0 = builder.xor(builder.xor(rotr(a, 2), rotr(a, 13)), rotr(a, 22))
                maj = builder.xor(builder.xor(builder.and_(a, b_), builder.and_(a, c)), builder.and_(b_, c))
                t2 = builder.add(big_s0, maj)
                h, g, f, e, d, c, b_, a = g, f, e, builder.add(d, t1), c, b_, a, builder.add(t1, t2)
            for j, x in enumerate((a, b_, c, d, e, f, g, h)):
                builder.store(builder.add(h0[j], x), slots[j])
            builder.store(builder.add(addr_v, step_v), addr_slot)
            builder.store(builder.add(check_v, check_step_v), check_slot)
        for j in range(8):
            builder.store(builder.load(slots[j]), builder.gep(state_ptr, [ir.Constant(i32, j)]), align=4)
        builder.store(builder.load(nan_slot), nan_ptr, align=4)
        return context.get_dummy_value()

    return sig, codegen


STREAMS = 2  # messages one SHA-NI call interleaves (three or more ran a hundred times slower: spills)


@intrinsic
def _compress_ni(typingctx, state, addrs, steps, checks, check_steps, nan, count):
    """_compress16's contract for STREAMS messages with the SHA-NI instructions (sha256rnds2, sha256msg1,
    sha256msg2): each message's state in two <4 x i32> (ABEF and CDGH, as the instructions want them), the
    streams' rounds interleaved so that one's latency hides behind the other's; state (8, STREAMS)."""
    sig = _compress_signature(state, addrs, steps, checks, check_steps, nan, count)
    if sig is None:
        return None

    def codegen(context, builder, signature, args):
        st, ad, sp, ck, cs, nn, run = _compress_arguments(context, builder, signature, args)
        i32, i64 = ir.IntType(32), ir.IntType(64)
        v4 = ir.VectorType(i32, 4)
        module = builder.module
        rnds2 = cgutils.get_or_insert_function(module, ir.FunctionType(v4, [v4] * 3), "llvm.x86.sha256rnds2")
        msg1 = cgutils.get_or_insert_function(module, ir.FunctionType(v4, [v4] * 2), "llvm.x86.sha256msg1")
        msg2 = cgutils.get_or_insert_function(module, ir.FunctionType(v4, [v4] * 2), "llvm.x86.sha256msg2")
        bswap = cgutils.get_or_insert_function(module, ir.FunctionType(v4, [v4]), "llvm.bswap.v4i32")
        undef = ir.Constant(v4, ir.Undefined)

        def shuffle(a, b, picks):
            return builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(i32, len(picks)), picks))

        def word(arr, index):  # element `index` of a 1-d array, as a pointer
            return builder.gep(builder.bitcast(arr.data, i64.as_pointer()), [ir.Constant(i32, index)])

        words = builder.bitcast(st.data, i32.as_pointer())  # state[j, s] at j * STREAMS + s
        nans = builder.bitcast(nn.data, i32.as_pointer())
        streams = []
        for s in range(STREAMS):
            h = ir.Constant(ir.VectorType(i32, 8), ir.Undefined)
            for j in range(8):
                value = builder.load(builder.gep(words, [ir.Constant(i32, j * STREAMS + s)]))
                h = builder.insert_element(h, value, ir.Constant(i32, j))
            abef, cdgh = cgutils.alloca_once(builder, v4), cgutils.alloca_once(builder, v4)
            builder.store(shuffle(h, h, [5, 4, 1, 0]), abef)  # lanes f, e, b, a
            builder.store(shuffle(h, h, [7, 6, 3, 2]), cdgh)  # lanes h, g, d, c
            addr, check, flag = (cgutils.alloca_once(builder, t) for t in (i64, i64, i32))
            builder.store(builder.load(word(ad, s)), addr)
            builder.store(builder.load(word(ck, s)), check)
            builder.store(builder.load(builder.gep(nans, [ir.Constant(i32, s)])), flag)
            streams.append((abef, cdgh, addr, check, flag, builder.load(word(sp, s)), builder.load(word(cs, s))))
        rounds = [ir.Constant(v4, list(_K[4 * q : 4 * q + 4])) for q in range(16)]
        abs_mask, inf = ir.Constant(v4, [_ABS_MASK] * 4), ir.Constant(v4, [_INF_BITS] * 4)
        if (
            "+avx" in _target_features()
        ):  # the caller's code may leave wide registers' upper halves in use: clear them first
            vzeroupper = cgutils.get_or_insert_function(
                module, ir.FunctionType(ir.VoidType(), []), "llvm.x86.avx.vzeroupper"
            )
            builder.call(vzeroupper, [])
        with cgutils.for_range(builder, run):
            live = []
            for abef, cdgh, addr, check, flag, step, check_step in streams:
                block = builder.inttoptr(builder.load(addr), v4.as_pointer())
                w = [
                    builder.call(bswap, [builder.load(builder.gep(block, [ir.Constant(i32, j)]), align=1)])
                    for j in range(4)
                ]
                # NaN test of the 16 words at the check address, 128 bits at a time: a wider vector would leave
                # the registers' upper halves in use, and every SHA instruction (SSE-encoded) after it stalled
                # (the kernel ran at 0.01 GB/s)
                checked = builder.inttoptr(builder.load(check), v4.as_pointer())
                for j in range(4):
                    bits = builder.and_(builder.load(builder.gep(checked, [ir.Constant(i32, j)]), align=1), abs_mask)
                    over = builder.bitcast(builder.icmp_unsigned(">", bits, inf), ir.IntType(4))
                    hit = builder.zext(builder.icmp_unsigned("!=", over, ir.Constant(ir.IntType(4), 0)), i32)
                    builder.store(builder.or_(builder.load(flag), hit), flag)
                start = (builder.load(abef), builder.load(cdgh))
                live.append([w, start[0], start[1], start])
            for q in range(16):  # four rounds a quad, the streams' quads in turn
                for item in live:
                    w, x0, x1, start = item
                    if q >= 4:  # the schedule's next four words
                        sigma = builder.call(msg1, [w[q - 4], w[q - 3]])
                        sigma = builder.add(sigma, shuffle(w[q - 2], w[q - 1], [1, 2, 3, 4]))  # + w[t - 7]
                        w.append(builder.call(msg2, [sigma, w[q - 1]]))
                    m = builder.add(w[q], rounds[q])
                    x1 = builder.call(rnds2, [x1, x0, m])  # two rounds: the new ABEF
                    x0 = builder.call(rnds2, [x0, x1, shuffle(m, undef, [2, 3, 0, 0])])  # two more
                    item[1], item[2] = x0, x1
            for (abef, cdgh, addr, check, _, step, check_step), (_, x0, x1, start) in zip(streams, live):
                builder.store(builder.add(x0, start[0]), abef)
                builder.store(builder.add(x1, start[1]), cdgh)
                builder.store(builder.add(builder.load(addr), step), addr)
                builder.store(builder.add(builder.load(check), check_step), check)
        for s, (abef, cdgh, _, _, flag, _, _) in enumerate(streams):
            h = shuffle(builder.load(abef), builder.load(cdgh), [3, 2, 7, 6, 1, 0, 5, 4])  # back to a .. h
            for j in range(8):
                builder.store(
                    builder.extract_element(h, ir.Constant(i32, j)),
                    builder.gep(words, [ir.Constant(i32, j * STREAMS + s)]),
                )
            builder.store(builder.load(flag), builder.gep(nans, [ir.Constant(i32, s)]))
        return context.get_dummy_value()

    return sig, codegen


@njit(nogil=True, cache=True)
def _run_lanes(stage, head_off, head_n, mid_addr, mid_n, mid_back, tail_off, tail_n, check, zeros, out, nan_out):
    """_run through the sixteen vector lanes (_compress16)."""
    _run(False, LANES, stage, head_off, head_n, mid_addr, mid_n, mid_back, tail_off, tail_n, check, zeros, out, nan_out)


@njit(nogil=True, cache=True)
def _run_streams(stage, head_off, head_n, mid_addr, mid_n, mid_back, tail_off, tail_n, check, zeros, out, nan_out):
    """_run through the SHA-NI streams (_compress_ni)."""
    _run(
        True, STREAMS, stage, head_off, head_n, mid_addr, mid_n, mid_back, tail_off, tail_n, check, zeros, out, nan_out
    )


@njit(inline="always")
def _run(ni, width, stage, head_off, head_n, mid_addr, mid_n, mid_back, tail_off, tail_n, check, zeros, out, nan_out):
    """Every message through `width` lanes (or streams); out[m] its state words, nan_out[m] 1 where its check
    found NaN.

    Message m: head_n[m] staged blocks at stage[head_off[m]:], then mid_n[m] blocks at address mid_addr[m],
    then tail_n[m] staged blocks at stage[tail_off[m]:]. check[m]: test the middle for float32 NaN at the
    element boundary mid_addr - mid_back[m]. `zeros`: a zero block (at least 64 bytes) for idle lanes.
    Each call of the compression runs as many blocks as every busy lane has left in its current piece
    (head, middle or tail), so the lanes' bookkeeping happens only where one of them changes piece.
    """
    count = head_n.shape[0]
    state = np.empty((8, width), np.uint32)
    addrs = np.empty(width, np.int64)
    steps = np.empty(width, np.int64)
    checks = np.empty(width, np.int64)
    check_steps = np.empty(width, np.int64)
    nan = np.zeros(width, np.uint32)
    msg = np.full(width, -1, np.int64)  # the lane's message, -1 when idle
    pos = np.zeros(width, np.int64)  # the lane's next block within its message
    base = stage.ctypes.data
    zero_addr = zeros.ctypes.data
    nxt = 0
    for lane in range(width):
        if nxt < count:
            msg[lane] = nxt
            nxt += 1
            for j in range(8):
                state[j, lane] = IV[j]
    active = min(width, count)
    while active > 0:
        run = np.int64(1) << 62
        for lane in range(width):
            m = msg[lane]
            checks[lane] = zero_addr
            check_steps[lane] = 0
            if m < 0:
                addrs[lane] = zero_addr
                steps[lane] = 0
                continue
            steps[lane] = 64
            p = pos[lane]
            if p < head_n[m]:
                addrs[lane] = base + head_off[m] + p * 64
                left = head_n[m] - p
            elif p < head_n[m] + mid_n[m]:
                addrs[lane] = mid_addr[m] + (p - head_n[m]) * 64
                left = head_n[m] + mid_n[m] - p
                if check[m]:
                    checks[lane] = addrs[lane] - mid_back[m]
                    check_steps[lane] = 64
            else:
                addrs[lane] = base + tail_off[m] + (p - head_n[m] - mid_n[m]) * 64
                left = head_n[m] + mid_n[m] + tail_n[m] - p
            run = min(run, left)
        if ni:
            _compress_ni(state, addrs, steps, checks, check_steps, nan, run)
        else:
            _compress16(state, addrs, steps, checks, check_steps, nan, run)
        for lane in range(width):
            m = msg[lane]
            if m < 0:
                continue
            pos[lane] += run
            if pos[lane] == head_n[m] + mid_n[m] + tail_n[m]:
                for j in range(8):
                    out[m, j] = state[j, lane]
                    state[j, lane] = IV[j]
                nan_out[m] = nan[lane]
                nan[lane] = 0
                pos[lane] = 0
                if nxt < count:
                    msg[lane] = nxt
                    nxt += 1
                else:
                    msg[lane] = -1
                    active -= 1


def _float32_nan(raw: np.ndarray, lo: int, hi: int) -> bool:
    """Whether a float32 element with a byte in raw[lo:hi] (the uint8 view of a float32 array) is NaN."""
    first, last = lo // 4, -(-hi // 4)
    return last > first and bool(np.isnan(raw[first * 4 : last * 4].view(np.float32)).any())


def sha256_lanes(prefixes: list[bytes], datas: list[np.ndarray], checks: list[bool]) -> tuple[list[bytes], list[bool]]:
    """SHA-256 of each prefixes[i] || the C-order bytes of datas[i] (any layout: a strided array is copied
    first and the copy held until the kernel has read it), and for checks[i] whether a float32 element of
    datas[i] is NaN (see the module docstring). Precondition: checks[i] only for float32 data."""
    return _hash(prefixes, datas, checks, _run_lanes)


def sha256_streams(
    prefixes: list[bytes], datas: list[np.ndarray], checks: list[bool]
) -> tuple[list[bytes], list[bool]]:
    """sha256_lanes through the SHA-NI instructions, STREAMS messages interleaved (precondition: the
    processor has them, `sha_fast`)."""
    return _hash(prefixes, datas, checks, _run_streams)


def _hash(
    prefixes: list[bytes], datas: list[np.ndarray], checks: list[bool], runner: Callable[..., None]
) -> tuple[list[bytes], list[bool]]:
    count = len(prefixes)
    head_off, head_n, mid_addr, mid_n, mid_back, tail_off, tail_n = (np.zeros(count, np.int64) for _ in range(7))
    check = np.zeros(count, np.uint8)
    pieces: list[bytes] = []
    staged = 0
    nan_outside = [False] * count
    held: list[np.ndarray] = []  # every array whose memory the kernel reads by address, alive until it has
    for i, (prefix, data, chk) in enumerate(zip(prefixes, datas, checks)):
        # C-order bytes: a view of a C-contiguous array, else a copy (held below, or its address would dangle)
        raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8) if data.size else np.empty(0, np.uint8)
        held.append(raw)
        hl, dl = len(prefix), int(raw.size)
        total = hl + dl
        first_mid = -(-hl // BLOCK)  # the first block wholly in the data
        mid = max(0, total // BLOCK - first_mid)  # blocks wholly in the data
        if not mid:
            first_mid = total // BLOCK  # every whole block is staged
        lead = first_mid * BLOCK - hl  # where the middle begins in the data (when there is one)

        def message(lo: int, hi: int, prefix: bytes = prefix, raw: np.ndarray = raw, hl: int = hl) -> bytes:
            """Bytes lo..hi-1 of prefix || data."""
            return prefix[lo:hi] + raw[max(lo - hl, 0) : max(hi - hl, 0)].tobytes()

        head = message(0, first_mid * BLOCK)
        rest = message((first_mid + mid) * BLOCK, total)
        tail = rest + b"\x80" + b"\x00" * ((55 - len(rest)) % BLOCK) + (8 * total).to_bytes(8, "big")
        head_off[i], head_n[i], tail_off[i], tail_n[i] = (
            staged,
            len(head) // BLOCK,
            staged + len(head),
            len(tail) // BLOCK,
        )
        pieces += [head, tail]
        staged += len(head) + len(tail)
        mid_n[i] = mid
        if mid:
            mid_addr[i] = raw.ctypes.data + lead
            mid_back[i] = lead % 4
        if chk:
            check[i] = 1
            covered_lo = lead - lead % 4 if mid else 0
            covered_hi = covered_lo + mid * BLOCK
            nan_outside[i] = _float32_nan(raw, 0, covered_lo) or _float32_nan(raw, covered_hi, dl)
    stage = np.frombuffer(b"".join(pieces) + bytes(BLOCK), np.uint8)  # a zero block past the end
    out = np.empty((count, 8), np.uint32)
    nan = np.zeros(count, np.uint32)
    zeros = stage[staged:]
    runner(stage, head_off, head_n, mid_addr, mid_n, mid_back, tail_off, tail_n, check, zeros, out, nan)
    del held  # read: the copies may go
    digests = [row.astype(">u4").tobytes() for row in out]
    return digests, [bool(nan[i]) or nan_outside[i] for i in range(count)]


def _target_features() -> list[str]:
    """The features numba compiles for ([] for the generic CPU): NUMBA_CPU_NAME / NUMBA_CPU_FEATURES, else the host's."""
    name = numba.config.CPU_NAME or llvm.get_host_cpu_name()  # type: ignore[attr-defined]
    if name == "generic":
        return []
    features = numba.config.CPU_FEATURES or llvm.get_host_cpu_features().flatten()  # type: ignore[attr-defined]
    return str(features).split(",")


def lanes_fast() -> bool:
    """Whether the lanes beat hashlib here: numba compiles for a CPU with AVX-512 (rotates, 32 registers)."""
    return "+avx512f" in _target_features()


def streams_fast() -> bool:
    """Whether sha256_streams can run here: numba compiles for a CPU with the SHA instructions."""
    return "+sha" in _target_features()


_FAST: list[Lanes | None] = []


def state_lanes() -> Lanes | None:
    """What digest_state's `lanes` takes here (decided once): sha256_lanes where lanes_fast() (AVX-512: 2.2-2.4
    GB/s a thread on the development machine), else sha256_streams where streams_fast() (SHA-NI: 1.2-1.9
    GB/s, hashlib's 0.8-1.2 there), else None (hashlib alone)."""
    if not _FAST:
        _FAST.append(sha256_lanes if lanes_fast() else sha256_streams if streams_fast() else None)
    return _FAST[0]
