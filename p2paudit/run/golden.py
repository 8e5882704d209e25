"""The golden digests: the state after the built-in tiny run, the same on every machine.

The run: `train_config("tiny", steps=8, seed=0)` (4 micro-batches of 4
sequences of 64 byte tokens), on the shipped corpus, in each arithmetic
version (docs/arithmetic.md). Any backend, any process count, any CPU or GPU
must reach exactly this state digest after step 7 (state 8). If one changes,
either the engine, the kernels or the corpus changed, and every run published
before in that version no longer replays.
"""

from kernels import ARITHMETIC_VERSION

GOLDEN_TINY_STEPS = 8
GOLDEN_TINY_DIGESTS = {
    1: "sha256:8ee19ca678e9a358424af677018c10d535307c4e55ab18f26a7a2863601a94b8",
    2: "sha256:f5f8249ef69bf8f53afcb4f91abef7703cd1c255087e87ea87a30bf170ffc4d7",
}
GOLDEN_TINY_DIGEST = GOLDEN_TINY_DIGESTS[ARITHMETIC_VERSION]  # the run `p2paudit demo` trains: a new run's version

# The same run with the Llama family's test preset: `train_config("tiny-llama", steps=8, seed=0)`.
GOLDEN_TINY_LLAMA_DIGESTS = {
    1: "sha256:ab651ac42e18decaf3a57c6518821225227b40689e8e2492b323681599010357",
    2: "sha256:c63e033013e93a290549921f077177327c53f9f6ec1a6dc37176bf624c58abf3",
}
