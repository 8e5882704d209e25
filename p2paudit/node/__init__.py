"""The peer-to-peer node: which steps to audit, and the network that shares the audits.

Pure (no I/O):

- `assignment`: rendezvous hashing of (run id, step, key) with redundancy r;
  which keys a step is assigned to, and which steps a node audits next.
- `plan`: expected coverage of a run and the probability that one falsified
  step is caught, by closed form and by Monte Carlo over `assignment`.
- `wire`: every message as canonical msgpack (gossip batches, evidence, sync
  and witness requests and responses), with their limits.
- `validate`: the gossip validator (stateless checks only; InputError for the peer's fault) and
  evidence checked from its bytes alone.
- `backoff` and `bounded_map`: the one exponential back-off and the one bounded, oldest-first map
  (optional expiry) of the whole node; the time is an argument, trio's clock under the loop.

Over the store (no network):

- `sync`: page-proved history sync (range proofs under a signed checkpoint),
  its per-peer cursor, and the server side.
- `witness`: C2SP tlog-witness (checking, cosigning, storing) and its client.
- `auditor`: which step to replay next, the replay (run off the event loop),
  signing, and settling a dispute by replaying it.
- `conflicts`: evidence of disputes and equivocations, and split views kept from peers' checkpoints.
- `status`: the daemon's status snapshot, written and read as JSON.

The network:

- `libp2p_adapter` (with `_host`, `_gossip`, `_pubsub`,
  `_requests`, `_peers`, `_framing`, `_config` and
  `_containment`, the wall that keeps any peer's input from ending the
  node): the only modules that touch py-libp2p; the rest speaks peers, topics
  and bytes.
- `daemon`: one volunteer node: audit, gossip, sync, witness, report; its
  ledger work runs as `daemon_jobs` on the one thread `store_owner` keeps for
  the SQLite connection, and `loop_monitor` measures the event loop's stalls.
- `localnet`: several daemons as processes on loopback (the demo, the tests).
"""
