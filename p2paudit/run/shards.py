"""The training data, cut into digested shard files: the built-in byte corpus, or imported token ids.

Two kinds of data (docs/run-format.md specifies both byte for byte):

- byte tokens (tokenizer "utf8-bytes", vocabulary 256): the built-in corpus,
  one token per byte of its UTF-8 text, in version-1 shards;
- token ids (tokenizer "token-ids"): ids from any tokenizer below a stated
  vocab_size, stored as little-endian uint16 when vocab_size <= 65,536 and
  uint32 otherwise, in version-2 shards, written by `data_dir.import_tokens`
  (`p2paudit data import`) into a data directory (data.json + shards/).

Version-1 shard (struct "<8sIIQQ", 32 bytes, then count uint8 tokens):

    magic b"P2PSHARD" | version u32 = 1 | index u32 | offset u64 | count u64

Version-2 shard (struct "<8sIIQQII", 40 bytes, then count tokens of `width` bytes):

    magic b"P2PSHARD" | version u32 = 2 | index u32 | offset u64 | count u64
    | width u32 (2 or 4) | vocab_size u32

A shard's digest is the SHA-256 of the whole file (header included). The data
key that the schedule draws batches with is the SHA-256 of all tokens
concatenated as stored (headers excluded); the schedule uses its 32 raw bytes.
Every shard but the last holds SHARD_TOKENS tokens.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, NotRequired, TypedDict

import numpy as np

from p2paudit.engine.config import MAX_VOCAB
from p2paudit.errors import InputError
from p2paudit.run.digest import digest_bytes, format_digest, parse_digest
from p2paudit.run.storage import read_file, write_atomic

SHARD_MAGIC = b"P2PSHARD"
SHARD_VERSION = 1
SHARD_HEADER = struct.Struct("<8sIIQQ")
SHARD_TOKENS = 65536  # tokens per shard; the last shard holds the rest
CORPUS_NAME = "pydoc_topics.txt"
TOKENIZER = "utf8-bytes"
KNOWN_CORPORA = frozenset({CORPUS_NAME})  # a corpus name fixes its bytes: see describe_corpus
TOKEN_IDS = "token-ids"  # the tokenizer of imported data: ids from any tokenizer, below vocab_size
SHARD_VERSION_IDS = 2
SHARD_HEADER_IDS = struct.Struct("<8sIIQQII")
TOKEN_DTYPES = {"uint16": 2, "uint32": 4}  # little-endian in the shard files
MAX_DATA_TOKENS = 2**32  # the schedule draws windows from at most 2^32 + seq_len tokens
MAX_CORPUS_CHARS = 64
DATA_KEYS = ("corpus", "data_key", "shards", "tokenizer", "tokens")
DATA_KEYS_IDS = ("corpus", "data_key", "dtype", "shards", "tokenizer", "tokens", "vocab_size")


def token_dtype_for(vocab_size: int) -> str:
    """The stored dtype of token ids below vocab_size: uint16 when they fit, else uint32."""
    return "uint16" if vocab_size <= 65536 else "uint32"


class ShardDict(TypedDict):
    path: str
    tokens: int
    digest: str


class DataDict(TypedDict):
    """DataSpec.to_dict: the manifest's "data" object (dtype and vocab_size for token ids only)."""

    tokenizer: str
    corpus: str
    tokens: int
    data_key: str
    shards: list[ShardDict]
    dtype: NotRequired[str]
    vocab_size: NotRequired[int]


@dataclass(frozen=True)
class ShardInfo:
    """One shard file: its path relative to the run directory, size in tokens and file digest."""

    path: str
    tokens: int
    digest: bytes

    def to_dict(self) -> ShardDict:
        return {"path": self.path, "tokens": self.tokens, "digest": format_digest(self.digest)}


