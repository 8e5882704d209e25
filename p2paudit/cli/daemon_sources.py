"""The daemon's --run options opened: local run directories (engine or lab runs) checked now, URLs later."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:  # the node is imported when a command runs
    from p2paudit.node.daemon.sources import RunSource


def open_sources(
    runs: tuple[str, ...], publishers: frozenset[bytes] | None, run_lab_code: bool = False
) -> tuple[tuple[RunSource, ...], tuple[str, ...]]:
    """(a source per local --run, opened and checked now; the --run URLs, checked as URLs only: the daemon
    fetches their signatures and manifests once it serves peers). A local lab run is opened only with
    `run_lab_code` (--run-lab-code), and only from a --publisher key when some are given: its replay runs
    the publisher's script here (node.daemon.lab_source); torch is imported only then."""
    from p2paudit.audit.replay import open_run
    from p2paudit.node.daemon.sources import LocalSource
    from p2paudit.run.lab_format import is_lab_run
    from p2paudit.run.remote import is_remote
    from p2paudit.run.run_http import run_base_url

    sources: list[RunSource] = []
    urls: list[str] = []
    for run in dict.fromkeys(runs):
        if is_remote(run):
            run_base_url(run)  # a malformed URL is refused now, in one line
            urls.append(run)
            continue
        if Path(run).is_dir() and is_lab_run(Path(run)):
            from p2paudit.node.daemon.lab_source import open_lab_source

            sources.append(open_lab_source(Path(run), run_lab_code, publishers))
            continue
        source = LocalSource(open_run(Path(run)))
        if publishers is not None and source.manifest.public_key not in publishers:
            raise click.BadParameter(
                f"{run}: signed by {source.manifest.public_key.hex()}, not by a --publisher key", param_hint="--run"
            )
        sources.append(source)
    ids = [s.manifest.run_id for s in sources]
    if len(set(ids)) != len(ids):
        raise click.BadParameter("two --run options name the same run (one manifest)", param_hint="--run")
    return tuple(sources), tuple(urls)
