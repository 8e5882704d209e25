"""The node's request/answer protocols over the store, each one module holding both ends.

`sync` (page-proved history sync), `reconcile` (which attestations two stores differ by),
`witness` (C2SP tlog-witness cosigning) and `announce` (signed run announcements). They speak
bytes through `p2paudit.node.wire` and streams through the face of `p2paudit.node.net`.
"""
