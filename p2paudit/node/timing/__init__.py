"""Time, kept pure: the one exponential back-off and the one bounded, oldest-first map of the node.

Neither reads a clock: the time is an argument (trio's clock under the loop, so tests can run on
`trio.testing.MockClock`). No trio, no libp2p, no disk.
"""
