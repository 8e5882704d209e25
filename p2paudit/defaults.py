"""Defaults that several layers must agree on, in a leaf that imports nothing (cheap for the CLI to read).

DEFAULT_REDUNDANCY: checks per step a network aims for. It is the one default of `init` (written to
config.json), `daemon --redundancy`, step assignment (node.assignment), `plan --redundancy` and the
explorer's "checked R times" (R), so that a page, a plan and a daemon never count coverage differently.
"""

DEFAULT_REDUNDANCY = 2
