"""`p2paudit daemon` and `p2paudit status`: run a volunteer node, and look at one that runs."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from p2paudit.cli import cli
from p2paudit.cli.remote_options import allow_other_hosts_option, cache_size_option, silence_option
from p2paudit.defaults import DEFAULT_REDUNDANCY

if TYPE_CHECKING:  # the node is imported when a command runs
    from p2paudit.node.daemon.sources import LabOpener, RemoteLab
    from p2paudit.node.daemon.state import DaemonEvent
    from p2paudit.run.remote import RemoteRun

STATUS_FILE = "status.json"


def parse_keys(keys: Iterable[str], hint: str = "--follow") -> list[bytes]:
    """Ed25519 public keys from 64-hex-digit strings; a click error naming the bad one otherwise."""
    out = []
    for key in keys:
        try:
            raw = bytes.fromhex(key)
        except ValueError:
            raw = b""
        if len(raw) != 32:
            raise click.BadParameter(f"{key[:80]!r} is not a public key of 64 hex digits", param_hint=hint)
        out.append(raw)
    return out


def _trusted(path: Path | None) -> frozenset[bytes] | None:
    from p2paudit.attest.queries import load_trusted_keys

    return None if path is None else load_trusted_keys(path)


def _announce_addrs(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    from p2paudit.errors import InputError
    from p2paudit.node.net import check_announce

    try:
        return tuple(check_announce(addr) for addr in value)
    except InputError as error:
        raise click.BadParameter(str(error)) from None


@cli.command()
@click.option(
    "--run",
    "runs",
    multiple=True,
    help="A run to audit (repeatable): a published run directory, or an http:// or https:// base URL whose "
    "files are fetched per step, each piece checked against the signed manifest (a lab run: only with "
    "--run-lab-code).",
)
@click.option(
    "--follow",
    multiple=True,
    metavar="PUBKEY",
    help="Audit every run this publisher key (64 hex) announces on the network (repeatable); "
    'config.json\'s "follow" are added.',
)
@cache_size_option("the cache of remote runs' verified files ($P2PAUDIT_HOME/cache)")
@silence_option("--fetch-timeout", "a run's web server", " (the run is retried later)")
@click.option(
    "--publisher",
    "publisher_keys",
    multiple=True,
    metavar="KEYHEX",
    help="Refuse a --run unless its manifest is signed by this key (64 hex; repeatable: any of them); checked "
    "from a remote run's signature before anything else of it is fetched.",
)
@allow_other_hosts_option
@click.option(
    "--run-lab-code",
    is_flag=True,
    help="Audit lab runs (train-script's): --run directories and URLs, and runs that followed labs announce. "
    "Each replay RUNS THE PUBLISHER'S SCRIPT (Python) in this process. Refused without it; give --publisher "
    "for the labs you trust.",
)
@click.option(
    "--listen",
    multiple=True,
    default=("/ip4/127.0.0.1/tcp/0",),
    show_default=True,
    help="A multiaddr to listen on (repeatable). Loopback unless opened up on purpose.",
)
@click.option(
    "--announce",
    multiple=True,
    metavar="MULTIADDR",
    callback=_announce_addrs,
    help="An address to tell peers instead of the bound ones (repeatable), e.g. /ip4/203.0.113.10/tcp/4001 "
    "for a public --listen /ip4/0.0.0.0/tcp/4001 or a port forward; peers dial it back to check it.",
)
@click.option(
    "--relay-service",
    is_flag=True,
    help="Offer circuit relay v2 to peers behind NAT (public nodes; per-peer, per-IP and total limits).",
)
@click.option(
    "--max-relays",
    type=click.IntRange(min=0, max=8),
    default=2,
    show_default=True,
    help="Relays to reserve a slot on when this node is not reachable (0: never).",
)
@click.option("--no-hole-punch", is_flag=True, help="Do not upgrade relayed connections to direct ones (DCUtR).")
@click.option(
    "--reserve-after",
    type=click.FloatRange(min=0),
    default=120.0,
    show_default=True,
    help="Seconds without a reachability answer (and no inbound direct connection) before reserving on relays "
    "anyway; one failed dial-back reserves at once.",
)
@click.option(
    "--peer",
    "peers",
    multiple=True,
    help='A bootstrap peer, /ip4/.../tcp/.../p2p/<id> (repeatable); config.json\'s "peers" are added.',
)
@click.option(
    "--redundancy",
    type=click.IntRange(min=1),
    default=DEFAULT_REDUNDANCY,
    show_default=True,
    help="Checks per step the network aims for.",
)
@click.option(
    "--trusted",
    "trusted_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="File of trusted verifier keys (hex, one per line): only their checks count as done.",
)
@click.option("--backend", type=click.Choice(["cpu", "reference", "triton"]), default="cpu", show_default=True)
@click.option(
    "--ledger",
    "ledger_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Ledger file (default: $P2PAUDIT_HOME/ledger.db).",
)
@click.option("--duration", type=click.FloatRange(min=0), default=None, help="Stop after this many seconds.")
@click.option(
    "--until-covered",
    is_flag=True,
    help="Stop once every step holds --redundancy checks here and every peer is synced.",
)
@click.option(
    "--lie-about-step",
    type=int,
    default=None,
    hidden=True,
    help="DEMO AND TESTS ONLY: sign a false mismatch for this step, as a dishonest volunteer would.",
)
@click.option("--mdns", is_flag=True, help="Find peers on the local network by mDNS (multicasts on the LAN).")
@click.option("--quiet", is_flag=True, help="No event lines; only the final summary.")
@click.option(
    "--http",
    "http_listen",
    default=None,
    metavar="HOST:PORT",
    help="Also serve the read-only web explorer of this node's ledger and status (e.g. 127.0.0.1:8321).",
)
def daemon(
    runs: tuple[str, ...],
    follow: tuple[str, ...],
    cache_size: int,
    fetch_timeout: float,
    publisher_keys: tuple[str, ...],
    allow_other_hosts: bool,
    run_lab_code: bool,
    listen: tuple[str, ...],
    announce: tuple[str, ...],
    relay_service: bool,
    max_relays: int,
    no_hole_punch: bool,
    reserve_after: float,
    peers: tuple[str, ...],
    redundancy: int,
    trusted_path: Path | None,
    backend: str,
    ledger_path: Path | None,
    duration: float | None,
    until_covered: bool,
    lie_about_step: int | None,
    mdns: bool,
    quiet: bool,
    http_listen: str | None,
) -> None:
    """Run a volunteer node: audit steps of RUNs, sign, gossip, sync and witness with peers.

    Steps are shared out without coordination (rendezvous hashing of run, step
    and key, with --redundancy auditors per step). Stop with Ctrl-C.
    """
    import trio

    from p2paudit.cli.audit_io import node_identity
    from p2paudit.cli.daemon_sources import open_sources
    from p2paudit.cli.explore_cmd import serve_explorer
    from p2paudit.cli.log_file import open_log_file
    from p2paudit.cli.progress_display import telling_compiles
    from p2paudit.cli.status_lines import one_line
    from p2paudit.identity import CONFIG_FILE_NAME, home_dir, load_config, peer_id_of
    from p2paudit.node.assign.auditor import AuditPolicy
    from p2paudit.node.daemon.daemon import DaemonConfig
    from p2paudit.node.daemon.loop_monitor import LoopMonitor
    from p2paudit.node.daemon.run import run_daemon
    from p2paudit.node.net import LIBRARY_LOGGERS, ReachConfig

    identity = node_identity()
    home = home_dir()
    configured = load_config(home / CONFIG_FILE_NAME) if (home / CONFIG_FILE_NAME).exists() else None
    peers = tuple(dict.fromkeys((*peers, *(configured.peers if configured else ()))))  # flags first, no repeats
    followed = frozenset(parse_keys((*follow, *(configured.follow if configured else ()))))
    if not runs and not followed:
        raise click.UsageError("give a run to audit (--run) or a lab to follow (--follow), or both")
    publishers = frozenset(parse_keys(publisher_keys, "--publisher")) if publisher_keys else None
    views, urls = open_sources(runs, publishers, run_lab_code)
    policy = AuditPolicy(redundancy, _trusted(trusted_path), lie_about_step, scratch_dir=home / "scratch")
    config = DaemonConfig(
        runs=views,
        ledger_path=ledger_path or home / "ledger.db",
        status_path=home / STATUS_FILE,
        listen=listen,
        peers=peers,
        backend=backend,
        policy=policy,
        duration=duration,
        stop_when_covered=until_covered,
        mdns=mdns,
        follow=followed,
        cache_dir=home / "cache",
        cache_size=cache_size,
        fetch_timeout=fetch_timeout,
        urls=urls,
        publishers=publishers,
        other_hosts=allow_other_hosts,
        open_lab=_lab_opener() if run_lab_code else None,
        reach=ReachConfig(
            announce=announce,
            relay_service=relay_service,
            max_relays=max_relays,
            hole_punch=not no_hole_punch,
            reserve_after_unknown=reserve_after,
        ),
    )
    started = time.monotonic()

    def show(event: DaemonEvent) -> None:
        # One line per event, whatever a peer's text in it holds (a refusal reason, an error message).
        if not quiet:
            click.echo(f"{time.monotonic() - started:7.1f}s  {event.kind:<9} {one_line(event.text)}")

    log_path = open_log_file(home, libraries=LIBRARY_LOGGERS)  # py-libp2p's noise: the log file, never here
    click.echo(
        f"node {peer_id_of(identity.public_key)} auditing {len(views) + len(urls)} run(s); "
        f"status in {config.status_path}, log in {log_path}"
    )
    serve_explorer(http_listen, config.ledger_path, config.status_path)  # --http: a thread, stopped with the command
    monitor = LoopMonitor()
    # The event loop shares the GIL with the store's thread and the validators' threads (signature checks):
    # a shorter switch interval (5 ms by default) hands it back sooner, so no peer waits on a busy store.
    sys.setswitchinterval(0.001)
    click.get_current_context().with_resource(telling_compiles(False))  # the first replay's one-time compile, told
    try:
        result = trio.run(run_daemon, identity, config, show, monitor, instruments=[monitor])
    finally:
        for source in views:
            source.close()
    final = result.status
    for run in final.runs:
        click.echo(
            f"run {run.run_id[:16]}.. ({run.label}): {run.checked_once}/{run.steps} steps checked, "
            f"{run.checked_r}/{run.steps} checked {run.redundancy}x, {run.findings} with a finding, "
            f"{run.disputes} of them disputed"
        )
    click.echo(
        f"audited {final.audited} step(s), received {final.received} attestation(s), ledger size {final.ledger['size']}"
    )
    if result.signal is not None:  # 128 + the signal, as shells report it: 130 for Ctrl-C, 143 for SIGTERM
        click.echo(f"stopped by signal {result.signal}")
        raise SystemExit(128 + result.signal)


START_HINT = (
    "start one with: p2paudit daemon --run RUN_DIR|URL (or --follow LAB_KEY --peer MULTIADDR); "
    "p2paudit demo runs five on this machine"
)


@cli.command("status")
@click.option("--json", "as_json", is_flag=True, help="The raw status snapshot.")
def status_cmd(as_json: bool) -> None:
    """Show the node's daemon: peers, coverage of each run, disputes, recent events."""
    from p2paudit.cli.progress_display import busy_line
    from p2paudit.cli.status_lines import one_line, status_detail_lines
    from p2paudit.identity import home_dir
    from p2paudit.node.daemon.status import read_status
    from p2paudit.processes import process_alive

    path = home_dir() / STATUS_FILE
    if not path.exists() and not path.is_symlink():  # never started here: say how to start one, not "file missing"
        from p2paudit.errors import InputError

        raise InputError(f"no daemon has run in {home_dir()} (no daemon status file {path.name}): {START_HINT}")
    data = read_status(path)
    if as_json:
        click.echo(json.dumps(data, indent=1))
        return
    alive = process_alive(data["pid"])
    age = time.time() - data["written_at"]
    click.echo(f"node {data['peer_id']} ({'running' if alive else 'not running'}, status {age:.0f}s old)")
    if not alive:
        click.echo(f"no daemon is running in this home; the last one's status follows. {START_HINT}")
    click.echo(f"listening on {', '.join(data['listen']) or '-'}")
    click.echo(f"{len(data['peers'])} peer(s) connected; ledger {data['ledger']['path']} size {data['ledger']['size']}")
    for run in data["runs"]:
        click.echo(
            f"run {run['run_id'][:16]}.. ({run['label']}): {run['checked_once']}/{run['steps']} steps checked, "
            f"{run['checked_r']}/{run['steps']} checked {run['redundancy']}x, "
            f"{run.get('findings', run['disputes'])} with a finding, {run['disputes']} of them disputed"
        )
    click.echo(f"{data['equivocations']} equivocating key(s); audited {data['audited']}, received {data['received']}")
    for line in [busy_line(data, time.time()), *status_detail_lines(data)]:
        if line is not None:
            click.echo(line)
    for remote in data.get("remote", []):
        now = f"; fetching {remote['fetching']}" if remote.get("fetching") else ""
        click.echo(
            f"remote run {remote['url']}: {remote['received_bytes']} bytes fetched, "
            f"{remote['cached_files']} file(s) served from the cache{now}"
        )
    show_reach(data.get("reach", {}))
    health = data.get("health", {})
    if health:
        click.echo(
            f"event loop: longest stall {health.get('longest_stall_ms', 0):.1f} ms "
            f"({health.get('longest_stall_last_60s_ms', 0):.1f} ms in the last 60 s)"
        )
    for line in data["events"]:
        click.echo("  " + one_line(line))