@dataclass(frozen=True)
class DataSpec:
    """What the manifest says about the data: tokenizer, corpus, total size, data key, shards.

    For token ids (tokenizer TOKEN_IDS) also the stored dtype and the vocabulary
    every id lies below; byte tokens are uint8 below 256 and their object has
    neither key (so runs written before token ids existed keep their bytes and ids).
    """

    tokenizer: str
    corpus: str
    tokens: int
    data_key: bytes
    shards: tuple[ShardInfo, ...]
    dtype: str = "uint8"
    vocab_size: int = 256

    @property
    def token_ids(self) -> bool:
        return self.tokenizer == TOKEN_IDS

    @property
    def token_bytes(self) -> int:
        return TOKEN_DTYPES[self.dtype] if self.token_ids else 1

    def shard_bytes(self, info: ShardInfo) -> int:
        """The exact size of a shard file: its header and `info.tokens` tokens of token_bytes each."""
        header = SHARD_HEADER_IDS if self.token_ids else SHARD_HEADER
        return header.size + info.tokens * self.token_bytes

    def to_dict(self) -> DataDict:
        out: DataDict = {
            "tokenizer": self.tokenizer,
            "corpus": self.corpus,
            "tokens": self.tokens,
            "data_key": format_digest(self.data_key),
            "shards": [s.to_dict() for s in self.shards],
        }
        if self.token_ids:
            out["dtype"] = self.dtype
            out["vocab_size"] = self.vocab_size
        return out

    @staticmethod
    def from_dict(data: object) -> DataSpec:
        """Parse the manifest's "data" object strictly; InputError naming the bad field and value.

        Exactly the keys of `to_dict`, exact types, every shard but the last
        holding SHARD_TOKENS tokens, `tokens` their total. Byte tokens must name
        a known corpus: since a corpus name fixes its bytes, the whole object
        must be what `describe_corpus` gives for that name (shard digests and
        data key included). Token ids need a vocab_size 1..MAX_VOCAB, the dtype
        that vocabulary implies, and a corpus name of printable ASCII.
        """
        if isinstance(data, dict) and data.get("tokenizer") == TOKEN_IDS:
            return _token_ids_from_dict(data)
        fields = _check_keys(data, DATA_KEYS, "manifest data")
        if fields["tokenizer"] != TOKENIZER:
            raise InputError(
                f"manifest data.tokenizer is {str(fields['tokenizer'])[:80]!r}, want {TOKENIZER!r} or {TOKEN_IDS!r}"
            )
        corpus = fields["corpus"]
        if corpus not in KNOWN_CORPORA:
            raise InputError(f"manifest data.corpus is {str(corpus)[:80]!r}, want one of {sorted(KNOWN_CORPORA)}")
        infos, tokens = _parse_shards(fields)
        spec = DataSpec(TOKENIZER, corpus, tokens, parse_digest(fields["data_key"], "manifest data.data_key"), infos)
        expected = describe_corpus(corpus)
        if spec != expected:
            raise InputError(
                f"manifest data does not describe corpus {corpus!r}: it has {spec.tokens} tokens in "
                f"{len(spec.shards)} shards with data key {format_digest(spec.data_key)}, the corpus has "
                f"{expected.tokens} in {len(expected.shards)} with {format_digest(expected.data_key)}"
                + (
                    ""
                    if spec.data_key != expected.data_key or spec.tokens != expected.tokens
                    else " (a shard digest differs)"
                )
            )
        return spec


def _token_ids_from_dict(data: dict[str, Any]) -> DataSpec:
    _check_keys(data, DATA_KEYS_IDS, "manifest data")
    vocab = data["vocab_size"]
    if type(vocab) is not int or not 1 <= vocab <= MAX_VOCAB:
        raise InputError(f"manifest data.vocab_size is {str(vocab)[:80]}, want an integer 1..{MAX_VOCAB}")
    dtype = data["dtype"]
    if dtype != token_dtype_for(vocab):
        raise InputError(
            f"manifest data.dtype is {str(dtype)[:80]!r}, want {token_dtype_for(vocab)!r} for vocab_size {vocab}"
        )
    corpus = data["corpus"]
    check_corpus_name(corpus, "manifest data.corpus")
    infos, tokens = _parse_shards(data)
    if tokens > MAX_DATA_TOKENS:
        raise InputError(f"manifest data.tokens is {tokens}, more than the {MAX_DATA_TOKENS} allowed")
    key = parse_digest(data["data_key"], "manifest data.data_key")
    return DataSpec(TOKEN_IDS, corpus, tokens, key, infos, dtype, vocab)


