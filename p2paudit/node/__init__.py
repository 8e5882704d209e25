"""The peer-to-peer node: which steps to audit, and (later) the network that shares the audits.

Modules that exist:

- `assignment`: rendezvous hashing of (run id, step, key) with redundancy r;
  which keys a step is assigned to, and which steps a node audits next,
  skipping steps already checked r times by trusted keys. Pure.
- `plan`: expected coverage of a run and the probability that one falsified
  step is caught, by closed form and by Monte Carlo over `assignment`. Pure.

Landing later (issue 8): the libp2p host behind one adapter module, gossip of
attestation batches, history sync, witnessing, and the daemon that ties them
together.
"""
