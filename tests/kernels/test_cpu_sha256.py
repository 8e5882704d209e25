"""kernels/cpu_sha256.py: sixteen SHA-256 lanes, held equal to hashlib's SHA-256 of the same bytes.

Every length class of a message (empty; shorter than a block; a prefix that
ends inside, at or past a block boundary; data with and without whole blocks
of its own; a tail that needs one or two padding blocks), more messages than
lanes (lanes take the next message as theirs end), every dtype the state
digest hands in, and the float32 NaN report at every position of head,
middle and tail.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels.cpu_sha256 import LANES, lanes_fast, sha256_lanes, state_lanes


def _want(prefix: bytes, data: np.ndarray) -> bytes:
    return hashlib.sha256(prefix + data.tobytes()).digest()


def test_every_length_class_equals_hashlib() -> None:
    rng = np.random.default_rng(0)
    prefixes, datas = [], []
    for n in [*range(0, 200), 255, 256, 257, 1000, 4096, 4097, 65536, 100_001]:
        for hl in (0, 1, 30, 55, 56, 63, 64, 65, 130):
            prefixes.append(rng.integers(0, 256, hl, dtype=np.uint8).tobytes())
            datas.append(rng.integers(0, 256, n, dtype=np.uint8))
    digests, nan = sha256_lanes(prefixes, datas, [False] * len(datas))
    assert len(datas) > 10 * LANES  # lanes refill many times
    bad = [i for i, d in enumerate(digests) if d != _want(prefixes[i], datas[i])]
    assert bad == [] and nan == [False] * len(datas)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32, np.uint8, np.bool_])
def test_every_dtype_reads_its_own_bytes(dtype: type) -> None:
    rng = np.random.default_rng(1)
    datas = [(rng.standard_normal(n) * 50).astype(dtype) for n in (0, 1, 7, 33, 1000, 5001)]
    datas.append(np.array(3, dtype=dtype))  # 0-d
    datas.append((np.arange(24) % 3).astype(dtype).reshape(2, 3, 4))
    prefixes = [b"p2paudit tensor v1\x00" + bytes([i]) * i for i in range(len(datas))]
    digests, _ = sha256_lanes(prefixes, datas, [False] * len(datas))
    assert digests == [_want(p, d) for p, d in zip(prefixes, datas)]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=150), st.binary(max_size=700)), min_size=0, max_size=40))
def test_random_messages_equal_hashlib(messages: list[tuple[bytes, bytes]]) -> None:
    prefixes = [p for p, _ in messages]
    datas = [np.frombuffer(d, np.uint8) for _, d in messages]
    digests, _ = sha256_lanes(prefixes, datas, [False] * len(datas))
    assert digests == [hashlib.sha256(p + d).digest() for p, d in messages]


def test_a_nan_is_reported_wherever_it_lies() -> None:
    """Head, middle (at every alignment of the middle to the elements) and tail: one NaN each time."""
    rng = np.random.default_rng(2)
    for hl in (0, 1, 2, 3, 50, 63, 64, 66):
        for n in (1, 5, 16, 17, 40, 70):
            prefixes, datas = [], []
            for where in range(n):
                x = rng.standard_normal(n).astype(np.float32)
                x[where] = np.float32(np.nan) if where % 2 else np.frombuffer(b"\x01\x00\x80\xff", np.float32)[0]
                prefixes.append(b"h" * hl)
                datas.append(x)
            clean = rng.standard_normal(n).astype(np.float32)
            clean[0] = np.inf  # infinities are not NaN
            digests, nan = sha256_lanes([*prefixes, b"h" * hl], [*datas, clean], [True] * (n + 1))
            assert nan == [True] * n + [False], (hl, n)
            assert digests == [_want(p, d) for p, d in zip([*prefixes, b"h" * hl], [*datas, clean])]


def test_unchecked_messages_report_no_nan() -> None:
    x = np.full(100, np.nan, np.float32)
    _, nan = sha256_lanes([b"", b"abc"], [x, x], [False, True])
    assert nan == [False, True]


def test_no_messages() -> None:
    assert sha256_lanes([], [], []) == ([], [])


def test_the_choice_follows_the_code_generation(monkeypatch: pytest.MonkeyPatch) -> None:
    """A generic CPU (NUMBA_CPU_NAME=generic in the invariance runs) has no 512-bit rotates: hashlib then."""
    import numba

    monkeypatch.setattr(numba.config, "CPU_NAME", "generic")
    assert lanes_fast() is False
    monkeypatch.setattr(numba.config, "CPU_NAME", "skylake-avx512")
    monkeypatch.setattr(numba.config, "CPU_FEATURES", "+avx2,+avx512f,+fma")
    assert lanes_fast() is True
    monkeypatch.setattr(numba.config, "CPU_FEATURES", "+avx2,-avx512f,+fma")
    assert lanes_fast() is False
    assert state_lanes() in (None, sha256_lanes)


def test_strided_and_fortran_arrays_hash_their_c_order_bytes():
    """A copy made to get C-order bytes is held until the kernel has read it by address (else its memory,
    freed and reused by the next message's staging, would be hashed instead)."""
    rng = np.random.default_rng(7)
    datas = []
    for n in range(40):
        base = rng.standard_normal((64 + n, 48)).astype(np.float32)
        datas.append(base[:, ::3] if n % 2 else np.asfortranarray(base))
    prefixes = [bytes([n]) * n for n in range(len(datas))]
    digests, nan = sha256_lanes(prefixes, datas, [True] * len(datas))
    assert digests == [hashlib.sha256(p + np.ascontiguousarray(d).tobytes()).digest() for p, d in zip(prefixes, datas)]
    assert nan == [False] * len(datas)
