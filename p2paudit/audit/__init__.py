"""Replay of published steps: records (per-step results), replay (verify a step range),
diagnosis (which tensors differ, by how many ulps, and the first operation that departs).
"""
