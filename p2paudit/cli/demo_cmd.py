"""`p2paudit demo`: publish the built-in tiny run and audit it with a network of volunteers on this machine.

Five daemons on loopback, each a process with its own home under DIR/nodes
(the publisher's home is DIR/home: the demo never writes the user's own);
one of them dishonest (it signs a false mismatch for one step). They split
the steps without coordination, gossip and sync their attestations, witness
each other's ledgers and stop once every step is checked twice in every
ledger. Then the demo replays each disputed step itself to say who lied,
prints the coverage and the disputes, draws the coverage picture, and checks
the golden digest.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import click

from p2paudit.cli import cli

if TYPE_CHECKING:  # heavy imports stay inside the command
    from p2paudit.audit.replay import RunView
    from p2paudit.node.localnet import NodeSpec


class NetworkOutcome(TypedDict):
    """What the demo network did: the golden digest of its run, and what went wrong (nothing, when it worked)."""

    golden: str
    problems: list[str]


DEMO_STEPS = 8
DEMO_CKPT_EVERY = 4
DEMO_NODES = 5
DEMO_LIE_STEP = 5
DEMO_TIMEOUT = 240.0


@cli.command()
@click.option(
    "--dir",
    "demo_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("p2paudit-demo"),
    show_default=True,
    help="Where the run and the nodes' homes go.",
)
@click.option(
    "--backend",
    type=click.Choice(["cpu", "reference", "triton"]),
    default="reference",
    show_default=True,
    help="reference needs no compilation, so the demo stays short.",
)
@click.option(
    "--nodes",
    type=click.IntRange(min=3, max=12),
    default=DEMO_NODES,
    show_default=True,
    help="Volunteer nodes (the last one is dishonest).",
)
def demo(demo_dir: Path, backend: str, nodes: int) -> None:
    """Publish the tiny run, let a network of volunteers (one dishonest) audit it, show who lied.

    Everything it writes is under DIR: the run, the publisher's home (DIR/home,
    its key), the nodes' homes (DIR/nodes), the picture; never ~/.p2paudit or $P2PAUDIT_HOME.
    """
    from p2paudit.errors import InputError

    if demo_dir.exists() and not demo_dir.is_dir():
        raise InputError(f"demo directory {demo_dir} is a file")
    with own_home(demo_dir / "home"):
        _demo(demo_dir, backend, nodes)


@contextmanager
def own_home(home: Path) -> Iterator[None]:
    """Run with `home` as $P2PAUDIT_HOME (the publisher's key, its scratch) and matplotlib's config and cache.

    The demo is a show on this machine: it must not leave a key or a ledger in
    the user's real ~/.p2paudit or $P2PAUDIT_HOME, nor caches under ~. The
    nodes' own homes are under DIR/nodes, set per process by node.localnet.
    """
    saved = {name: os.environ.get(name) for name in ("P2PAUDIT_HOME", "MPLCONFIGDIR")}
    os.environ["P2PAUDIT_HOME"] = str(home.absolute())
    if saved["MPLCONFIGDIR"] is None:  # the user's own choice of matplotlib's directory stands
        os.environ["MPLCONFIGDIR"] = str((home / "matplotlib").absolute())
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _demo(demo_dir: Path, backend: str, nodes: int) -> None:
    from p2paudit.cli.audit_io import node_identity
    from p2paudit.cli.train_cmd import _publish_with_progress
    from p2paudit.errors import InternalError
    from p2paudit.run.golden import GOLDEN_TINY_DIGEST, GOLDEN_TINY_STEPS
    from p2paudit.run.publisher import check_plan
    from p2paudit.run.training import TrainPlan

    run_dir = demo_dir / "run"
    plan = TrainPlan(run_dir, "tiny", DEMO_STEPS, None, 0, DEMO_CKPT_EVERY, 1, backend)
    check_plan(plan)
    click.echo(f"publishing the tiny run ({DEMO_STEPS} steps, checkpoint every {DEMO_CKPT_EVERY}) into {run_dir}")
    result = _publish_with_progress(plan, node_identity())
    if result.already_complete:
        click.echo("(reusing the finished run already there)")
    outcome = _run_network(demo_dir, run_dir, backend, nodes)
    final = outcome["golden"]
    golden_ok = final == GOLDEN_TINY_DIGEST
    click.echo(
        f"golden digest after {GOLDEN_TINY_STEPS} steps: {final} "
        f"{'== the committed constant' if golden_ok else '!= the committed constant ' + GOLDEN_TINY_DIGEST}"
    )
    click.echo(
        f"next: `P2PAUDIT_HOME={demo_dir / 'nodes' / 'node-0'} p2paudit ledger disputes`, "
        f"`p2paudit verify-range 0-{DEMO_STEPS - 1} --run {run_dir}`"
    )
    if outcome["problems"]:  # the network did not do what the demo shows: our failure, not the run's
        raise InternalError("; ".join(outcome["problems"]))
    _check_the_claim(run_dir, backend)
    if not golden_ok:
        raise InternalError(
            f"the digest after {GOLDEN_TINY_STEPS} steps is not the golden digest: "
            f"determinism is broken on this machine; please report it"
        )


def _check_the_claim(run_dir: Path, backend: str) -> None:
    """Replay the whole run here too; a claim that does not match is exit 1, as with verify-range."""
    from p2paudit.audit.replay import open_run, parse_step_range, verify_range
    from p2paudit.errors import MismatchError

    view = open_run(run_dir)
    steps = parse_step_range(f"0-{view.manifest.num_steps - 1}", view.manifest.num_steps)
    report = verify_range(view, steps, backend, diagnose=False)
    counts = {v: sum(1 for a in report.audits if a.verdict == v) for v in ("match", "mismatch", "error")}
    click.echo(
        f"this machine's own replay of the initial state and steps 0-{view.manifest.num_steps - 1}: "
        f"{counts['match']} match, {counts['mismatch']} mismatch, {counts['error']} error"
    )
    if not report.all_match:
        bad = [("init" if a.subject == "init" else str(a.step)) for a in report.audits if a.verdict != "match"]
        raise MismatchError(f"the published run does not match its claim at {', '.join(bad)}")


def _run_network(demo_dir: Path, run_dir: Path, backend: str, count: int) -> NetworkOutcome:
    """Start the nodes, wait for them, read and print what they did; returns the golden digest and problems."""
    import shutil

    from p2paudit.audit.replay import open_run
    from p2paudit.identity import ensure_node_identity
    from p2paudit.node.localnet import NodeSpec, start_network, stop, wait_all
    from p2paudit.run.golden import GOLDEN_TINY_STEPS

    nodes_dir = demo_dir / "nodes"
    shutil.rmtree(nodes_dir, ignore_errors=True)  # a fresh network each time; the run is reused
    specs = tuple(
        NodeSpec(f"node-{i}", nodes_dir / f"node-{i}", DEMO_LIE_STEP if i == count - 1 else None) for i in range(count)
    )
    names = {ensure_node_identity(spec.home)[0].public_key: spec.name for spec in specs}
    click.echo(
        f"starting {count} volunteer nodes on 127.0.0.1 ({specs[-1].name} is dishonest: it will sign a "
        f"false mismatch for step {DEMO_LIE_STEP}); each is told only node-0's address"
    )
    net = start_network(specs, run_dir, backend=backend)
    try:
        codes = wait_all(net, DEMO_TIMEOUT)
    finally:
        stop(net)
    for name, code in codes.items():
        state = "still running (stopped)" if code is None else f"exit {code}"
        click.echo(f"  {name}: {state}; log {net.logs[name]}")
    view = open_run(run_dir)
    problems = [f"{name} did not finish by itself" for name, code in codes.items() if code != 0]
    problems += _report_ledgers(specs, view, names, backend)
    return {"golden": view.manifest.state_digest(GOLDEN_TINY_STEPS).text(), "problems": problems}


def _report_ledgers(specs: tuple[NodeSpec, ...], view: RunView, names: dict[bytes, str], backend: str) -> list[str]:
    """Print coverage, disputes and who lied from node-0's ledger; check every ledger verifies and agrees."""
    from p2paudit.attest.queries import coverage
    from p2paudit.attest.store import AttestationStore
    from p2paudit.cli.coverage_png import write_coverage_png
    from p2paudit.node.assign.auditor import checked_by, settle_disputes

    problems, held = [], {}
    for spec in specs:
        with AttestationStore.open_readonly(spec.home / "ledger.db") as store:
            report = store.ledger.verify()
            if not report.ok:
                problems.append(f"{spec.name}'s ledger does not verify: {report.problems[0]}")
            held[spec.name] = {bytes(e) for e in store.ledger.entries()}
    union = set().union(*held.values())
    for name, entries in held.items():
        click.echo(
            f"  {name}'s ledger: {len(entries)} attestations ({len(union - entries)} of the union missing), verifies"
        )
        if entries != union:
            problems.append(f"{name} holds {len(entries)} of the {len(union)} attestations")
    m = view.manifest
    with AttestationStore.open_readonly(specs[0].home / "ledger.db") as store:
        cov = coverage(store, m.run_id)
        by_step = {item.step: item for item in cov.per_step}
        click.echo("step  match  mismatch  error  (distinct keys, in node-0's ledger)")
        for step in range(m.num_steps):
            item = by_step.get(step)
            counts = (item.match, item.mismatch, item.error) if item else (0, 0, 0)
            click.echo(f"{step:>4}  {counts[0]:>5}  {counts[1]:>8}  {counts[2]:>5}")
        picture = specs[0].home.parent.parent / "coverage.png"
        write_coverage_png(picture, store, m.run_id, None, 1)
        click.echo(f"coverage picture: {picture}")
        verdicts = settle_disputes(store, view, backend)
    if not verdicts:
        problems.append("no dispute was caught")
    for verdict in verdicts:
        liars = ", ".join(names.get(k, k.hex()[:16]) for k in verdict.contradicted) or "nobody"
        honest = ", ".join(names.get(k, k.hex()[:16]) for k in verdict.honest) or "nobody"
        replayed = (
            "no state (the replay failed)" if verdict.replayed is None else f"sha256:{verdict.replayed.hex()[:16]}.."
        )
        click.echo(
            f"dispute at step {verdict.step}: replayed here, the step gives "
            f"{replayed}; agreeing: {honest}; lied: {liars}"
        )
    with AttestationStore.open_readonly(specs[0].home / "ledger.db") as store:
        done = checked_by(store, m.run_id, None)
    uncovered = [s for s in range(m.num_steps) if done.get(s, 0) < 2]
    if uncovered:
        problems.append(f"steps {uncovered} were not checked twice")
    return problems
