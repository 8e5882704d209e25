"""Checkpoints are plain safetensors: the official library reads ours, ours reads the library's, and the
strict header parser refuses what the format forbids."""

import json
import struct

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from p2paudit.engine.config import train_config
from p2paudit.engine.state import init_state, state_names, state_shapes
from p2paudit.errors import InputError
from p2paudit.run.checkpoint import CheckpointWriter, checkpoint_path, encode_checkpoint, load_checkpoint
from p2paudit.run.checkpoint_layout import parse_layout
from p2paudit.run.digest import digest_state

CFG = train_config("tiny")


def _state():
    state = init_state(CFG)
    rng = np.random.default_rng(7)
    for name in state:
        if name.startswith("opt/"):
            state[name] = rng.standard_normal(state[name].shape).astype(np.float32)
    return state


def _metadata(step: int, state) -> dict:
    return {
        "format": "p2paudit-checkpoint",
        "version": "1",
        "step": str(step),
        "state_digest": digest_state(state).text(),
    }


def test_the_library_reads_a_checkpoint_written_tensor_by_tensor(tmp_path):
    state = _state()
    with CheckpointWriter(tmp_path / checkpoint_path(3), 3, state_shapes(CFG)) as writer:
        for name in reversed(list(state)):  # any order: every offset is known up front
            writer.write(name, state[name])
        writer.finish(digest_state(state))
    blob = (tmp_path / checkpoint_path(3)).read_bytes()
    assert blob == encode_checkpoint(3, state, digest_state(state))
    loaded = load_file(str(tmp_path / checkpoint_path(3)))
    assert sorted(loaded) == sorted(state)
    assert all(np.array_equal(loaded[n], state[n]) and loaded[n].dtype == state[n].dtype for n in state)


def test_a_checkpoint_the_library_wrote_is_read_and_verified(tmp_path):
    state = _state()
    target = tmp_path / checkpoint_path(3)
    target.parent.mkdir(parents=True)
    save_file(state, str(target), metadata=_metadata(3, state))
    assert target.read_bytes() != encode_checkpoint(3, state, digest_state(state))  # another layout
    got = load_checkpoint(tmp_path, 3, digest_state(state), state_names(CFG), state_shapes(CFG))
    assert digest_state(got) == digest_state(state)


def _header(entries: dict) -> bytes:
    return json.dumps(entries).encode()


SHAPES = {"a": ((2, 3), np.dtype(np.float32)), "b": ((), np.dtype(np.int64))}


@pytest.mark.parametrize(
    "entries, message",
    [
        ({"a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}}, "tensors missing \\['b'\\]"),
        (
            {
                "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
                "b": {"dtype": "I64", "shape": [], "data_offsets": [16, 24]},
            },
            "tensor b overlaps another",
        ),
        (
            {
                "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
                "b": {"dtype": "I64", "shape": [], "data_offsets": [32, 40]},
            },
            "tensor b leaves a gap of 8 bytes",
        ),
        (
            {
                "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]},
                "b": {"dtype": "I64", "shape": [], "data_offsets": [20, 28]},
            },
            "tensor a spans 20 bytes, want 24",
        ),
        (
            {
                "a": {"dtype": "F32", "shape": [True, 3], "data_offsets": [0, 24]},
                "b": {"dtype": "I64", "shape": [], "data_offsets": [24, 32]},
            },
            "tensor a is F32 \\[True, 3\\]",
        ),
        (
            {
                "a": {"dtype": "F64", "shape": [2, 3], "data_offsets": [0, 48]},
                "b": {"dtype": "I64", "shape": [], "data_offsets": [48, 56]},
            },
            "tensor a is F64",
        ),
        (
            {
                "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24.0]},
                "b": {"dtype": "I64", "shape": [], "data_offsets": [24, 32]},
            },
            "data_offsets is not two non-negative integers",
        ),
        ([1, 2], "header is not a JSON object"),
    ],
)
def test_the_header_parser_refuses_what_the_format_forbids(entries, message):
    with pytest.raises(InputError, match=message):
        parse_layout(_header(entries), SHAPES, "checkpoint x")


def test_trailing_bytes_and_a_huge_header_length_are_refused(tmp_path):
    state = _state()
    target = tmp_path / checkpoint_path(1)
    target.parent.mkdir(parents=True)
    blob = encode_checkpoint(1, state, digest_state(state))
    target.write_bytes(blob + b"\0" * 8)
    with pytest.raises(InputError, match="its header says"):
        load_checkpoint(tmp_path, 1, digest_state(state), state_names(CFG), state_shapes(CFG))
    target.write_bytes(struct.pack("<Q", 1 << 40) + blob[8:])
    with pytest.raises(InputError, match="header length 1099511627776"):
        load_checkpoint(tmp_path, 1, digest_state(state), state_names(CFG), state_shapes(CFG))
