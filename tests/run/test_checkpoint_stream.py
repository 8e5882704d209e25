"""A checkpoint digested from a pipe (run.checkpoint_stream): the same digest as the file's, however its bytes
are cut, and one line for what a hostile sender sends instead (the lab replay's child is such a sender)."""

import json
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from p2paudit.errors import InputError
from p2paudit.run.checkpoint import checkpoint_bound, encode_checkpoint
from p2paudit.run.checkpoint_stream import CheckpointStream
from p2paudit.run.digest import digest_state, digest_tensor
from p2paudit.tensor_digest import TensorHasher


def _state() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    w = rng.standard_normal((5, 7)).astype(np.float32)
    w[1, 2] = np.float32("nan")  # written as the canonical NaN by the digest: both ways
    w.view(np.uint32)[3, 4] = 0x7FC00123  # a NaN with another payload
    return {
        "w": w,
        "b": rng.standard_normal(9),  # float64
        "step": np.array(4, dtype=np.int64),  # 0-d
        "empty": np.zeros((0, 3), dtype=np.float32),
        "mask": np.array([True, False, True]),
        "é": np.arange(5, dtype=np.int32),  # sorted by its UTF-8 bytes
    }


STATE = _state()
DIGEST = digest_state(STATE)
BYTES = encode_checkpoint(7, STATE, DIGEST)
BOUND = checkpoint_bound(None, len(STATE))


def _stream(data: bytes, cuts: list[int], bound: int = BOUND, names: list[str] | None = None, step: int = 7):
    stream = CheckpointStream(step, names or list(STATE), bound, "allowed", "the pipe")
    edges = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    for a, b in zip(edges, edges[1:]):
        stream.feed(data[a:b])
    return stream.finish()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0), max_size=12))
def test_the_digest_is_the_states_however_the_bytes_are_cut(cuts):
    assert _stream(BYTES, cuts) == DIGEST


def test_a_changed_byte_changes_the_digest():
    data_start = 8 + int.from_bytes(BYTES[:8], "little")
    w_start = len(BYTES) - STATE["é"].nbytes - STATE["w"].nbytes  # "w" sorts before "é", last
    for at in (data_start, w_start, len(BYTES) - 1):  # b's first byte, w's first element, é's last byte
        changed = bytearray(BYTES)
        changed[at] ^= 0x01
        assert _stream(bytes(changed), [at]).digest != DIGEST.digest


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["float32", "float64", "int64", "int32", "uint8", "bool"]), st.integers(0, 40), st.data())
def test_the_hasher_is_digest_tensor_in_pieces_of_any_length(dtype, size, data):
    array = np.frombuffer(data.draw(st.binary(min_size=size * 8, max_size=size * 8)), dtype=np.uint8)
    array = array[: size * np.dtype(dtype).itemsize].view(dtype) if dtype != "bool" else array[:size] > 127
    raw = array.astype(array.dtype.newbyteorder("<")).tobytes()
    hasher = TensorHasher("t", array.dtype, array.shape)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=6)))
    for a, b in zip([0, *cuts], [*cuts, len(raw)]):
        hasher.update(raw[a:b])
    assert hasher.digest() == digest_tensor("t", array)


def test_a_stream_that_ends_early_or_goes_on_is_one_line():
    with pytest.raises(InputError, match=f"^the pipe: ended after {len(BYTES) - 1} bytes of the {len(BYTES)} its"):
        _stream(BYTES[:-1], [])
    with pytest.raises(InputError, match="^the pipe: ended after 5 bytes$"):
        _stream(BYTES[:5], [])
    with pytest.raises(InputError, match=f"^the pipe: more bytes than the {len(BYTES)} its header gives$"):
        _stream(BYTES + b"\x00", [len(BYTES)])


def test_a_header_past_the_bound_is_refused_before_any_tensor():
    stream = CheckpointStream(7, list(STATE), len(BYTES) - 1, "the state its step starts from has", "the pipe")
    with pytest.raises(InputError, match=f"gives {len(BYTES)} bytes, more than the {len(BYTES) - 1} the state its"):
        stream.feed(BYTES[:100_000])


def _header(entries: dict, step: str = "7") -> bytes:
    meta = {"format": "p2paudit-checkpoint", "version": "1", "step": step, "state_digest": "sha256:" + "0" * 64}
    body = json.dumps({"__metadata__": meta, **entries}).encode()
    return struct.pack("<Q", len(body)) + body


@pytest.mark.parametrize(
    ("data", "names", "message"),
    [
        (struct.pack("<Q", 1 << 40), ["a"], "not a valid safetensors file: header length 1099511627776"),
        (_header({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, step="8"), ["a"], "metadata"),
        (_header({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}), ["b"], "tensor b is missing"),
        (_header({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}), ["a"], "spans 4 bytes, want 8"),
        (_header({"a": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}}), ["a"], "no known dtype"),
        (_header({"a": {"dtype": "F32", "shape": [1 << 34], "data_offsets": [0, 1 << 36]}}), ["a"], "not a bounded"),
        (b"\x10" + b"\x00" * 7 + b"[1, 2, 3]       ", ["a"], "not a JSON object|missing"),
    ],
)
def test_a_malformed_head_is_one_line_naming_the_pipe(data, names, message):
    stream = CheckpointStream(7, names, BOUND, "allowed", "the pipe")
    with pytest.raises(InputError, match=f"^the pipe.*({message})"):
        stream.feed(data + b"\x00" * 64)
