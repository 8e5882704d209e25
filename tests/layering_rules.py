"""Which part of the code may import which, and where each third-party library may be used.

Derived from shared/DESIGN.md ("Packages and the direction of imports"):

    kernels <- engine <- run <- audit <- attest <- node <- cli

read as arrows, not as layers: an edge the line does not draw is allowed only
where the design's text says the importer does that work, and each edge
below says why. Every module of every shipped package belongs to exactly one
unit; a module that belongs to none (a new top-level module of p2paudit, a
new package) fails the check until the table says where it stands.

A unit is a package (it owns its submodules) or a single module. The
package p2paudit itself is a unit of one module (its __init__: the version);
its subpackages and modules are units of their own. Importing a package's
own ancestors is no edge (Python loads them with every module anyway), which
is why p2paudit's __init__ must import nothing.
"""

from __future__ import annotations

from fnmatch import fnmatch
from pathlib import Path

from tests.layering_scan import Import, is_third_party, module_cycles, resolve, scan_tree, tree_modules

ROOTS = ("exit_codes", "kernels", "ledger", "p2paudit")
ERRORS = "the error tree: p2paudit.errors is a leaf everybody raises from"

# importer -> {imported: why}. Nothing else is allowed, and every edge here must be used.
ALLOWED: dict[str, dict[str, str]] = {
    "exit_codes": {},
    "kernels": {"exit_codes": "KernelInputError is a CodedError: one error tree, kernels still stands alone"},
    "ledger": {"exit_codes": "LedgerError is a CodedError: one error tree, ledger still stands alone"},
    "p2paudit": {},
    "p2paudit.__main__": {"p2paudit.cli": "`python -m p2paudit` is the CLI"},
    "p2paudit.errors": {"exit_codes": "P2PAuditError is a CodedError (the root lives below all three packages)"},
    "p2paudit.durable": {},
    "p2paudit.defaults": {},
    "p2paudit.processes": {},
    "p2paudit.regular_files": {"p2paudit.errors": ERRORS},
    "p2paudit.identity": {
        "p2paudit.errors": ERRORS,
        "p2paudit.durable": "identity creates the node key: written atomically and fsynced",
        "p2paudit.regular_files": "identity loads the node key: a regular file, never a FIFO or a link",
        "p2paudit.defaults": "the one redundancy default shared by init, daemon, assignment and the explorer",
    },
    "p2paudit.engine": {
        "kernels": "the design's arrow: the engine is built only on kernels",
        "p2paudit.errors": ERRORS,
    },
    "p2paudit.tensor_digest": {"p2paudit.errors": ERRORS},
    "p2paudit.sizes": {"p2paudit.errors": ERRORS},
    "p2paudit.lab": {
        "kernels": "DESIGN, two tiers of models: a lab's aten ops are computed by the canonical kernels",
        "p2paudit.errors": ERRORS,
        "p2paudit.tensor_digest": "a lab's state is digested in the engine's state digest format (the leaf)",
        "p2paudit.sizes": "the attention cache's budget: a size from the environment, by default memory's share",
    },
    "p2paudit.run": {
        "p2paudit.engine": "the design's arrow: a run is trained with the engine's step",
        "p2paudit.tensor_digest": "run's state digests are the leaf's format (re-exported by run.digest)",
        "p2paudit.lab": "DESIGN, two tiers: a lab run is trained with the lab mode and published like any run",
        "kernels": "the manifest names the arithmetic version (DESIGN: 'the run manifest names its version')",
        "p2paudit.identity": "the design: run signs and checks manifests with identity",
        "p2paudit.errors": ERRORS,
        "p2paudit.durable": "run writes the run directory (DESIGN: run/ touches disk)",
        "p2paudit.regular_files": "run reads shards and checkpoints as regular files",
        "p2paudit.processes": "the cache's lock names its owner: is that process alive",
    },
    "p2paudit.audit": {
        "p2paudit.run": "the design's arrow: audit replays a run's published steps",
        "p2paudit.engine": "DESIGN: audit replays steps, and a replay runs the engine's step",
        "p2paudit.lab": "DESIGN, two tiers: a lab run's steps are replayed under the lab mode",
        "kernels": "a replay holds the manifest's arithmetic version against the one kernels implement",
        "p2paudit.errors": ERRORS,
        "p2paudit.sizes": "a lab replay's memory and scratch limits are sizes from the environment",
    },
    "p2paudit.attest": {
        "p2paudit.audit": "the design's arrow: attestations are made from step audits",
        "ledger": "the design: attest stores signed attestations in the ledger",
        "p2paudit.identity": "the design: attest signs and verifies with identity",
        "p2paudit.errors": ERRORS,
    },
    # The node is rooms with one door each (DESIGN: "Where the node is going"). Inside it: wire (the bytes)
    # and timing (back-off, bounded maps) stand on nothing of the node; net (libp2p) on those two; protocols
    # on wire and net's face; assign (what to audit) on no network; the daemon composes them all; localnet
    # (several daemons as processes) stands above the daemon and only reads their status files.
    "p2paudit.node": {
        "p2paudit.node.daemon": "localnet reads each daemon's status file (daemon.status)",
        "p2paudit.errors": ERRORS,
        "p2paudit.defaults": "localnet starts daemons with the one redundancy default",
    },
    "p2paudit.node.wire": {
        "p2paudit.attest": "the wire carries attestations in attest's canonical bytes, decoded by attest",
        "p2paudit.identity": "evidence and witness requests name keys and check signatures with identity",
        "ledger": "evidence carries signed checkpoints, parsed and checked with ledger's notes (no store)",
        "p2paudit.errors": ERRORS,
    },
    "p2paudit.node.timing": {"p2paudit.errors": ERRORS},
    "p2paudit.node.net": {
        "p2paudit.node.wire": "gossip batches are checked against the wire's limits; the peer list is a wire message",
        "p2paudit.node.timing": "redial, discovery and relay back-offs, bans and caches kept bounded",
        "p2paudit.identity": "the node key is the libp2p identity (peer id, Noise)",
        "p2paudit.errors": ERRORS,
    },
    "p2paudit.node.protocols": {
        "p2paudit.node.wire": "each protocol's requests and answers are wire messages with wire's limits",
        "p2paudit.node.net": "each protocol's asking end sends its request through net's face (Node.ask)",
        "ledger": "the design: history sync and witnessing are over the ledger (proofs, checkpoints, cosignatures)",
        "p2paudit.attest": "sync and reconcile read and append the attestation store",
        "p2paudit.identity": "announcements and cosignatures are signed with the node key",
        "p2paudit.errors": ERRORS,
    },
    "p2paudit.node.assign": {
        "p2paudit.attest": "the auditor signs attestations and settles disputes over them",
        "p2paudit.audit": "DESIGN: a daemon audits runs (the replay runs in a worker)",
        "p2paudit.run": "DESIGN: a daemon audits runs where they live (fetched lazily)",
        "p2paudit.identity": "an audit is signed with the node key; assignment hashes keys",
        "p2paudit.defaults": "the one redundancy default shared by init, daemon, assignment and the explorer",
        "p2paudit.errors": ERRORS,
    },
    "p2paudit.node.daemon": {
        "p2paudit.node.wire": "gossip in and out, evidence, the settled answer",
        "p2paudit.node.timing": "the daemon's back-offs (fetch, peers, adoption) and bounded memories",
        "p2paudit.node.net": "the daemon runs on a node opened through net's face",
        "p2paudit.node.protocols": "the daemon serves and calls every protocol",
        "p2paudit.node.assign": "the daemon audits what assignment gives it, with the auditor",
        "p2paudit.attest": "the design's arrow: the node gossips, syncs and stores attestations",
        "ledger": "the design: the node's history sync and witnessing are over the ledger",
        "p2paudit.identity": "the design: the node key is the libp2p identity and signs",
        "p2paudit.audit": "DESIGN: a daemon audits runs (the replay runs in a worker)",
        "p2paudit.run": "DESIGN: a daemon audits runs where they live (fetched lazily)",
        "p2paudit.errors": ERRORS,
        "p2paudit.durable": "the node writes its status file atomically (DESIGN: node/ touches disk)",
        "p2paudit.regular_files": "the node reads status and announcement files as regular files",
    },
    "p2paudit.explorer": {
        "ledger": "DESIGN: web pages over a ledger",
        "p2paudit.attest": "the attestations the ledger holds, read through attest's queries",
        "p2paudit.identity": "keys of the verifiers shown and trusted",
        "p2paudit.node.daemon": "DESIGN: and over a daemon's status (node.daemon.status, which loads no network)",
        "p2paudit.node.wire": "a proof page's origin line names its log key (wire.origin_public_key, WireError)",
        "p2paudit.processes": "whether the daemon whose status is shown is still alive",
        "p2paudit.defaults": "the one redundancy default shared by init, daemon, assignment and the explorer",
        "p2paudit.errors": ERRORS,
    },
    "p2paudit.cli": {
        "p2paudit.node": "the design's arrow: demo starts a local network of daemons (node.localnet)",
        "p2paudit.node.daemon": "the design's arrow: daemon runs one, status reads its status file",
        "p2paudit.node.net": "daemon and announce open a node (its settings, the library loggers, --announce checks)",
        "p2paudit.node.protocols": "announce signs and gossips a run announcement",
        "p2paudit.node.assign": "plan prints coverage; daemon and demo take the auditor's policy and verdicts",
        "p2paudit.explorer": "explore and daemon --http serve the explorer; ledger coverage --png draws its strip",
        "p2paudit.attest": "DESIGN: cli calls the library (ledger commands, --attest)",
        "p2paudit.audit": "DESIGN: cli calls the library (verify-range)",
        "p2paudit.run": "DESIGN: cli calls the library (train, data import, remote runs)",
        "p2paudit.engine": "DESIGN: cli calls the library (train's presets and memory estimate)",
        "ledger": "the design: cli uses the ledger (proofs, checkpoints)",
        "p2paudit.identity": "init, id, and every command that signs as the node",
        "p2paudit.errors": "DESIGN: cli maps errors to exit codes",
        "p2paudit.regular_files": "files named on the command line are read as regular files",
        "p2paudit.processes": "status: is the daemon that wrote it alive",
        "p2paudit.defaults": "the one redundancy default shared by init, daemon, assignment and the explorer",
    },
}

