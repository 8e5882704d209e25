"""The arithmetic versions of docs/arithmetic.md, and a backend module seen at one of them.

Version 1 folds every dot product as `acc + (a * b)` (two roundings per k);
version 2 as `fma(a, b, acc)` (one rounding per k); nothing else differs
between them (docs/arithmetic.md, section 7). So a backend at version 2 is the
same module with the five functions that fold dot products (the three matrix
products and the two attention passes built on them) called with
`fused=True`; at version 1 it is the module itself, unchanged.
"""

from __future__ import annotations

import functools
import types
from typing import TYPE_CHECKING, Any, cast

from kernels.input_error import KernelInputError

if TYPE_CHECKING:
    from kernels.backend_contract import Backend

VERSIONS = (1, 2)
# The functions whose values come from a dot product's fold: each takes `fused` as a keyword.
FOLDS = ("matmul", "matmul_nt", "matmul_tn", "attention", "attention_backward")


def check_version(version: object) -> int:
    """The version as an int if it is one of VERSIONS; KernelInputError naming it otherwise (exit code 2)."""
    if isinstance(version, bool) or not isinstance(version, int) or version not in VERSIONS:
        raise KernelInputError(
            f"arithmetic version {version!r} is not one this build implements ({', '.join(map(str, VERSIONS))})"
        )
    return version


@functools.cache
def at_version(module: types.ModuleType, version: int) -> Backend[Any]:
    """`module` (a backend) computing in arithmetic `version`; one object per (module, version)."""
    if check_version(version) == 1:
        return cast("Backend[Any]", module)
    view = types.ModuleType(f"{module.__name__}@v{version}", f"{module.__name__} at arithmetic version {version}")
    for name, value in vars(module).items():
        if not name.startswith("__"):
            setattr(view, name, value)
    for name in FOLDS:
        setattr(view, name, functools.partial(getattr(module, name), fused=True))
    return cast("Backend[Any]", view)
