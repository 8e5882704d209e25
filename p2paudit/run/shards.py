"""The training data: the built-in corpus as byte tokens, cut into digested shard files.

Tokenizer: one token per byte of the UTF-8 corpus text (vocabulary 256).

Shard file layout (all integers little-endian, struct format "<8sIIQQ"):

    magic   8 bytes  b"P2PSHARD"
    version u32      1
    index   u32      shard number, from 0
    offset  u64      number of tokens in the shards before this one
    count   u64      number of tokens in this shard
    tokens  count bytes (uint8)

A shard's digest is the SHA-256 of the whole file (header included). The data
key that the schedule draws batches with is the SHA-256 of all tokens
concatenated (headers excluded); the schedule uses its 32 raw bytes.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

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


@dataclass(frozen=True)
class ShardInfo:
    """One shard file: its path relative to the run directory, size in tokens and file digest."""

    path: str
    tokens: int
    digest: bytes

    def to_dict(self) -> dict:
        return {"path": self.path, "tokens": self.tokens, "digest": format_digest(self.digest)}


@dataclass(frozen=True)
class DataSpec:
    """What the manifest says about the data: tokenizer, corpus, total size, data key, shards."""

    tokenizer: str
    corpus: str
    tokens: int
    data_key: bytes
    shards: tuple[ShardInfo, ...]

    def to_dict(self) -> dict:
        return {
            "tokenizer": self.tokenizer,
            "corpus": self.corpus,
            "tokens": self.tokens,
            "data_key": format_digest(self.data_key),
            "shards": [s.to_dict() for s in self.shards],
        }

    @staticmethod
    def from_dict(data: object) -> DataSpec:
        """Parse the manifest's "data" object strictly; InputError naming the bad field and value.

        Exactly the keys of `to_dict`, exact types, every shard but the last
        holding SHARD_TOKENS tokens, `tokens` their total, and a known corpus:
        since a corpus name fixes its bytes, the whole object must be what
        `describe_corpus` gives for that name (shard digests and data key included).
        """
        _check_keys(data, ("corpus", "data_key", "shards", "tokenizer", "tokens"), "manifest data")
        if data["tokenizer"] != TOKENIZER:
            raise InputError(f"manifest data.tokenizer is {str(data['tokenizer'])[:80]!r}, want {TOKENIZER!r}")
        corpus = data["corpus"]
        if corpus not in KNOWN_CORPORA:
            raise InputError(f"manifest data.corpus is {str(corpus)[:80]!r}, want one of {sorted(KNOWN_CORPORA)}")
        shards = data["shards"]
        if not isinstance(shards, list) or not shards:
            raise InputError("manifest data.shards must be a non-empty list")
        infos = tuple(_parse_shard(s, i, i == len(shards) - 1) for i, s in enumerate(shards))
        tokens, total = data["tokens"], sum(s.tokens for s in infos)
        if type(tokens) is not int or tokens != total:
            raise InputError(f"manifest data.tokens is {str(tokens)[:80]}, want the shards' total {total}")
        spec = DataSpec(TOKENIZER, corpus, tokens, parse_digest(data["data_key"], "manifest data.data_key"), infos)
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


def _check_keys(value: object, keys: tuple[str, ...], where: str) -> dict:
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
    _check_keys(item, ("digest", "path", "tokens"), where)
    path, tokens = item["path"], item["tokens"]
    if path != shard_path(index):
        raise InputError(f"{where}.path is {str(path)[:80]!r}, want {shard_path(index)!r}")
    if type(tokens) is not int or not (1 <= tokens <= SHARD_TOKENS if last else tokens == SHARD_TOKENS):
        want = f"1..{SHARD_TOKENS} (the last shard)" if last else f"{SHARD_TOKENS} (every shard but the last)"
        raise InputError(f"{where}.tokens is {str(tokens)[:80]}, want {want}")
    return ShardInfo(path, tokens, parse_digest(item["digest"], f"{where}.digest"))


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
    """Read and check every shard; the concatenated tokens (uint8).

    Raises InputError naming the shard file when it is missing, its digest is
    not the manifest's, or its header disagrees with the manifest.
    """
    parts, offset = [], 0
    for index, info in enumerate(spec.shards):
        path = run_dir / info.path
        blob = read_file(path, "shard", SHARD_HEADER.size + info.tokens, run_dir)
        if digest_bytes(blob) != info.digest:
            raise InputError(
                f"shard {path}: digest {format_digest(digest_bytes(blob))} is not the manifest's {format_digest(info.digest)}"
            )
        parts.append(_decode_shard(path, blob, index, offset, info.tokens))
        offset += info.tokens
    tokens = np.concatenate(parts)
    if digest_bytes(tokens.tobytes()) != spec.data_key:
        raise InputError(f"shards in {run_dir / 'shards'} do not add up to the manifest's data key")
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
