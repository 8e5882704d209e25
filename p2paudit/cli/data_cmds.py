"""`p2paudit data import`: turn a flat file of token ids into a data directory that `train --data` reads."""

from __future__ import annotations

from pathlib import Path

import click

from p2paudit.cli import cli


@cli.group()
def data() -> None:
    """Training data: import token ids from any tokenizer."""


@data.command("import")
@click.argument("tokens", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("out", type=click.Path(file_okay=False, path_type=Path))
@click.option("--vocab-size", type=int, required=True, help="Every token id must lie below this (at most 131072).")
@click.option("--name", default=None, help="Corpus name recorded in the manifest (default: the file's name).")
def import_cmd(tokens: Path, out: Path, vocab_size: int, name: str | None) -> None:
    """Cut TOKENS into shards in the new directory OUT and print its data key.

    TOKENS is a .npy file (a 1-d array of any integer dtype) or else a raw
    little-endian uint16 array such as nanoGPT's train.bin. Ids are stored as
    uint16 when --vocab-size <= 65536, else uint32. Train on it with
    `p2paudit train RUN --data OUT --config FILE.json` (the model's vocab_size
    must be at least --vocab-size).
    """
    from p2paudit.run.data_dir import import_tokens
    from p2paudit.run.digest import format_digest

    spec = import_tokens(tokens, vocab_size, out, name)
    click.echo(
        f"data {format_digest(spec.data_key)}: {spec.tokens} tokens ({spec.dtype}, vocab_size {spec.vocab_size}) "
        f"in {len(spec.shards)} shard(s) in {out}"
    )
