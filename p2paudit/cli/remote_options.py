"""The options of every command that opens a run on a web server (verify-range, daemon): one definition each.

The cache bound, the silence window and the redirect rule mean the same wherever a remote run is opened, so
their flags, defaults and wording are written once; each command adds only what differs (a flag's name, what
the cache holds in its words).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]

DEFAULT_CACHE_SIZE = 16 * 1024**3  # bytes of verified remote files kept (LRU)
DEFAULT_SILENCE_S = 60.0  # seconds a run's server may stay silent before a fetch fails


def cache_size_option(what: str) -> Decorator:
    """--cache-size: bytes the cache of verified files may hold; `what` says which cache, in the command's words."""
    return click.option(
        "--cache-size",
        type=click.IntRange(min=1),
        default=DEFAULT_CACHE_SIZE,
        show_default=True,
        help=f"Bytes {what} may hold; least recently used files are evicted.",
    )


def silence_option(flag: str, whose: str, then: str = "") -> Decorator:
    """`flag` (seconds): how long `whose` may stay silent, and the window of the 1 KiB/s rate floor; `then`: what
    follows a failed fetch, when the command goes on."""
    return click.option(
        flag,
        type=click.FloatRange(min=0.001),
        default=DEFAULT_SILENCE_S,
        show_default=True,
        help=f"Seconds {whose} may stay silent before a fetch fails{then}; also the window over which it must send "
        "at least 1 KiB/s (a request also fails after an hour).",
    )


allow_other_hosts_option: Decorator = click.option(
    "--allow-other-hosts",
    is_flag=True,
    help="Follow a remote run's redirects to other hosts or ports (never to another scheme); refused by default.",
)
