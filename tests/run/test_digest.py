"""State and data digests: the documented byte layout, NaN handling, and one digest per content."""

import hashlib
import struct
import threading

import numpy as np
import pytest

from p2paudit import tensor_digest
from p2paudit.errors import InputError
from p2paudit.run.digest import (
    StateDigest,
    combine_tensor_digests,
    digest_batch,
    digest_state,
    digest_tensor,
    format_digest,
    parse_digest,
)


def _by_hand(name: str, dtype: str, shape: tuple, payload: bytes) -> bytes:
    header = b"p2paudit tensor v1\x00" + struct.pack("<I", len(name)) + name.encode()
    header += struct.pack("<I", len(dtype)) + dtype.encode() + struct.pack("<I", len(shape))
    header += b"".join(struct.pack("<Q", d) for d in shape)
    return hashlib.sha256(header + payload).digest()


def test_tensor_digest_follows_the_documented_layout():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert digest_tensor("w", a) == _by_hand("w", "float32", (2, 3), a.tobytes())
    step = np.array(5, dtype=np.int64)  # 0-d: no dims in the header
    assert digest_tensor("step", step) == _by_hand("step", "int64", (), struct.pack("<q", 5))


def test_name_dtype_and_shape_all_count():
    a = np.zeros((2, 3), dtype=np.float32)
    digests = {
        digest_tensor("w", a),
        digest_tensor("v", a),
        digest_tensor("w", a.reshape(3, 2)),
        digest_tensor("w", a.reshape(6)),
        digest_tensor("w", np.zeros((2, 3), dtype=np.int32)),
    }
    assert len(digests) == 5


def test_every_nan_hashes_as_the_canonical_quiet_nan():
    a = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    b, c = a.copy(), a.copy()
    b.view(np.uint32)[1] = 0x7FC00000
    c.view(np.uint32)[1] = 0xFFC12345  # negative NaN with a payload
    assert digest_tensor("x", b) == digest_tensor("x", c)
    assert digest_tensor("x", b) != digest_tensor("x", a)
    assert c.view(np.uint32)[1] == 0xFFC12345  # the caller's array is not touched
    expected = _by_hand(
        "x",
        "float32",
        (3,),
        np.array([1.0, 0, 3.0], np.float32).tobytes()[:4] + struct.pack("<I", 0x7FC00000) + np.float32(3.0).tobytes(),
    )
    assert digest_tensor("x", c) == expected


def test_infinities_are_not_rewritten():
    a = np.array([np.inf, -np.inf], dtype=np.float32)
    assert digest_tensor("x", a) == _by_hand("x", "float32", (2,), a.tobytes())


def test_layout_of_memory_does_not_matter():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert digest_tensor("a", a.T) == digest_tensor("a", np.ascontiguousarray(a.T))
    assert digest_tensor("a", a.astype(">f4")) == digest_tensor("a", a)


def test_state_digest_is_independent_of_dict_order_and_names_tensors():
    s1 = {"b": np.ones(3, np.float32), "a": np.zeros(2, np.float32), "step": np.array(1, np.int64)}
    s2 = {k: s1[k] for k in ("step", "a", "b")}
    d1, d2 = digest_state(s1), digest_state(s2)
    assert d1 == d2
    assert [n for n, _ in d1.tensors] == ["a", "b", "step"]
    s3 = dict(s1, b=np.array([1, 1, 2], np.float32))
    d3 = digest_state(s3)
    assert d3.digest != d1.digest
    assert [n for (n, x), (_, y) in zip(d1.tensors, d3.tensors, strict=True) if x != y] == ["b"]


def test_a_large_state_is_hashed_on_threads_to_the_same_digest(monkeypatch):
    """Above PARALLEL_HASH_BYTES the tensors are digested on every processor (the caller's thread and the
    kept pool's, one list of tensors each): the same tensor and state digests, by the documented layout,
    NaNs canonical, in name order whatever the sizes and the finishing order."""
    rng = np.random.default_rng(7)
    state = {f"t{i:02d}": rng.standard_normal(n).astype(np.float32) for i, n in enumerate([5, 70_000, 3, 200_000, 1])}
    state["t01"][17] = np.float32("nan")
    state["step"] = np.array(3, np.int64)
    serial = digest_state(state)
    canonical = state["t01"].view(np.uint32).copy()
    canonical[17] = 0x7FC00000
    assert serial.tensor_map()["t01"] == _by_hand("t01", "float32", (70_000,), canonical.tobytes())
    seen: list[str] = []
    real = tensor_digest.digest_tensor

    def spy(name, array):
        seen.append(threading.current_thread().name)
        return real(name, array)

    monkeypatch.setattr(tensor_digest, "digest_tensor", spy)
    monkeypatch.setattr(tensor_digest, "_hash_threads", lambda: 3)
    monkeypatch.setattr(tensor_digest, "PARALLEL_HASH_BYTES", 1024)
    assert digest_state(state) == serial
    me = threading.current_thread().name
    # one list of tensors hashed by the caller, the others by the pool (whose idle thread may take two)
    assert len(seen) == 6 and me in seen and any(t.startswith("digest") for t in seen)
    assert set(seen) <= {me} | {t for t in seen if t.startswith("digest")}
    seen.clear()
    assert digest_state(state) == serial  # the pool is kept: the same digests again
    assert len(seen) == 6
    seen.clear()
    monkeypatch.setattr(tensor_digest, "PARALLEL_HASH_BYTES", 10**9)
    assert digest_state(state) == serial
    assert seen == [threading.current_thread().name] * 6  # a small state stays on the caller's thread


