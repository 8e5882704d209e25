"""One volunteer node, composed of its parts: audit, gossip, sync, witness, follow, report.

This `__init__` imports nothing, so that a reader of the status file (`daemon.status`, the
explorer) does not load the network.
"""
