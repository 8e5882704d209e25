"""The peer-to-peer node: which steps to audit, and the network that shares the audits.

Rooms, each with one door (tests/layering_rules.py holds the edges between them):

- `wire/` (pure: no trio, no libp2p, no store, no disk): every message as canonical msgpack (gossip
  batches, evidence, sync, witness and reconcile requests and answers) with its limits, the wire
  errors, `ProtocolSpec` (one object per request protocol: id, codecs, byte and time limits, refusal,
  taken by both ends), and `validate`, the stateless gossip validator and evidence checked from its
  bytes alone.
- `timing/` (pure): the one exponential back-off and the one bounded, oldest-first map (optional
  expiry); the time is an argument, trio's clock under the loop.
- `net/`: the libp2p adapter, the only importer of py-libp2p, multiaddr and protobuf. Its `__init__` is
  the face (`open_node`, `Node` with `serve(spec, handler)` and `ask(peer, spec, data)`, the settings and
  events); its `_x` modules are private to it (the host, dialling and bans, discovery, gossip, framed
  requests, reachability, relays, dial-back, and the containment wall that keeps any peer's input from
  ending the node). It imports only wire and timing of the node.
- `protocols/`: the request protocols over the store, each one module with both ends (the serving
  function and the asking call through net's face): `sync` (page-proved history sync; `page_proof`,
  its range proofs), `reconcile`, `witness` (C2SP tlog-witness), `announce` (run announcements),
  `settled` (--until-covered coordination).
- `assign/` (no network): `assignment` (rendezvous hashing with redundancy r), `plan` (coverage and the
  chance a falsified step is caught), `auditor` (next step, the replay, signing, settling disputes),
  `replays` (a replay's progress).
- `daemon/`: one volunteer node. `daemon.Daemon` is made with a node already running and holds its
  parts, each made with what it needs: `audit`, `gossip`, `peer_sync`, `fetch` (remote runs fetched
  ahead), `follow` (followed labs), sharing only the report lines and the progress (`state`); `run`
  starts it all; `jobs` run on the one thread `store_owner` keeps for the SQLite connection; `status` is
  the status file (its `__init__` imports nothing, so a reader of the status loads no network);
  `loop_monitor` measures the event loop's stalls; `sources`, `conflicts`, `discover`, `config`.
- `localnet`: several daemons as processes on loopback (the demo, the tests), above the daemon.
"""
