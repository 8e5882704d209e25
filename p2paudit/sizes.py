"""Sizes in bytes as people write them ("512M", "8G"), and this machine's physical memory (a leaf module)."""

from __future__ import annotations

import os
import re

from p2paudit.errors import InputError

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def physical_memory() -> int:
    """This machine's physical memory in bytes (sysconf; 64 GiB where it cannot say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 64 << 30


def parse_bytes(text: str, name: str, allow_zero: bool = False) -> int:
    """`text` ("4096", "512M", "8G") in bytes; InputError naming `name` for anything else, or for zero
    unless `allow_zero`."""
    match = re.fullmatch(r"\s*([0-9]{1,15})\s*([KMGT]?)i?B?\s*", text, re.IGNORECASE)
    if match is None or (int(match[1]) == 0 and not allow_zero):
        least = "a size" if allow_zero else "a positive size"
        raise InputError(f"{name}={text!r}: want {least} in bytes, or with a K, M, G or T suffix (512M)")
    return int(match[1]) * _UNITS[match[2].upper()]
