"""A data directory: token ids from any tokenizer, imported as shards with their description beside them.

Layout (docs/run-format.md): `data.json` (the DataSpec, canonical JSON) and
`shards/shard-NNNNN.bin` (version-2 shards, p2paudit.run.shards). `p2paudit
data import` writes one with `import_tokens`; `train --data` reads it with
`read_data_spec` and copies its shards into the run with `copy_shards`.

An import writes `data.json` last, so a directory without it is an import
that did not finish. A failed import removes what it wrote (a full disk
leaves the directory as it found it), and an import into a directory that
holds only an unfinished import's shards (a killed one) starts again there.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
from pathlib import Path

import numpy as np

from p2paudit.engine.config import MAX_VOCAB
from p2paudit.errors import InputError
from p2paudit.regular_files import open_regular
from p2paudit.run.digest import digest_bytes
from p2paudit.run.shards import (
    MAX_DATA_TOKENS,
    SHARD_HEADER,
    SHARD_HEADER_IDS,
    SHARD_TOKENS,
    TOKEN_IDS,
    DataSpec,
    ShardInfo,
    check_corpus_name,
    encode_ids_shard,
    load_tokens,
    shard_path,
    token_dtype_for,
)
from p2paudit.run.storage import parse_json, read_file, write_atomic

DATA_FILE = "data.json"  # a data directory's description: its DataSpec, canonical JSON
MAX_DATA_FILE_BYTES = 64 * 1024 * 1024
SHARDS_DIR = "shards"
# What an unfinished import leaves in OUT/shards: shard files and the temp files of their atomic writes.
_IMPORT_LEFTOVER = re.compile(r"shard-[0-9]{5,}\.bin|\.shard-[0-9]{5,}\.bin\.[0-9]+\.tmp", re.ASCII)


def write_data_file(data_dir: Path, spec: DataSpec) -> None:
    """Write data_dir/data.json: the spec as canonical JSON (sorted keys, no whitespace)."""
    text = json.dumps(spec.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    write_atomic(data_dir / DATA_FILE, text.encode("utf-8"))


def read_data_dir(data_dir: Path) -> tuple[DataSpec, np.ndarray]:
    """(spec, tokens) of a data directory written by import_tokens: data.json checked strictly, every shard too."""
    spec = read_data_spec(data_dir)
    return spec, load_tokens(data_dir, spec)


def read_data_spec(data_dir: Path) -> DataSpec:
    """The DataSpec in data_dir/data.json, checked strictly (the shards are not read)."""
    if not data_dir.is_dir():
        raise InputError(f"data directory {data_dir} does not exist")
    blob = read_file(data_dir / DATA_FILE, "data description", MAX_DATA_FILE_BYTES, data_dir)
    try:
        spec = DataSpec.from_dict(parse_json(blob, str(data_dir / DATA_FILE)))
    except InputError as exc:
        raise InputError(f"{data_dir / DATA_FILE}: {exc}") from None
    return spec


def copy_shards(source: Path, spec: DataSpec, run_dir: Path) -> None:
    """Copy the shard files of `spec` from the data directory `source` into run_dir, each checked again."""
    width = spec.token_bytes
    header = SHARD_HEADER_IDS if spec.token_ids else SHARD_HEADER
    for info in spec.shards:
        blob = read_file(source / info.path, "shard", header.size + info.tokens * width, source)
        if digest_bytes(blob) != info.digest:
            raise InputError(f"shard {source / info.path} changed while it was copied into {run_dir}")
        write_atomic(run_dir / info.path, blob)


def _read_exact(fd: int, n: int, path: Path) -> bytes:
    chunks, left = [], n
    while left > 0:
        try:
            chunk = os.read(fd, min(left, 1 << 24))
        except OSError as exc:
            raise InputError(f"token file {path} cannot be read: {exc.strerror}") from None
        if not chunk:
            raise InputError(f"token file {path} ended {left} bytes early (was it truncated while read?)")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _npy_layout(fd: int, path: Path, size: int) -> tuple[np.dtype, int, int]:
    """(dtype, count, data offset) of a 1-d integer .npy file; its header read with numpy's bounded parser."""
    head = io.BytesIO(_read_exact(fd, min(size, 1 << 16), path))  # numpy refuses headers over 10,000 bytes
    try:
        version = np.lib.format.read_magic(head)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(head)
        elif version == (2, 0):
            shape, _, dtype = np.lib.format.read_array_header_2_0(head)
        else:
            raise ValueError(f".npy format version {version}, want 1.0 or 2.0")
    except (ValueError, EOFError, SyntaxError) as exc:
        raise InputError(f"token file {path} is not a readable .npy file: {str(exc).splitlines()[0][:120]}") from None
    if len(shape) != 1:
        raise InputError(f"token file {path} holds an array of shape {shape}, want a 1-d array")
    if dtype.kind not in "iu":
        raise InputError(f"token file {path} holds {dtype} values, want an integer dtype")
    count, start = shape[0], head.tell()
    if size != start + count * dtype.itemsize:
        raise InputError(
            f"token file {path} has {size} bytes, want {start + count * dtype.itemsize} for {count} {dtype} "
            f"values (truncated, or trailing bytes)"
        )
    return dtype, count, start


