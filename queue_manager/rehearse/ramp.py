"""Arrival curves: when each synthetic visitor of a rehearsal or a simulation arrives (pure).

A curve is written as one short spec:

* ``burst``                      every visitor at once (``burst:5000`` names the count too)
* ``const:200/s``                a steady 200 arrivals a second (``/m``: a minute)
* ``linear:0-500/s:60s``         the rate climbs from 0 to 500 a second over 60 seconds
* ``step:200/s:30s,800/s:30s``   200 a second for 30 seconds, then 800 a second for 30 seconds

Durations are ``90s``, ``2m``, ``1h`` (or plain seconds). Once the curve's last part has run, its
last rate holds until every visitor has arrived; a curve that ends at 0 arrivals a second with
visitors still to come is refused. Visitor ``k`` (from 0) arrives at the instant the curve has
brought ``k`` arrivals, so the first arrives at 0 and a steady curve spaces them evenly.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

SPEC_HELP = "burst | burst:N | const:R/s | linear:A-B/s:DUR | step:R1/s:DUR1,R2/s:DUR2,… (rates /s or /m)"

_RATE = re.compile(r"^(\d+(?:\.\d+)?)/(s|m)$")
_RANGE = re.compile(r"^(\d+(?:\.\d+)?)-(\d+(?:\.\d+)?)/(s|m)$")
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h)?$")
_UNIT_SEC = {"s": 1.0, "m": 60.0, "h": 3600.0}


class RampError(ValueError):
    """A spec that does not describe a curve; the message says what is wrong and shows the forms."""


@dataclass(frozen=True, slots=True)
class Segment:
    """``duration`` seconds in which the rate moves linearly from ``start`` to ``end`` arrivals a second."""

    duration: float
    start: float
    end: float

    def count(self, elapsed: float) -> float:
        """Arrivals in the first ``elapsed`` seconds of this segment."""
        slope = (self.end - self.start) / self.duration
        return self.start * elapsed + slope * elapsed * elapsed / 2


@dataclass(frozen=True, slots=True)
class Ramp:
    """A parsed curve: ``burst`` (everyone at 0), or segments followed by their last rate."""

    spec: str
    segments: tuple[Segment, ...] = ()
    burst: bool = False
    count: int | None = None  # the visitor count the spec itself names (``burst:N``)

    def visitors(self, asked: int | None) -> int:
        """The number of visitors: the one asked for, the spec's own, or a clear error."""
        if asked is not None and self.count is not None and asked != self.count:
            raise RampError(f"{self.spec!r} names {self.count} visitors but --visitors says {asked}")
        n = asked if asked is not None else self.count
        if n is None:
            raise RampError(f"{self.spec!r} needs --visitors N (how many visitors arrive)")
        if n < 1:
            raise RampError("--visitors must be at least 1")
        return n

    def arrival_times(self, n: int) -> list[float]:
        """The arrival instant (seconds from the start) of each of ``n`` visitors, in order."""
        if self.burst:
            return [0.0] * n
        tail = self.segments[-1].end
        total = sum(s.count(s.duration) for s in self.segments)
        if n - 1 > total and tail <= 0:
            raise RampError(
                f"{self.spec!r} ends at 0 arrivals a second after {math.floor(total) + 1} visitors; {n} were asked for"
            )
        times: list[float] = []
        offset = 0.0  # where the current segment starts
        before = 0.0  # arrivals before it
        segments = iter(self.segments)
        seg: Segment | None = next(segments)
        last = 0.0  # the end of the last part that brought anybody
        for k in range(n):
            # a part that brings nobody is waited through; so is one whose arrivals are all used up
            while seg is not None and (seg.count(seg.duration) <= 0 or before + seg.count(seg.duration) < k):
                if seg.count(seg.duration) > 0:
                    last = offset + seg.duration
                before += seg.count(seg.duration)
                offset += seg.duration
                seg = next(segments, None)
            if seg is None:
                times.append(offset + (k - before) / tail if tail > 0 else last)
            else:
                times.append(offset + _solve(seg, k - before))
        return times

    def rate_at(self, t: float) -> float:
        """Arrivals a second at ``t`` (the burst counts as none: it is one instant)."""
        if self.burst:
            return 0.0
        for seg in self.segments:
            if t < seg.duration:
                return seg.start + (seg.end - seg.start) * t / seg.duration
            t -= seg.duration
        return self.segments[-1].end


def _solve(seg: Segment, need: float) -> float:
    """The time into ``seg`` at which ``need`` arrivals have come (0 <= need <= the segment's count)."""
    if need <= 0:
        return 0.0
    a = (seg.end - seg.start) / seg.duration / 2
    b = seg.start
    if abs(a) < 1e-12:
        return need / b
    # a·t² + b·t − need = 0, the root inside the segment (numerically stable form)
    disc = max(0.0, b * b + 4 * a * need)
    return min(seg.duration, 2 * need / (b + math.sqrt(disc)))


def _rate(text: str, spec: str) -> float:
    m = _RATE.match(text)
    if m is None:
        raise RampError(f"{spec!r}: {text!r} is not a rate like 200/s or 3000/m ({SPEC_HELP})")
    return float(m.group(1)) / (1.0 if m.group(2) == "s" else 60.0)


def _duration(text: str, spec: str) -> float:
    m = _DURATION.match(text)
    if m is None:
        raise RampError(f"{spec!r}: {text!r} is not a duration like 30s, 2m or 1h ({SPEC_HELP})")
    sec = float(m.group(1)) * _UNIT_SEC[m.group(2) or "s"]
    if sec <= 0:
        raise RampError(f"{spec!r}: a duration must be more than 0")
    return sec


def parse_ramp(spec: str) -> Ramp:
    """Parse a curve spec, or raise RampError naming what is wrong."""
    text = spec.strip().lower().replace(" ", "")
    kind, _, rest = text.partition(":")
    if kind == "burst":
        if not rest:
            return Ramp(spec, burst=True)
        if not rest.isdigit() or int(rest) < 1:
            raise RampError(f"{spec!r}: burst:N takes a whole number of visitors, at least 1")
        return Ramp(spec, burst=True, count=int(rest))
    if kind == "const":
        rate = _rate(rest, spec)
        if rate <= 0:
            raise RampError(f"{spec!r}: a constant rate must be more than 0")
        return Ramp(spec, (Segment(1.0, rate, rate),))
    if kind == "linear":
        rng, _, dur = rest.partition(":")
        m = _RANGE.match(rng)
        if m is None or not dur:
            raise RampError(f"{spec!r}: linear takes FROM-TO/s:DURATION, e.g. linear:0-500/s:60s")
        per = 1.0 if m.group(3) == "s" else 60.0
        return Ramp(spec, (Segment(_duration(dur, spec), float(m.group(1)) / per, float(m.group(2)) / per),))
    if kind == "step":
        if not rest:
            raise RampError(f"{spec!r}: step takes RATE:DURATION parts, e.g. step:200/s:30s,800/s:30s")
        segments = []
        for part in rest.split(","):
            rate_text, _, dur = part.partition(":")
            if not dur:
                raise RampError(f"{spec!r}: {part!r} needs RATE:DURATION, e.g. 200/s:30s")
            rate = _rate(rate_text, spec)
            segments.append(Segment(_duration(dur, spec), rate, rate))
        if all(s.start <= 0 for s in segments):
            raise RampError(f"{spec!r}: every step is 0 arrivals a second")
        return Ramp(spec, tuple(segments))
    raise RampError(f"{spec!r} is not an arrival curve: use {SPEC_HELP}")