# Edges the code has and the design does not: named here so they are never silently allowed.
# The test fails if one disappears (remove it here) or a new one appears (fix the code, or the design).
DEPARTURES: dict[tuple[str, str], str] = {
    ("p2paudit.audit", "p2paudit.identity"): (
        "audit.replay parses --publisher KEYHEX with identity.parse_public_key_hex; the design lists run, "
        "attest and node as identity's users (issue 14: parse it in cli, or draw the arrow in DESIGN.md)"
    ),
}

# Only the CLI imports inside functions (so that --help does not load torch); the library never does.
LAZY_ALLOWED = ("p2paudit.cli",)

# kernels.get_backend loads the backend a run names (cpu compiles numba, triton needs CUDA) by a name from
# its own table, which test_backend_table_stays_inside_kernels holds.
# p2paudit.lab.script loads a lab's own training script by its path (importlib): the lab's code, not ours.
INDIRECT_ALLOWED = {
    "kernels": frozenset({"import machinery", "computed module name"}),
    "p2paudit.lab": frozenset({"import machinery"}),
}

LIBP2P = ("p2paudit.node.net.*",)
NET = "p2paudit.node.net"  # its __init__ is the face; its modules named _x are private to it
TRITON_KERNELS = ("kernels.triton_*",)
# top-level name -> (modules that may import it, as fnmatch patterns; why). Any other library is refused.
THIRD_PARTY: dict[str, tuple[tuple[str, ...], str]] = {
    "libp2p": (LIBP2P, "DESIGN: libp2p behind the adapter; the rest of node/ speaks our own terms"),
    "multiaddr": (LIBP2P, "libp2p's addresses, inside the adapter"),
    "google": (LIBP2P, "protobuf: libp2p's wire messages, inside the adapter"),
    "trio": (
        (NET, "p2paudit.node.net.*", "p2paudit.node.protocols.*", "p2paudit.node.daemon.*", "p2paudit.cli.*"),
        "py-libp2p runs on trio: the node's loop, started by the CLI (wire, timing and assign run on no loop)",
    ),
    "numba": (("kernels.cpu_*",), "DESIGN: the fast CPU backend is numba, and only it"),
    "llvmlite": (("kernels.cpu_*",), "the CPU kernels pin numba's code generation (no FMA contraction)"),
    "triton": (TRITON_KERNELS, "DESIGN: the GPU backend is Triton, and only it"),
    "torch": (
        TRITON_KERNELS
        + ("p2paudit.engine.distributed", "p2paudit.audit.distributed_replay", "p2paudit.run.workers")
        + ("p2paudit.lab", "p2paudit.lab.*"),
        "Triton's device tensors; DESIGN: steps split over processes with torch.distributed (gloo, NCCL); "
        "DESIGN, two tiers of models: the lab mode is a TorchDispatchMode over a lab's own torch loop",
    ),
    "numpy": (
        (
            "kernels",
            "kernels.*",
            "p2paudit.engine.*",
            "p2paudit.run.*",
            "p2paudit.audit.*",
            "p2paudit.node.assign.plan",
            "p2paudit.lab.*",
            "p2paudit.tensor_digest",
        ),
        "arrays: the reference and CPU backends, the engine, runs, replays; plan's Monte Carlo; "
        "the lab mode's tensors as the kernels' arrays; the digest format's bytes",
    ),
    "cryptography": (("ledger.*", "p2paudit.identity"), "Ed25519: signed notes and cosignatures, the node key"),
    "nacl": (("p2paudit.identity",), "libsodium's Ed25519 verification: the one verifier of every attestation"),
    "msgpack": (
        ("p2paudit.attest.*", "p2paudit.node.wire.*", "p2paudit.node.net._peers", "p2paudit.node.net._dialback"),
        "canonical attestation bytes and the wire format (net's own two messages: peer lists, dial-back answers)",
    ),
    "httpx": (("p2paudit.run.*",), "DESIGN: a run may live on a web server (run/ touches the network)"),
    "httpcore": (
        ("p2paudit.run.http_guard", "p2paudit.run.run_http"),
        "httpx's network backend: every request's deadline, rate floor and checked addresses (issue 19)",
    ),
    "sqlite_utils": (("p2paudit.explorer.*",), "the explorer's read-only queries"),
    "click": (("p2paudit.cli", "p2paudit.cli.*"), "DESIGN: cli is click commands"),
    "rich": (("p2paudit.cli.*",), "progress bars: only cli prints"),
    "matplotlib": (("p2paudit.cli.*",), "coverage pictures: only cli writes what the user sees"),
}


