"""Token-id data: import of train.bin and .npy, version-2 shards, every bad input refused in one line."""

import json
import struct

import numpy as np
import pytest

from p2paudit.errors import InputError
from p2paudit.run.data_dir import import_tokens, read_data_dir
from p2paudit.run.manifest_body import check_data_for_config
from p2paudit.run.shards import (
    SHARD_HEADER_IDS,
    SHARD_TOKENS,
    DataSpec,
    describe_corpus,
    load_tokens,
)


def _one_line(info):
    assert "\n" not in str(info.value)
    return str(info.value)


def test_import_train_bin_uint16(tmp_path):
    ids = np.random.default_rng(0).integers(0, 50257, SHARD_TOKENS + 1000).astype("<u2")
    ids.tofile(tmp_path / "train.bin")
    spec = import_tokens(tmp_path / "train.bin", 50304, tmp_path / "data")
    assert (spec.dtype, spec.vocab_size, spec.tokens, len(spec.shards)) == ("uint16", 50304, ids.size, 2)
    assert spec.corpus == "train.bin"
    again, tokens = read_data_dir(tmp_path / "data")
    assert again == spec and tokens.dtype == np.uint16 and np.array_equal(tokens, ids)
    assert DataSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    blob = (tmp_path / "data" / spec.shards[0].path).read_bytes()
    assert blob[:8] == b"P2PSHARD" and struct.unpack_from("<I", blob, 8)[0] == 2
    assert len(blob) == SHARD_HEADER_IDS.size + 2 * SHARD_TOKENS


@pytest.mark.parametrize("dtype", ["<i8", ">u2", "<u4", "<i2"])
def test_import_npy_any_integer_dtype_uint32_above_65536(tmp_path, dtype):
    vocab = 100_000 if np.dtype(dtype).itemsize >= 4 else 30_000
    ids = np.random.default_rng(1).integers(0, vocab, 3000).astype(dtype)
    np.save(tmp_path / "ids.npy", ids)
    spec = import_tokens(tmp_path / "ids.npy", vocab, tmp_path / "data", "my corpus")
    assert spec.dtype == ("uint32" if vocab > 65536 else "uint16") and spec.corpus == "my corpus"
    _, tokens = read_data_dir(tmp_path / "data")
    assert np.array_equal(tokens.astype(np.int64), ids.astype(np.int64))


def test_import_refuses_bad_ids_shapes_and_truncation(tmp_path):
    np.array([1, 2, 300, 4], "<u2").tofile(tmp_path / "t.bin")
    with pytest.raises(InputError, match=r"position 2 is id 300, not in \[0, 300\)") as info:
        import_tokens(tmp_path / "t.bin", 300, tmp_path / "a")
    _one_line(info)
    np.save(tmp_path / "neg.npy", np.array([0, -1], np.int32))
    with pytest.raises(InputError, match="position 1 is id -1"):
        import_tokens(tmp_path / "neg.npy", 300, tmp_path / "b")
    np.save(tmp_path / "f.npy", np.zeros(4, np.float32))
    with pytest.raises(InputError, match="want an integer dtype"):
        import_tokens(tmp_path / "f.npy", 300, tmp_path / "c")
    np.save(tmp_path / "two.npy", np.zeros((2, 2), np.int32))
    with pytest.raises(InputError, match="want a 1-d array"):
        import_tokens(tmp_path / "two.npy", 300, tmp_path / "d")
    np.save(tmp_path / "cut.npy", np.arange(100, dtype=np.int32))
    raw = (tmp_path / "cut.npy").read_bytes()
    (tmp_path / "cut.npy").write_bytes(raw[:-3])
    with pytest.raises(InputError, match="truncated"):
        import_tokens(tmp_path / "cut.npy", 300, tmp_path / "e")
    (tmp_path / "odd.bin").write_bytes(b"\x01\x00\x02")
    with pytest.raises(InputError, match="odd number"):
        import_tokens(tmp_path / "odd.bin", 300, tmp_path / "f")
    with pytest.raises(InputError, match="--vocab-size is 131073"):
        import_tokens(tmp_path / "odd.bin", 2**17 + 1, tmp_path / "g")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(InputError, match="not an empty directory"):
        import_tokens(tmp_path / "t.bin", 1000, tmp_path / "full")


