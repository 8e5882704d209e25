"""Philox4x32-10 against the Random123 known answers, and the derived draws."""

import numpy as np
import pytest

from p2paudit.engine import rng
from p2paudit.errors import InputError

# (counter words, key words, expected output words) from Random123's kat_vectors, philox4x32 10 rounds.
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
]
# The same generator with 7 rounds: proves the round count is what the vectors pin.
KAT7 = ((0, 0, 0, 0), (0, 0), (0x5F6FB709, 0x0D893F64, 0x4F121F81, 0x4F730A48))


@pytest.mark.parametrize("ctr,key,want", KAT)
def test_philox_known_answers(ctr, key, want):
    got = rng.philox4x32(np.array([ctr], dtype=np.uint32), key)
    assert tuple(int(w) for w in got[0]) == want


def test_round_count_matters():
    ctr, key, want = KAT7
    assert tuple(int(w) for w in rng.philox4x32(np.array([ctr], dtype=np.uint32), key, rounds=7)[0]) == want
    assert tuple(int(w) for w in rng.philox4x32(np.array([ctr], dtype=np.uint32), key)[0]) != want


def test_vectorised_rows_equal_single_rows():
    ctrs = np.array([c for c, _, _ in KAT[:2]] * 3, dtype=np.uint32)
    out = rng.philox4x32(ctrs, (5, 6))
    for i, c in enumerate(ctrs):
        assert np.array_equal(out[i], rng.philox4x32(c[None, :], (5, 6))[0])


def test_stream_layout_and_offsets():
    key, hi = 0x0123456789ABCDEF, (1, 2, 3)
    full = rng.random_uint32(key, hi, 23)
    block1 = rng.philox4x32(np.array([[1, 1, 2, 3]], dtype=np.uint32), rng.split_key(key))[0]
    assert np.array_equal(full[4:8], block1)
    for off in (0, 1, 5, 7):
        assert np.array_equal(rng.random_uint32(key, hi, 9, offset=off), full[off : off + 9])
    assert not np.array_equal(full, rng.random_uint32(key, (1, 2, 4), 23))
    assert not np.array_equal(full, rng.random_uint32(key + 1, hi, 23))


def test_uniform_float32_is_24_bit_and_in_range():
    u = rng.uniform_float32(9, (0, 0, 0), 4096)
    assert u.dtype == np.float32 and u.min() >= 0.0 and u.max() < 1.0
    k = u.astype(np.float64) * 2.0**24
    assert np.array_equal(k, np.floor(k))
    assert np.array_equal(k.astype(np.uint32), rng.random_uint32(9, (0, 0, 0), 4096) >> np.uint32(8))


def test_uniform_int_range_balance_and_rejection():
    n = 30000
    x = rng.uniform_int(3, (2, 0, 0), n, 3)
    assert x.min() == 0 and x.max() == 2
    counts = np.bincount(x, minlength=3) / n
    assert np.all(np.abs(counts - 1 / 3) < 0.015)
    # bound 2^31 + 1 rejects about half the words: the result still follows the accepted ones in order.
    bound = 2**31 + 1
    words = rng.random_uint32(3, (2, 0, 0), 200).astype(np.int64)
    accepted = words[words < 2**32 - (2**32 % bound)] % bound
    assert accepted.size < 150
    assert np.array_equal(rng.uniform_int(3, (2, 0, 0), 40, bound), accepted[:40])


def test_bad_arguments_raise_input_error():
    with pytest.raises(InputError, match="key"):
        rng.random_uint32(2**64, (0, 0, 0), 4)
    with pytest.raises(InputError, match="counter_hi"):
        rng.random_uint32(1, (0, 0), 4)
    with pytest.raises(InputError, match="bound"):
        rng.uniform_int(1, (0, 0, 0), 4, 0)
    with pytest.raises(InputError, match=r"\(N, 4\)"):
        rng.philox4x32(np.zeros((2, 3), dtype=np.uint32), (0, 0))