def check_corpus_name(name: object, where: str) -> str:
    """`name` if it is 1..MAX_CORPUS_CHARS printable ASCII characters without outer spaces."""
    if not (
        isinstance(name, str)
        and 1 <= len(name) <= MAX_CORPUS_CHARS
        and name.isascii()
        and name.isprintable()
        and name.strip() == name
    ):
        raise InputError(f"{where} is {str(name)[:80]!r}, want 1..{MAX_CORPUS_CHARS} printable ASCII characters")
    return name


def _parse_shards(data: dict[str, Any]) -> tuple[tuple[ShardInfo, ...], int]:
    shards = data["shards"]
    if not isinstance(shards, list) or not shards:
        raise InputError("manifest data.shards must be a non-empty list")
    if len(shards) > MAX_DATA_TOKENS // SHARD_TOKENS + 1:
        raise InputError(f"manifest data.shards has {len(shards)} entries, more than {MAX_DATA_TOKENS} tokens need")
    infos = tuple(_parse_shard(s, i, i == len(shards) - 1) for i, s in enumerate(shards))
    tokens, total = data["tokens"], sum(s.tokens for s in infos)
    if type(tokens) is not int or tokens != total:
        raise InputError(f"manifest data.tokens is {str(tokens)[:80]}, want the shards' total {total}")
    return infos, tokens


def _check_keys(value: object, keys: tuple[str, ...], where: str) -> dict[str, Any]:
    """`value` if it is a JSON object with exactly `keys` (its values are the caller's to check)."""
    if not isinstance(value, dict):
        raise InputError(f"{where} is a {type(value).__name__}, want an object")
    if set(value) != set(keys):
        unknown, missing = sorted(set(value) - set(keys)), sorted(set(keys) - set(value))
        raise InputError(
            f"{where} has unknown keys {[k[:80] for k in unknown[:4]]} and lacks {missing}, want exactly {list(keys)}"
        )
    return value


def _parse_shard(item: object, index: int, last: bool) -> ShardInfo:
    where = f"manifest data.shards[{index}]"
    fields = _check_keys(item, ("digest", "path", "tokens"), where)
    path, tokens = fields["path"], fields["tokens"]
    if path != shard_path(index):
        raise InputError(f"{where}.path is {str(path)[:80]!r}, want {shard_path(index)!r}")
    if type(tokens) is not int or not (1 <= tokens <= SHARD_TOKENS if last else tokens == SHARD_TOKENS):
        want = f"1..{SHARD_TOKENS} (the last shard)" if last else f"{SHARD_TOKENS} (every shard but the last)"
        raise InputError(f"{where}.tokens is {str(tokens)[:80]}, want {want}")
    return ShardInfo(path, tokens, parse_digest(fields["digest"], f"{where}.digest"))


def shard_path(index: int) -> str:
    """Relative path of shard `index` inside a run directory."""
    return f"shards/shard-{index:05d}.bin"


def corpus_tokens() -> np.ndarray:
    """The built-in corpus (shipped with the package) as uint8 byte tokens."""
    text = resources.files("p2paudit.run").joinpath("corpus", CORPUS_NAME).read_bytes()
    return np.frombuffer(text, dtype=np.uint8)


def encode_shard(index: int, offset: int, tokens: np.ndarray) -> bytes:
    """The bytes of one shard file."""
    return SHARD_HEADER.pack(SHARD_MAGIC, SHARD_VERSION, index, offset, tokens.size) + tokens.tobytes()


def _shard_blobs(tokens: np.ndarray, shard_tokens: int = SHARD_TOKENS) -> list[tuple[str, int, bytes]]:
    """(relative path, token count, file bytes) of every shard of `tokens`."""
    return [
        (
            shard_path(index),
            min(shard_tokens, tokens.size - start),
            encode_shard(index, start, tokens[start : start + shard_tokens]),
        )
        for index, start in enumerate(range(0, tokens.size, shard_tokens))
    ]


