"""The host-side scalars of the AdamW update (docs/arithmetic.md section 4.6), shared by every backend.

They are computed once per call in float32 on the host, so all three backends
feed their elementwise kernels the very same bits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kernels import constants as K
from kernels import validate
from kernels.backend_contract import Scalar

F32 = np.float32


@dataclass(frozen=True)
class AdamWScalars:
    """beta1, 1 - beta1, beta2, 1 - beta2, lr / bc1, sqrt(bc2), eps and 1 - lr * weight_decay, all float32."""

    b1: np.float32
    omb1: np.float32
    b2: np.float32
    omb2: np.float32
    ss: np.float32
    sbc2: np.float32
    eps: np.float32
    decay: np.float32


def powi(b: np.float32, t: int) -> np.float32:
    """b^t by square-and-multiply in float32, lowest bit of t first (section 4.6)."""
    r = K.ONE
    while t > 0:
        if t & 1:
            r = F32(r * b)
        b = F32(b * b)
        t >>= 1
    return r


def adamw_scalars(
    step: int, lr: Scalar, beta1: Scalar, beta2: Scalar, eps: Scalar, weight_decay: Scalar
) -> AdamWScalars:
    """The section 4.6 scalars for update number `step` (>= 1, already validated)."""
    lr, b1, b2, eps, wd = (
        validate.to_float32(val, name)
        for val, name in ((lr, "lr"), (beta1, "beta1"), (beta2, "beta2"), (eps, "eps"), (weight_decay, "weight_decay"))
    )
    with np.errstate(all="ignore"):  # host scalars: an overflow is a value, not an error
        bc1 = F32(K.ONE - powi(b1, step))
        bc2 = F32(K.ONE - powi(b2, step))
        return AdamWScalars(
            b1=b1,
            omb1=F32(K.ONE - b1),
            b2=b2,
            omb2=F32(K.ONE - b2),
            ss=F32(lr / bc1),
            sbc2=F32(np.sqrt(bc2)),
            eps=eps,
            decay=F32(K.ONE - lr * wd),
        )
