"""The float32 constants of docs/arithmetic.md, built from their bit patterns.

All three backends import these, so a constant can never drift between them
through a different decimal spelling or a float64 round trip. Each value is a
`numpy.float32` scalar; `*_BITS` keeps the pattern for backends that need it
(Triton kernels take the bits and reinterpret them on the device).
"""

from __future__ import annotations

import numpy as np


def float32_from_bits(bits: int) -> np.float32:
    """Return the float32 whose IEEE-754 bit pattern is `bits` (0 <= bits < 2**32)."""
    value: np.float32 = np.array([bits], dtype=np.uint32).view(np.float32)[0]
    return value


# Exact small values used in formulas.
ZERO = np.float32(0.0)
NEG_ZERO = np.float32(-0.0)
HALF = np.float32(0.5)
ONE = np.float32(1.0)
TWO = np.float32(2.0)
POS_INF = np.float32(np.inf)
NEG_INF = np.float32(-np.inf)
CANONICAL_NAN_BITS = 0x7FC00000

# 3.1 exp
EXP_HI_BITS = 0x42B20000  # 89.0: above it exp returns +inf
EXP_LO_BITS = 0xC2D00000  # -104.0: below it exp returns +0.0
LOG2E_BITS = 0x3FB8AA3B
LN2_HI_BITS = 0x3F317200
LN2_LO_BITS = 0x35BFBE8E
SHIFTER_BITS = 0x4B400000
EXP_C_BITS = {2: 0x3F000000, 3: 0x3E2AAAAB, 4: 0x3D2AAAAB, 5: 0x3C088889, 6: 0x3AB60B61, 7: 0x39500D01}

EXP_HI = float32_from_bits(EXP_HI_BITS)
EXP_LO = float32_from_bits(EXP_LO_BITS)
LOG2E = float32_from_bits(LOG2E_BITS)
LN2_HI = float32_from_bits(LN2_HI_BITS)
LN2_LO = float32_from_bits(LN2_LO_BITS)
SHIFTER = float32_from_bits(SHIFTER_BITS)
C2 = float32_from_bits(EXP_C_BITS[2])
C3 = float32_from_bits(EXP_C_BITS[3])
C4 = float32_from_bits(EXP_C_BITS[4])
C5 = float32_from_bits(EXP_C_BITS[5])
C6 = float32_from_bits(EXP_C_BITS[6])
C7 = float32_from_bits(EXP_C_BITS[7])

# 3.2 log
SQRT2_BITS = 0x3FB504F3
TWO23_BITS = 0x4B000000
MIN_NORMAL_BITS = 0x00800000  # 2^-126, the smallest normal float32
LOG_L_BITS = {3: 0x3EAAAAAB, 5: 0x3E4CCCCD, 7: 0x3E124925, 9: 0x3DE38E39, 11: 0x3DBA2E8C}

SQRT2 = float32_from_bits(SQRT2_BITS)
TWO23 = float32_from_bits(TWO23_BITS)
MIN_NORMAL = float32_from_bits(MIN_NORMAL_BITS)
L3 = float32_from_bits(LOG_L_BITS[3])
L5 = float32_from_bits(LOG_L_BITS[5])
L7 = float32_from_bits(LOG_L_BITS[7])
L9 = float32_from_bits(LOG_L_BITS[9])
L11 = float32_from_bits(LOG_L_BITS[11])