def _describe(tokens: np.ndarray, corpus: str, blobs: list[tuple[str, int, bytes]]) -> DataSpec:
    infos = tuple(ShardInfo(path, count, digest_bytes(blob)) for path, count, blob in blobs)
    return DataSpec(TOKENIZER, corpus, int(tokens.size), digest_bytes(tokens.tobytes()), infos)


@functools.lru_cache(maxsize=4)
def describe_corpus(name: str) -> DataSpec:
    """The DataSpec of the known corpus `name`, as write_shards describes it (computed, nothing written)."""
    if name not in KNOWN_CORPORA:
        raise InputError(f"unknown corpus {name[:80]!r}, want one of {sorted(KNOWN_CORPORA)}")
    tokens = corpus_tokens()
    return _describe(tokens, name, _shard_blobs(tokens))


def write_shards(run_dir: Path, tokens: np.ndarray, shard_tokens: int = SHARD_TOKENS) -> DataSpec:
    """Cut `tokens` (uint8, non-empty) into shard files under run_dir/shards and describe them."""
    if tokens.dtype != np.uint8 or tokens.size == 0:
        raise InputError(f"corpus must be non-empty uint8 tokens, got {tokens.size} of {tokens.dtype}")
    blobs = _shard_blobs(tokens, shard_tokens)
    for path, _, blob in blobs:
        write_atomic(run_dir / path, blob)
    return _describe(tokens, CORPUS_NAME, blobs)


def load_tokens(run_dir: Path, spec: DataSpec) -> np.ndarray:
    """Read and check every shard; the concatenated tokens (uint8 bytes, or uint16/uint32 ids).

    Raises InputError naming the shard file when it is missing, shorter or
    longer than the manifest says, its digest is not the manifest's, its
    header disagrees with the manifest, or (token ids) an id is not below
    vocab_size (naming its position).
    """
    width = spec.token_bytes
    offsets = shard_offsets(spec)
    parts = [_load_shard(run_dir, spec, index, offsets[index]) for index in range(len(spec.shards))]
    tokens = np.concatenate(parts)
    stored = tokens.astype("<u" + str(width), copy=False)  # the data key hashes the stored little-endian bytes
    if digest_bytes(stored.tobytes()) != spec.data_key:
        raise InputError(f"shards in {run_dir / 'shards'} do not add up to the manifest's data key")
    return tokens


def shard_offsets(spec: DataSpec) -> list[int]:
    """Where each shard's first token lies in the token stream (the tokens of the shards before it)."""
    offsets, total = [], 0
    for info in spec.shards:
        offsets.append(total)
        total += info.tokens
    return offsets


def _load_shard(run_dir: Path, spec: DataSpec, index: int, offset: int) -> np.ndarray:
    """Read and check shard `index` (size, digest, header, ids below vocab_size), which starts at
    token `offset` of the stream; its tokens."""
    info = spec.shards[index]
    width = spec.token_bytes
    header = SHARD_HEADER_IDS if spec.token_ids else SHARD_HEADER
    path = run_dir / info.path
    size = spec.shard_bytes(info)
    blob = read_file(path, "shard", size, run_dir)
    if len(blob) != size:
        raise InputError(
            f"shard {path} has {len(blob)} bytes, want {size} (a {header.size}-byte header and "
            f"{info.tokens} tokens of {width} byte(s), as the manifest says)"
        )
    if digest_bytes(blob) != info.digest:
        raise InputError(
            f"shard {path}: digest {format_digest(digest_bytes(blob))} is not the manifest's {format_digest(info.digest)}"
        )
    if spec.token_ids:
        return _decode_ids_shard(path, blob, index, offset, info.tokens, spec)
    return _decode_shard(path, blob, index, offset, info.tokens)


