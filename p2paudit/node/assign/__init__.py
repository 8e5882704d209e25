"""Which steps to audit, and the audit: no network.

`assignment` (rendezvous hashing of (run id, step, key) with redundancy r), `plan` (expected
coverage and the chance one falsified step is caught), `auditor` (which step to replay next, the
replay off the event loop, signing, settling a dispute) and `replays` (a replay's progress).
"""