def unit_of(module: str) -> str | None:
    """The unit `module` belongs to, or None when the table has no place for it."""
    if module in ALLOWED:
        return module
    owners = [u for u in ALLOWED if module.startswith(u + ".") and u != "p2paudit"]
    return max(owners, key=len) if owners else None


def third_party_refusal(module: str, library: str) -> str | None:
    """Why `module` may not import the third-party `library`, or None when the table allows it."""
    if library not in THIRD_PARTY:
        return f"{library} is in no row of THIRD_PARTY (say which modules may use it, and why)"
    patterns, _ = THIRD_PARTY[library]
    if any(fnmatch(module, pattern) for pattern in patterns):
        return None
    return f"{library} is confined to {', '.join(patterns)}"


def _is_ancestor(target: str, module: str) -> bool:
    return module.startswith(target + ".")


def _is_within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def private_reach(module: str, target: str) -> str | None:
    """Why `module` may not import `target`, a private module (`_x`) of a package it is outside, or None.

    A package whose modules are named _x shows its face in its __init__ (node/net: the one place that meets
    py-libp2p); everybody else imports the face, so the package's insides can change behind it.
    """
    package, _, name = target.rpartition(".")
    if name.startswith("_") and not name.startswith("__") and not _is_within(module, package):
        return f"{name} is private to {package}: import {package} (its face)"
    return None