@pytest.fixture
def imported(tmp_path):
    np.arange(2000, dtype="<u2").__mod__(300).astype("<u2").tofile(tmp_path / "train.bin")
    return import_tokens(tmp_path / "train.bin", 300, tmp_path / "data"), tmp_path / "data"


def test_load_refuses_a_truncated_shard_and_a_longer_one(imported):
    spec, data_dir = imported
    shard = data_dir / spec.shards[0].path
    blob = shard.read_bytes()
    shard.write_bytes(blob[:-2])
    with pytest.raises(InputError, match=r"has 4038 bytes, want 4040 .*as the manifest says") as info:
        load_tokens(data_dir, spec)
    _one_line(info)
    shard.write_bytes(blob + b"\x00\x00")
    with pytest.raises(InputError, match="more than the 4040 allowed"):
        load_tokens(data_dir, spec)


def test_load_refuses_a_manifest_that_claims_more_tokens_than_the_shard(imported):
    spec, data_dir = imported
    d = spec.to_dict()
    d["shards"][0]["tokens"] = d["tokens"] = 2001
    longer = DataSpec.from_dict(d)
    with pytest.raises(InputError, match="has 4040 bytes, want 4042"):
        load_tokens(data_dir, longer)


def test_load_refuses_an_id_outside_the_vocabulary_naming_shard_and_position(imported, tmp_path):
    spec, data_dir = imported
    from p2paudit.run.digest import digest_bytes
    from p2paudit.run.shards import encode_ids_shard

    ids = np.arange(2000, dtype=np.uint16) % 300
    ids[1234] = 300  # a publisher that wrote a bad id: digests consistent, id not below vocab_size
    blob = encode_ids_shard(0, 0, ids, 300)
    (data_dir / spec.shards[0].path).write_bytes(blob)
    d = spec.to_dict()
    d["shards"][0]["digest"] = "sha256:" + digest_bytes(blob).hex()
    d["data_key"] = "sha256:" + digest_bytes(ids.astype("<u2").tobytes()).hex()
    with pytest.raises(
        InputError, match=r"shard .*shard-00000.bin: token 1234 \(position 1234 of the data\) is id 300"
    ):
        load_tokens(data_dir, DataSpec.from_dict(d))


@pytest.mark.parametrize(
    "mutate,message",
    [
        (lambda d: d.update(dtype="uint32"), "dtype is 'uint32', want 'uint16'"),
        (lambda d: d.update(vocab_size=0), "vocab_size is 0"),
        (lambda d: d.update(vocab_size=True), "vocab_size is True"),
        (lambda d: d.pop("dtype"), "lacks"),
        (lambda d: d.update(corpus="\n"), "printable ASCII"),
        (lambda d: d.update(tokens=3), "shards' total"),
        (lambda d: d.update(tokenizer="bpe"), r"unknown keys \['dtype', 'vocab_size'\]"),
    ],
)
def test_data_spec_fields_are_strict(imported, mutate, message):
    d = imported[0].to_dict()
    mutate(d)
    with pytest.raises(InputError, match=message):
        DataSpec.from_dict(d)


def test_byte_corpus_spec_is_unchanged_and_the_vocab_must_cover_the_ids(imported):
    from p2paudit.engine.config import train_config

    corpus = describe_corpus("pydoc_topics.txt")
    assert set(corpus.to_dict()) == {"corpus", "data_key", "shards", "tokenizer", "tokens"}
    cfg = train_config("tiny")
    check_data_for_config(corpus, cfg)
    with pytest.raises(InputError, match="vocab_size is 256, but the data's token ids lie below 300"):
        check_data_for_config(imported[0], cfg)
