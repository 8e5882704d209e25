"""The run format and its publisher.

digest (state, tensor and data digests), shards (the byte-token corpus),
checkpoint (safetensors states), manifest (signed canonical body, run id),
traces (per-operation digests), publisher and workers (training a run into a
directory, resumably, on one or W processes), storage (atomic writes).
The format is documented in docs/run-format.md.
"""