def check_edges(imports: list[Import], modules: set[str]) -> dict[str, list[str]]:
    """Imports across units that the table does not allow, edges it allows that nobody uses, stale departures."""
    forbidden, used = [], set()
    for imp in imports:
        target = resolve(imp.target, modules) if imp.target != "?" else None
        if target is None or _is_ancestor(target, imp.module):
            continue
        mine, theirs = unit_of(imp.module), unit_of(target)
        if mine is None or theirs is None or mine == theirs:
            continue  # a module in no unit is reported once, by the caller
        used.add((mine, theirs))
        if private_reach(imp.module, target):
            forbidden.append(f"{imp.module}:{imp.line} imports {imp.target} ({private_reach(imp.module, target)})")
        if theirs not in ALLOWED[mine] and (mine, theirs) not in DEPARTURES:
            forbidden.append(f"{imp.module}:{imp.line} imports {imp.target} ({mine} -> {theirs} is no edge)")
    units = {unit_of(m) for m in modules}
    unused = [f"{a} -> {b}" for a in ALLOWED if a in units for b in ALLOWED[a] if (a, b) not in used]
    stale = [f"{a} -> {b}" for a, b in DEPARTURES if a in units and (a, b) not in used]
    return {"forbidden": forbidden, "unused edges": unused, "stale departures": stale}


