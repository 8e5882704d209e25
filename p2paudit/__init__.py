"""p2paudit: deterministic training steps that anybody can replay, attest and gossip.

Package map (imports go one way, left to right):
kernels <- engine <- run <- audit <- attest <- node <- cli; `identity` is a leaf,
`ledger` is independent of everything here.
"""

__version__ = "0.1.0"
