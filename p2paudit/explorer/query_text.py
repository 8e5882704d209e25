"""A request target's path and query string, decoded strictly: anything malformed is an InputError (HTTP 400).

urllib's own decoding is lenient (a stray "%zz" stays as it is, bytes that are not UTF-8 become U+FFFD,
more than max_num_fields raises ValueError): here each of those is refused with one line that names it.
"""

from __future__ import annotations

import re
import urllib.parse

from p2paudit.errors import InputError

MAX_PARAMETERS = 20  # no endpoint takes more than five
MAX_QUERY = 16_384  # characters: the longest a page sends is a list of trusted keys (MAX_TRUSTED * 65)
_BAD_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")


def decode_part(text: str, what: str) -> str:
    """Percent-decode `text` as UTF-8; InputError for a "%" without two hex digits or bytes that are not UTF-8."""
    bad = _BAD_PERCENT.search(text)
    if bad:
        raise InputError(f"{what} has a bad percent-encoding at {text[bad.start() : bad.start() + 3]!r}")
    try:
        return urllib.parse.unquote(text, errors="strict")
    except UnicodeDecodeError:
        raise InputError(f"{what} percent-encodes bytes that are not UTF-8") from None


def parse_query(text: str) -> dict[str, str]:
    """name=value pairs ("+" is a space); each name at most once; InputError naming what is wrong."""
    if len(text) > MAX_QUERY:
        raise InputError(f"query string has {len(text)} characters, more than {MAX_QUERY}")
    params: dict[str, str] = {}
    for item in text.split("&") if text else ():
        if not item:
            continue
        name, _, value = item.partition("=")
        name = decode_part(name.replace("+", " "), "query parameter name")
        if name in params:
            raise InputError(f"query parameter {name[:40]!r} is given twice")
        params[name] = decode_part(value.replace("+", " "), f"query parameter {name[:40]!r}")
        if len(params) > MAX_PARAMETERS:
            raise InputError(f"query has more than {MAX_PARAMETERS} parameters")
    return params


def check_names(params: dict[str, str], allowed: tuple[str, ...], endpoint: str) -> None:
    """InputError for a parameter the endpoint does not take (a typo would otherwise be silently ignored)."""
    for name in params:
        if name not in allowed:
            takes = ", ".join(allowed) if allowed else "no parameters"
            raise InputError(f"{endpoint} does not take parameter {name[:40]!r} (it takes {takes})")
