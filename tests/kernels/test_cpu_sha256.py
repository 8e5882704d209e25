"""kernels/cpu_sha256.py: sixteen SHA-256 lanes and the SHA-NI streams, held equal to hashlib's SHA-256 of the
same bytes (the streams where the processor has the SHA instructions).

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

from kernels import cpu_sha256
from kernels.cpu_sha256 import LANES, lanes_fast, sha256_lanes, sha256_streams, state_lanes, streams_fast

HASHERS = pytest.mark.parametrize(
    "hasher",
    [
        pytest.param(sha256_lanes, id="lanes"),
        pytest.param(
            sha256_streams,
            id="sha-ni",
            marks=pytest.mark.skipif(not streams_fast(), reason="numba compiles for no SHA instructions here"),
        ),
    ],
)


def _want(prefix: bytes, data: np.ndarray) -> bytes:
    return hashlib.sha256(prefix + data.tobytes()).digest()


@HASHERS
def test_every_length_class_equals_hashlib(hasher) -> None:
    rng = np.random.default_rng(0)
    prefixes, datas = [], []
    for n in [*range(0, 200), 255, 256, 257, 1000, 4096, 4097, 65536, 100_001]:
        for hl in (0, 1, 30, 55, 56, 63, 64, 65, 130):
            prefixes.append(rng.integers(0, 256, hl, dtype=np.uint8).tobytes())
            datas.append(rng.integers(0, 256, n, dtype=np.uint8))
    digests, nan = hasher(prefixes, datas, [False] * len(datas))
    assert len(datas) > 10 * LANES  # lanes refill many times
    bad = [i for i, d in enumerate(digests) if d != _want(prefixes[i], datas[i])]
    assert bad == [] and nan == [False] * len(datas)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32, np.uint8, np.bool_])
@HASHERS
def test_every_dtype_reads_its_own_bytes(dtype: type, hasher) -> None:
    rng = np.random.default_rng(1)
    datas = [(rng.standard_normal(n) * 50).astype(dtype) for n in (0, 1, 7, 33, 1000, 5001)]
    datas.append(np.array(3, dtype=dtype))  # 0-d
    datas.append((np.arange(24) % 3).astype(dtype).reshape(2, 3, 4))
    prefixes = [b"p2paudit tensor v1\x00" + bytes([i]) * i for i in range(len(datas))]
    digests, _ = hasher(prefixes, datas, [False] * len(datas))
    assert digests == [_want(p, d) for p, d in zip(prefixes, datas)]


@HASHERS
@settings(max_examples=40, deadline=None)
@given(messages=st.lists(st.tuples(st.binary(max_size=150), st.binary(max_size=700)), min_size=0, max_size=40))
def test_random_messages_equal_hashlib(messages: list[tuple[bytes, bytes]], hasher) -> None:
    prefixes = [p for p, _ in messages]
    datas = [np.frombuffer(d, np.uint8) for _, d in messages]
    digests, _ = hasher(prefixes, datas, [False] * len(datas))
    assert digests == [hashlib.sha256(p + d).digest() for p, d in messages]


@HASHERS
def test_a_nan_is_reported_wherever_it_lies(hasher) -> None:
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
            digests, nan = hasher([*prefixes, b"h" * hl], [*datas, clean], [True] * (n + 1))
            assert nan == [True] * n + [False], (hl, n)
            assert digests == [_want(p, d) for p, d in zip([*prefixes, b"h" * hl], [*datas, clean])]


@HASHERS
def test_unchecked_messages_report_no_nan(hasher) -> None:
    x = np.full(100, np.nan, np.float32)
    _, nan = hasher([b"", b"abc"], [x, x], [False, True])
    assert nan == [False, True]


@HASHERS
def test_no_messages(hasher) -> None:
    assert hasher([], [], []) == ([], [])


def test_the_choice_follows_the_code_generation(monkeypatch: pytest.MonkeyPatch) -> None:
    """A generic CPU (NUMBA_CPU_NAME=generic in the invariance runs) has neither 512-bit rotates nor the SHA
    instructions: hashlib then; AVX-512 picks the lanes, SHA without AVX-512 the streams."""
    import numba

    monkeypatch.setattr(numba.config, "CPU_NAME", "generic")
    assert lanes_fast() is False and streams_fast() is False
    monkeypatch.setattr(numba.config, "CPU_NAME", "skylake-avx512")
    monkeypatch.setattr(numba.config, "CPU_FEATURES", "+avx2,+avx512f,+fma,+sha")
    assert lanes_fast() is True and streams_fast() is True
    monkeypatch.setattr(numba.config, "CPU_FEATURES", "+avx2,-avx512f,+fma,-sha")
    assert lanes_fast() is False and streams_fast() is False
    for features, chosen in (
        ("+avx2,+avx512f,+sha", sha256_lanes),
        ("+avx2,-avx512f,+sha", sha256_streams),
        ("+avx2,-avx512f,-sha", None),
    ):
        monkeypatch.setattr(numba.config, "CPU_FEATURES", features)
        monkeypatch.setattr(cpu_sha256, "_FAST", [])  # decided afresh
        assert state_lanes() is chosen


@HASHERS
def test_strided_and_fortran_arrays_hash_their_c_order_bytes(hasher):
    """A copy made to get C-order bytes is held until the kernel has read it by address (else its memory,
    freed and reused by the next message's staging, would be hashed instead)."""
    rng = np.random.default_rng(7)
    datas = []
    for n in range(40):
        base = rng.standard_normal((64 + n, 48)).astype(np.float32)
        datas.append(base[:, ::3] if n % 2 else np.asfortranarray(base))
    prefixes = [bytes([n]) * n for n in range(len(datas))]
    digests, nan = hasher(prefixes, datas, [True] * len(datas))
    assert digests == [hashlib.sha256(p + np.ascontiguousarray(d).tobytes()).digest() for p, d in zip(prefixes, datas)]
    assert nan == [False] * len(datas)