def show_reach(reach: dict[str, Any]) -> None:
    """Reachability, relays in use, and how each connected peer is reached (status file "reach")."""
    if not reach:
        return
    relays = reach.get("relays", [])
    held = len(reach.get("reservations", []))
    click.echo(
        f"reachability: {reach.get('state', 'unknown')}; {len(relays)} relay(s) in use"
        f"{f' ({held} reservation(s) held)' if held else ''}"
    )
    for addr in reach.get("addresses", []):
        click.echo(f"  told peers: {addr}")
    for line in reach.get("dialbacks", []):
        click.echo(f"  dial-back {line}")
    for link in reach.get("links", [])[:50]:
        via = f" via {link['relay']}" if link.get("relay") else ""
        click.echo(f"  peer {link['peer']}: {link['kind']}{via}")
    service = reach.get("relay_service")
    if service:
        click.echo(
            f"relay service: {service['reservations']} reservation(s), {service['circuits']} circuit(s), "
            f"{service['refused']} request(s) refused, {service.get('relayed_bytes', 0):,} bytes relayed"
        )


def _lab_opener() -> LabOpener:
    """The opener of lab runs behind URLs (--run-lab-code): node.daemon.lab_source, which imports torch,
    is imported when the first lab run is met, not when the daemon starts."""

    def open_lab(remote: RemoteRun) -> RemoteLab:
        from p2paudit.node.daemon.lab_source import open_remote_lab

        return open_remote_lab(remote)

    return open_lab
