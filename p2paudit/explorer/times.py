"""Times as people read them: "2023-11-14 22:13:20 UTC", for every time a record can sign.

A record's time_ms is any integer in 0..2^63 - 1 and a cosignature's timestamp any in 0..2^63 - 1 seconds,
so a peer can sign times past year 9999 (Python's datetime refuses them) and past 8.64e15 ms (JavaScript's
Date refuses them, and JSON numbers past 2^53 lose digits in a browser). The date is computed here with
integers alone (the proleptic Gregorian calendar, H. Hinnant's days-to-civil), so every such time gets its
exact date, and the pages show this text instead of converting the number themselves.
"""

from __future__ import annotations


def civil_from_days(days: int) -> tuple[int, int, int]:
    """(year, month, day) of the day `days` after 1970-01-01, for any integer (proleptic Gregorian)."""
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097  # day of the 400-year era, 0..146096
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (month <= 2), month, day


def utc_text_ms(ms: int | None) -> str | None:
    """A time in ms since 1970 (UTC) as "YYYY-MM-DD HH:MM:SS UTC" (milliseconds shown when not zero)."""
    if ms is None:
        return None
    seconds, millis = divmod(ms, 1000)
    days, second = divmod(seconds, 86_400)
    year, month, day = civil_from_days(days)
    hour, rest = divmod(second, 3600)
    fraction = f".{millis:03d}" if millis else ""
    return f"{year:04d}-{month:02d}-{day:02d} {hour:02d}:{rest // 60:02d}:{rest % 60:02d}{fraction} UTC"


def utc_text_s(seconds: int | float | None) -> str | None:
    """A time in whole or fractional seconds since 1970 (UTC), as utc_text_ms writes it (to the second)."""
    if seconds is None:
        return None
    return utc_text_ms(int(seconds) * 1000)
