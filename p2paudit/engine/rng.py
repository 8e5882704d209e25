"""Philox4x32-10 (Salmon et al., SC'11, the Random123 generator) in vectorised numpy integers.

A counter-based generator: output block i of a stream is a pure function of
(key, counter), with no state carried between calls, so any block can be drawn
alone, on any machine, in any order. Only uint32/uint64 integer arithmetic is
used (a 32x32 -> 64-bit product split into hi and lo words, xor, add mod 2^32).

A stream is named by a 64-bit key and three 32-bit words `counter_hi`; its
j-th 32-bit output is word (j mod 4) of the block with counter
(j div 4, counter_hi[0], counter_hi[1], counter_hi[2]).
"""

from __future__ import annotations

import numpy as np

from p2paudit.errors import InputError

PHILOX_M0 = np.uint64(0xD2511F53)
PHILOX_M1 = np.uint64(0xCD9E8D57)
PHILOX_W0 = 0x9E3779B9
PHILOX_W1 = 0xBB67AE85
ROUNDS = 10
MASK32 = np.uint64(0xFFFFFFFF)
SHIFT32 = np.uint64(32)
MAX_BLOCKS = 2**32

# Stream domains: the first counter_hi word, so no two uses of one key share a stream.
DOMAIN_INIT = 1
DOMAIN_BATCH = 2


def philox4x32(counters: np.ndarray, key: tuple[int, int], rounds: int = ROUNDS) -> np.ndarray:
    """Philox4x32-`rounds` of each row of `counters` (N, 4) uint32 under key (k0, k1); returns (N, 4) uint32."""
    c = np.asarray(counters, dtype=np.uint32)
    if c.ndim != 2 or c.shape[1] != 4:
        raise InputError(f"philox counters have shape {c.shape}, want (N, 4)")
    x0, x1, x2, x3 = (c[:, i].astype(np.uint64) for i in range(4))  # (N,) each, values < 2^32
    k0, k1 = int(key[0]) & 0xFFFFFFFF, int(key[1]) & 0xFFFFFFFF
    for r in range(rounds):
        p0 = x0 * PHILOX_M0  # exact: both factors < 2^32, so the product < 2^64
        p1 = x2 * PHILOX_M1
        hi0, lo0 = p0 >> SHIFT32, p0 & MASK32
        hi1, lo1 = p1 >> SHIFT32, p1 & MASK32
        x0, x1, x2, x3 = hi1 ^ x1 ^ np.uint64(k0), lo1, hi0 ^ x3 ^ np.uint64(k1), lo0
        k0 = (k0 + PHILOX_W0) & 0xFFFFFFFF  # the key schedule: a Weyl sequence per word
        k1 = (k1 + PHILOX_W1) & 0xFFFFFFFF
    return np.stack([x0, x1, x2, x3], axis=1).astype(np.uint32)  # (N, 4)


def split_key(key: int) -> tuple[int, int]:
    """A 64-bit integer key as Philox's two 32-bit key words (low word first)."""
    if not 0 <= key < 2**64:
        raise InputError(f"rng key {key} is outside [0, 2^64)")
    return key & 0xFFFFFFFF, key >> 32


def random_uint32(key: int, counter_hi: tuple[int, int, int], n: int, offset: int = 0) -> np.ndarray:
    """Outputs offset .. offset+n-1 of the stream (key, counter_hi), as (n,) uint32.

    Preconditions: 0 <= key < 2^64; three counter_hi words in [0, 2^32); n, offset >= 0
    and offset + n <= 2^34 (the block counter is one 32-bit word).
    """
    words = tuple(int(w) for w in counter_hi)
    if len(words) != 3 or any(not 0 <= w < 2**32 for w in words):
        raise InputError(f"rng counter_hi {counter_hi} is not three words in [0, 2^32)")
    if n < 0 or offset < 0 or offset + n > 4 * MAX_BLOCKS:
        raise InputError(f"rng range offset {offset}, n {n} is outside the stream of 2^34 words")
    if n == 0:
        return np.zeros(0, dtype=np.uint32)
    first, last = offset // 4, (offset + n - 1) // 4
    counters = np.empty((last - first + 1, 4), dtype=np.uint32)
    counters[:, 0] = np.arange(first, last + 1, dtype=np.uint64).astype(np.uint32)
    counters[:, 1:] = np.array(words, dtype=np.uint32)
    out = philox4x32(counters, split_key(key)).reshape(-1)
    start = offset - 4 * first
    return out[start : start + n].copy()


def uniform_float32(key: int, counter_hi: tuple[int, int, int], n: int, offset: int = 0) -> np.ndarray:
    """(n,) float32 in [0, 1): the top 24 bits of each output word times 2^-24 (exact)."""
    bits = random_uint32(key, counter_hi, n, offset) >> np.uint32(8)
    return bits.astype(np.float32) * np.float32(2.0**-24)  # both steps exact: 24-bit integers


def uniform_int(key: int, counter_hi: tuple[int, int, int], n: int, bound: int) -> np.ndarray:
    """(n,) int64 uniform on [0, bound) by rejection, with no modulo bias.

    Words u of the stream are read in order; u is accepted when u < limit, where
    limit = 2^32 - (2^32 mod bound) is a multiple of bound, and gives u mod bound.
    The i-th accepted word gives the i-th result. Precondition: 1 <= bound <= 2^32.
    """
    if not 1 <= bound <= 2**32:
        raise InputError(f"uniform_int bound {bound} is outside [1, 2^32]")
    limit = 2**32 - (2**32 % bound)
    out: list[np.ndarray] = []
    have, offset = 0, 0
    while have < n:
        # Draw a little more than needed; the acceptance rate is above 1/2.
        chunk = 2 * (n - have) + 64
        u = random_uint32(key, counter_hi, chunk, offset).astype(np.int64)
        offset += chunk
        ok = u[u < limit][: n - have]
        out.append(ok % bound)
        have += ok.size
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)