def load_token_subset(run_dir: Path, spec: DataSpec, indices: Iterable[int]) -> np.ndarray:
    """The whole token stream's array with only the shards `indices` read (each checked as load_tokens
    checks it) and every other token 0.

    The array is allocated zeroed (np.zeros: pages the OS maps on first
    write), so the untouched shards cost address space, not memory. The
    data key covers the whole stream and is not checked here: a caller that
    needs it loads every shard with load_tokens. A reader of this array must
    index only tokens of the loaded shards (step_shards.shards_for_steps).
    """
    offsets = shard_offsets(spec)
    tokens = np.zeros(spec.tokens, dtype=np.dtype(spec.dtype) if spec.token_ids else np.uint8)
    for index in sorted(set(indices)):
        if not 0 <= index < len(spec.shards):
            raise InputError(f"shard index {index} is outside the data's {len(spec.shards)} shards")
        part = _load_shard(run_dir, spec, index, offsets[index])
        tokens[offsets[index] : offsets[index] + part.size] = part
    return tokens


def _decode_shard(path: Path, blob: bytes, index: int, offset: int, count: int) -> np.ndarray:
    if len(blob) < SHARD_HEADER.size:
        raise InputError(f"shard {path} has {len(blob)} bytes, shorter than its {SHARD_HEADER.size}-byte header")
    magic, version, got_index, got_offset, got_count = SHARD_HEADER.unpack_from(blob)
    if magic != SHARD_MAGIC or version != SHARD_VERSION:
        raise InputError(
            f"shard {path} has magic {magic!r} version {version}, want {SHARD_MAGIC!r} version {SHARD_VERSION}"
        )
    if (got_index, got_offset, got_count) != (index, offset, count) or len(blob) != SHARD_HEADER.size + count:
        raise InputError(
            f"shard {path} header says index {got_index} offset {got_offset} count {got_count}, "
            f"want {index} {offset} {count}"
        )
    return np.frombuffer(blob, dtype=np.uint8, offset=SHARD_HEADER.size)


def _decode_ids_shard(path: Path, blob: bytes, index: int, offset: int, count: int, spec: DataSpec) -> np.ndarray:
    width = TOKEN_DTYPES[spec.dtype]
    if len(blob) < SHARD_HEADER_IDS.size:
        raise InputError(f"shard {path} has {len(blob)} bytes, shorter than its {SHARD_HEADER_IDS.size}-byte header")
    magic, version, got_index, got_offset, got_count, got_width, got_vocab = SHARD_HEADER_IDS.unpack_from(blob)
    if magic != SHARD_MAGIC or version != SHARD_VERSION_IDS:
        raise InputError(
            f"shard {path} has magic {magic!r} version {version}, want {SHARD_MAGIC!r} version {SHARD_VERSION_IDS}"
        )
    got = (got_index, got_offset, got_count, got_width, got_vocab)
    want = (index, offset, count, width, spec.vocab_size)
    if got != want or len(blob) != SHARD_HEADER_IDS.size + count * width:
        raise InputError(
            f"shard {path} header says index/offset/count/width/vocab_size {got}, want {want} "
            f"and {SHARD_HEADER_IDS.size + count * width} bytes in all"
        )
    ids = np.frombuffer(blob, dtype="<u" + str(width), offset=SHARD_HEADER_IDS.size).astype(spec.dtype, copy=False)
    bad = np.flatnonzero(ids >= spec.vocab_size)
    if bad.size:
        raise InputError(
            f"shard {path}: token {int(bad[0])} (position {offset + int(bad[0])} of the data) is id "
            f"{int(ids[bad[0]])}, not below vocab_size {spec.vocab_size}"
        )
    return ids


def encode_ids_shard(index: int, offset: int, ids: np.ndarray, vocab_size: int) -> bytes:
    """The bytes of one version-2 shard of token ids (`ids` already in token_dtype_for(vocab_size))."""
    width = TOKEN_DTYPES[token_dtype_for(vocab_size)]
    stored = ids.astype("<u" + str(width), copy=False)
    header = SHARD_HEADER_IDS.pack(SHARD_MAGIC, SHARD_VERSION_IDS, index, offset, ids.size, width, vocab_size)
    return header + stored.tobytes()
