"""Times in a recording as people write and read them: local time, ISO, a time of day, offsets."""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta

_DURATION = re.compile(r"^(?P<sign>[+-])?(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m)?(?:(?P<s>\d+(?:\.\d+)?)s?)?$")
_TIME_OF_DAY = re.compile(r"^\d{1,2}:\d{2}(:\d{2})?$")
FORMS = (
    "an ISO time (2024-05-01T03:12:00), a time of day (03:12 or 03:12:05), +90s / +1h30m from the start,"
    " -5m from the end, start or end"
)


def local(at: float) -> str:
    return datetime.fromtimestamp(at).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")


def parse_when(text: str, start: float, end: float) -> float:
    """The unix time ``text`` names in a recording from ``start`` to ``end``; DltopError if none.
    Both ends are inclusive to the whole second, as people read them (a recording of 18.96 s is
    shown as 19 s long: ``+19s`` is its end)."""
    from dltop.errors import DltopError

    when = _parse(text.strip(), start, end)
    if when is None:
        raise DltopError(f"cannot read the time {text!r}: use {FORMS}")
    if not math.floor(start) <= when <= math.ceil(end):
        raise DltopError(f"{text} is outside the recording ({local(start)} to {local(end)})")
    return min(max(when, start), end)


def _parse(text: str, start: float, end: float):
    if text in ("start", "end"):
        return start if text == "start" else end
    duration = _DURATION.match(text)
    if duration and any(duration.group(k) for k in "hms"):
        seconds = int(duration["h"] or 0) * 3600 + int(duration["m"] or 0) * 60 + float(duration["s"] or 0)
        return end - seconds if duration["sign"] == "-" else start + seconds
    if _TIME_OF_DAY.match(text):
        first = datetime.fromtimestamp(math.floor(start)).astimezone()
        hour, minute, *second = (int(v) for v in text.split(":"))
        try:
            day = first.replace(hour=hour, minute=minute, second=second[0] if second else 0)
        except ValueError:
            return None  # 25:00, 12:61: no time of day
        return (day if day >= first else day + timedelta(days=1)).timestamp()
    try:
        moment = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    except ValueError:
        return None
    return (moment if moment.tzinfo else moment.astimezone()).timestamp()