def check_imports(imports: list[Import], ours: set[str]) -> dict[str, list[str]]:
    """Lazy imports outside the CLI, indirect imports where the table allows none, third-party confinement."""
    lazy, indirect, third = [], [], []
    for imp in imports:
        where, unit = f"{imp.module}:{imp.line}", unit_of(imp.module) or imp.module
        sanctioned = imp.indirect and imp.indirect in INDIRECT_ALLOWED.get(unit, frozenset())
        if imp.indirect and not sanctioned:
            indirect.append(f"{where} {imp.indirect} ({imp.target})")
        elif imp.lazy and not sanctioned and not any(_is_within(imp.module, e) for e in LAZY_ALLOWED):
            lazy.append(f"{where} {imp.target}")
        if imp.target != "?" and is_third_party(imp.target, ours):
            refusal = third_party_refusal(imp.module, imp.target.split(".")[0])
            if refusal:
                third.append(f"{where} imports {imp.target}: {refusal}")
    return {"lazy": lazy, "indirect": indirect, "third party": third}


def unknown_packages(root: Path) -> list[str]:
    """Top-level packages and modules under `root` that no row of the table covers (so nothing would scan them)."""
    found = {p.parent.name for p in root.glob("*/__init__.py")} | {p.stem for p in root.glob("*.py")}
    return sorted(found - set(ROOTS))


def check_tree(root: Path) -> dict[str, list]:
    """Every rule, over the source tree at `root`: each list names what breaks it (empty when the tree is layered)."""
    imports = scan_tree(root, list(ROOTS))
    modules = tree_modules(root, list(ROOTS))
    return {
        "unknown packages": unknown_packages(root),
        "no unit": sorted(m for m in modules if unit_of(m) is None),
        **check_edges(imports, modules),
        **check_imports(imports, set(ROOTS)),
        "cycles": module_cycles(imports, modules),
    }


def reachable(unit: str) -> set[str]:
    """The units `unit` may load, directly or through others (the table's edges and departures)."""
    edges = {a: set(b) | {d for (s, d) in DEPARTURES if s == a} for a, b in ALLOWED.items()}
    seen, todo = {unit}, [unit]
    while todo:
        for nxt in edges.get(todo.pop(), set()) - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


def loaded_outside(unit: str, loaded: list[str]) -> list[str]:
    """Units a process that imported every module of `unit` holds, beyond what the table lets it reach."""
    allowed = reachable(unit)

    def above_allowed(module: str) -> bool:  # a package's __init__ loads with every module below it: no edge
        return any(_is_ancestor(module, a) for a in allowed)  # (p2paudit.node's, with node.daemon.status)

    ours = [m for m in loaded if m.split(".")[0] in ROOTS and not above_allowed(m)]
    extra = {unit_of(m) for m in ours} - allowed - {None}
    return sorted(u for u in extra if not _is_ancestor(u, unit))