def test_a_tensor_is_hashed_chunk_by_chunk_to_the_layout(monkeypatch):
    """A tensor goes through the hash HASH_CHUNK_BYTES at a time, each piece's NaNs made canonical on its own:
    a NaN in a later piece, one on the cut, and infinities (whose sum is NaN) in another give the bytes of the
    documented layout, and the caller's array is not touched."""
    monkeypatch.setattr(tensor_digest, "HASH_CHUNK_BYTES", 64)  # 16 floats a piece
    a = np.arange(100, dtype=np.float32).reshape(4, 25)
    a.view(np.uint32).reshape(-1)[37] = 0xFFC12345  # a NaN with a sign and a payload, in the third piece
    a.view(np.uint32).reshape(-1)[48] = 0x7F800001  # a signalling NaN, the first float of the fourth
    a.reshape(-1)[70:72] = [np.inf, -np.inf]
    before = a.copy()
    canonical = a.view(np.uint32).reshape(-1).copy()
    canonical[[37, 48]] = 0x7FC00000
    assert digest_tensor("w", a) == _by_hand("w", "float32", (4, 25), canonical.tobytes())
    d = np.arange(20, dtype=np.float64)
    d.view(np.uint64)[9] = 0xFFF0000000000001  # a float64 NaN in the second piece (8 floats a piece)
    d_canonical = d.view(np.uint64).copy()
    d_canonical[9] = 0x7FF8000000000000
    assert digest_tensor("d", d) == _by_hand("d", "float64", (20,), d_canonical.tobytes())
    assert np.array_equal(a.view(np.uint32), before.view(np.uint32))
    monkeypatch.setattr(tensor_digest, "HASH_CHUNK_BYTES", 1 << 20)
    assert digest_tensor("w", a) == _by_hand("w", "float32", (4, 25), canonical.tobytes())


def test_state_digest_round_trips_and_catches_inconsistency():
    d = digest_state({"a": np.ones(2, np.float32)})
    assert StateDigest.from_dict(d.to_dict(), "here") == d
    bad = d.to_dict()
    bad["tensors"]["a"] = format_digest(bytes(32))
    with pytest.raises(InputError, match="does not match its 1 tensor digests"):
        StateDigest.from_dict(bad, "here")
    assert combine_tensor_digests(d.tensors) == d.digest


def test_batch_digest_is_the_tensor_digest_named_batch():
    batch = np.arange(2 * 3 * 5, dtype=np.int64).reshape(2, 3, 5)
    assert digest_batch(batch) == _by_hand("batch", "int64", (2, 3, 5), batch.tobytes())


@pytest.mark.parametrize(
    "text, message",
    [
        ("sha256:" + "ab" * 31, "62 hex digits, want 64"),
        ("md5:" + "ab" * 32, "expected 'sha256:"),
        ("sha256:" + "zz" * 32, "not hexadecimal"),
        ("sha256:" + "AB" * 32, "lower-case"),
        (None, "expected 'sha256:"),
    ],
)
def test_parse_digest_rejects_malformed_text(text, message):
    with pytest.raises(InputError, match=message):
        parse_digest(text, "claim")
    assert parse_digest("sha256:" + "ab" * 32) == bytes([0xAB]) * 32


def test_unsupported_arrays_are_refused():
    with pytest.raises(InputError, match="cannot digest"):
        digest_tensor("h", np.zeros(2, dtype=np.float16))
    with pytest.raises(InputError, match="cannot digest"):
        digest_tensor("s", np.array(["a"]))
    with pytest.raises(InputError, match="cannot digest list"):
        digest_tensor("l", [1.0])


def test_a_hash_pool_replaced_by_a_larger_one_still_takes_its_holders_work():
    """Another thread asking for more workers replaces the kept pool; one still holding the old pool can
    submit to it (it was shut down under it once: 'cannot schedule new futures after shutdown')."""
    from p2paudit.tensor_digest import _HashPool

    pool = _HashPool()
    small = pool.get(1)
    large = pool.get(2)
    assert large is not small and pool.get(2) is large
    assert small.submit(lambda: 7).result(timeout=5) == 7
