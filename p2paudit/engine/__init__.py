"""The deterministic step engine: step(state_n, batch_n) -> state_{n+1}, built only on kernels.

Modules: config (records), rng (Philox4x32-10), schedule (batches, learning
rate), state (layout, init), model and backward (the passes), step (the step),
distributed (the same step over W processes). docs/engine.md specifies it all.
`ENGINE_VERSION` names that specification; a change to any bit it produces
needs a new version.
"""

ENGINE_VERSION = "1"