def _holds_only_an_unfinished_import(out_dir: Path) -> bool:
    """True when `out_dir` holds nothing but shards/ with shard files (no data.json): a killed import."""
    entries = list(out_dir.iterdir())
    if [entry.name for entry in entries] != [SHARDS_DIR] or not entries[0].is_dir() or entries[0].is_symlink():
        return False
    return all(_IMPORT_LEFTOVER.fullmatch(item.name) and item.is_file() for item in entries[0].iterdir())


def _prepare_output(out_dir: Path) -> bool:
    """Check that `out_dir` is new, empty, or an unfinished import (whose shards are removed now);
    True when it does not exist yet (the import creates it, and removes it again if it fails)."""
    if not out_dir.exists():
        return True
    if not out_dir.is_dir():
        raise InputError(f"output {out_dir} exists and is not an empty directory")
    if any(out_dir.iterdir()):
        if not _holds_only_an_unfinished_import(out_dir):
            raise InputError(f"output {out_dir} exists and is not an empty directory")
        shutil.rmtree(out_dir / SHARDS_DIR)
    return False


def _remove_failed_import(out_dir: Path, created: bool) -> None:
    """Remove what a failed import wrote: shards/ (which it created), and `out_dir` itself if it created it."""
    shutil.rmtree(out_dir / SHARDS_DIR, ignore_errors=True)
    (out_dir / DATA_FILE).unlink(missing_ok=True)
    if created:
        try:
            out_dir.rmdir()
        except OSError:
            pass


def import_tokens(source: Path, vocab_size: int, out_dir: Path, corpus: str | None = None) -> DataSpec:
    """Turn a flat token file into a data directory `out_dir` (data.json and version-2 shards); its DataSpec.

    `source`: a .npy file (a 1-d array of any integer dtype) or else a raw
    little-endian uint16 array (nanoGPT's train.bin). Read in bounded pieces of
    one shard each; every id must lie in [0, vocab_size) (InputError naming
    its position). `out_dir` must be new, empty, or hold an unfinished import;
    when the import fails (a bad id, a full disk) what it wrote is removed.
    """
    if type(vocab_size) is not int or not 1 <= vocab_size <= MAX_VOCAB:
        raise InputError(f"--vocab-size is {vocab_size}, want 1..{MAX_VOCAB}")
    name = check_corpus_name(corpus if corpus is not None else source.name, "corpus name (--name)")
    fd = open_regular(source, "token file")
    try:
        created = _prepare_output(out_dir)
        try:
            spec = _write_import(fd, source, vocab_size, out_dir, name)
        except BaseException:
            _remove_failed_import(out_dir, created)
            raise
    finally:
        os.close(fd)
    return spec


def _write_import(fd: int, source: Path, vocab_size: int, out_dir: Path, name: str) -> DataSpec:
    """Write the shards of the token file open at `fd`, then data.json (last); the DataSpec."""
    dtype_name = token_dtype_for(vocab_size)
    size = os.fstat(fd).st_size
    if source.suffix == ".npy":
        src_dtype, count, start = _npy_layout(fd, source, size)
        os.lseek(fd, start, os.SEEK_SET)
    else:
        if size % 2:
            raise InputError(f"token file {source} has {size} bytes, an odd number: not a uint16 array")
        src_dtype, count = np.dtype("<u2"), size // 2
    if count < 1 or count > MAX_DATA_TOKENS:
        raise InputError(f"token file {source} holds {count} tokens, want 1..{MAX_DATA_TOKENS}")
    hasher, infos = hashlib.sha256(), []
    for index, begin in enumerate(range(0, count, SHARD_TOKENS)):
        n = min(SHARD_TOKENS, count - begin)
        ids = np.frombuffer(_read_exact(fd, n * src_dtype.itemsize, source), dtype=src_dtype)
        _check_ids(ids, begin, vocab_size, source)
        blob = encode_ids_shard(index, begin, ids.astype(dtype_name), vocab_size)
        hasher.update(blob[SHARD_HEADER_IDS.size :])
        write_atomic(out_dir / shard_path(index), blob)
        infos.append(ShardInfo(shard_path(index), n, digest_bytes(blob)))
    spec = DataSpec(TOKEN_IDS, name, count, hasher.digest(), tuple(infos), dtype_name, vocab_size)
    write_data_file(out_dir, spec)
    return spec


def _check_ids(ids: np.ndarray, begin: int, vocab_size: int, source: Path) -> None:
    bad = (
        np.flatnonzero((ids < 0) | (ids >= vocab_size)) if ids.dtype.kind == "i" else np.flatnonzero(ids >= vocab_size)
    )
    if bad.size:
        raise InputError(
            f"token file {source}: token at position {begin + int(bad[0])} is id {int(ids[bad[0]])}, "
            f"not in [0, {vocab_size})"
        )
