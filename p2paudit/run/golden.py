"""The golden digest: the state after the built-in tiny run, the same on every machine.

The run: `train_config("tiny", steps=8, seed=0)` (4 micro-batches of 4
sequences of 64 byte tokens), on the shipped corpus, arithmetic version 1.
Any backend, any process count, any CPU or GPU must reach exactly this state
digest after step 7 (state 8). If it changes, either the engine, the kernels
or the corpus changed, and every run published before no longer replays.
"""

GOLDEN_TINY_STEPS = 8
GOLDEN_TINY_DIGEST = "sha256:8ee19ca678e9a358424af677018c10d535307c4e55ab18f26a7a2863601a94b8"
