"""`p2paudit status`'s lines for what the daemon refuses and how its syncs go (status file "bans" and "sync")."""

from __future__ import annotations

import time
from typing import Any

from p2paudit.cli.progress_display import format_seconds

MAX_LINE = 400


def one_line(text: Any, limit: int = MAX_LINE) -> str:
    """`text` as one terminal line: whitespace runs (newlines too) become one space, other control characters
    (a peer's refusal reason may carry terminal escapes) become "?", and it ends at `limit` characters."""
    flat = " ".join(str(text).split())
    safe = "".join(c if c.isprintable() else "?" for c in flat)
    return safe if len(safe) <= limit else safe[: limit - 3] + "..."


def ban_lines(bans: list[dict[str, Any]], now: float) -> list[str]:
    """One line per banned peer: who, why, for how much longer."""
    lines = [f"{len(bans)} peer(s) banned"] if bans else []
    for ban in bans[:50]:
        until = ban.get("until")
        left = format_seconds(max(0.0, until - now)) if isinstance(until, (int, float)) else "?"
        lines.append("  " + one_line(f"banned {ban.get('peer')}: {ban.get('reason')} ({left} left)"))
    return lines


def _when(seconds: Any, now: float) -> str:
    if not isinstance(seconds, (int, float)):
        return "never"
    ago = now - seconds
    return f"{format_seconds(ago)} ago" if ago >= 0 else f"in {format_seconds(-ago)}"


def sync_lines(sync: list[dict[str, Any]], now: float) -> list[str]:
    """One line per known peer: its sync state, when it last worked, when it is tried next and the last error."""
    lines = []
    for item in sync[:50]:
        line = f"sync {item.get('peer')}: {item.get('state')}, last ok {_when(item.get('last_ok'), now)}"
        if item.get("next_try") is not None:
            line += f", next try {_when(item.get('next_try'), now)}"
        if item.get("error"):
            line += f" ({item['error']})"
        lines.append("  " + one_line(line))
    return lines


def status_detail_lines(data: dict[str, Any], now: float | None = None) -> list[str]:
    """Bans and sync states, when the status file reports them."""
    now = time.time() if now is None else now
    return ban_lines(list(data.get("bans") or []), now) + sync_lines(list(data.get("sync") or []), now)
