"""The settings of one value: text, a name, a path, whole numbers, a number of processes, yes/no,
and one word of a list. A value that cannot be used warns (the default is in effect) or, where the
declaration says so, refuses start."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from queue_manager.config.declare.base import MAX_INT, Declaration, Derived, resolve_default
from queue_manager.config.outcomes import ConfigRefusal

if TYPE_CHECKING:
    from queue_manager.config.declare.reader import Reader

S = TypeVar("S", bound=str)

_UINT_RE = re.compile(r"[0-9]+")
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


@dataclass(frozen=True, kw_only=True)
class Text(Declaration[str]):
    default: str
    strip: bool = False

    def read(self, r: Reader, earlier: Mapping[str, Any]) -> str:
        value = r.raw(self.env)
        if value is None:
            return self.default
        return (value.strip() or self.default) if self.strip else value

    def unset(self, earlier: Mapping[str, Any]) -> str:
        return self.default

    def documented_defaults(self) -> tuple[str, ...]:
        return (f"`{self.default}`",)


@dataclass(frozen=True, kw_only=True)
class OptionalText(Declaration[str | None]):
    def read(self, r: Reader, earlier: Mapping[str, Any]) -> str | None:
        return r.raw(self.env)

    def unset(self, earlier: Mapping[str, Any]) -> str | None:
        return None


@dataclass(frozen=True, kw_only=True)
class Name(Declaration[str]):
    """A name that must match ``pattern`` whole, or start is refused."""

    default: str | Derived[str]
    pattern: re.Pattern[str]
    #: The refusal after '<VAR>=<value> is not ': what the name must be, and the way out.
    refusal: str
    #: A longer value is cut to this many characters in the refusal.
    shown_length: int | None = None

    def read(self, r: Reader, earlier: Mapping[str, Any]) -> str:
        value = r.raw(self.env)
        if value is None:
            return resolve_default(self.default, earlier)
        if self.pattern.fullmatch(value):
            return value
        shown = value
        if self.shown_length is not None and len(value) > self.shown_length:
            shown = value[: self.shown_length - 3] + "..."
        raise ConfigRefusal(self.env, f"{self.env}={shown!r} is not {self.refusal}")

    def unset(self, earlier: Mapping[str, Any]) -> str:
        return resolve_default(self.default, earlier)

    @property
    def refuses(self) -> bool:
        return True

    def documented_defaults(self) -> tuple[str, ...]:
        return () if isinstance(self.default, Derived) else (f"`{self.default}`",)


@dataclass(frozen=True, kw_only=True)
class Path(Declaration[str | None]):
    """A path that must name an existing directory, or a readable file."""

    directory: bool
    refuse: bool
    #: What follows '<VAR>=<value> names no directory/file this process can read.'
    way_out: str

    def read(self, r: Reader, earlier: Mapping[str, Any]) -> str | None:
        value = r.raw(self.env)
        if value is None:
            return None
        if self.directory:
            if os.path.isdir(value):
                return value
        elif os.path.isfile(value) and os.access(value, os.R_OK):
            return value
        what = "directory" if self.directory else "file"
        message = f"{self.env}={value} names no {what} this process can read. {self.way_out}"
        if self.refuse:
            raise ConfigRefusal(self.env, message)
        r.warn(self.env, None, message)
        return None

    def unset(self, earlier: Mapping[str, Any]) -> str | None:
        return None

    @property
    def refuses(self) -> bool:
        return self.refuse


def _whole_number(r: Reader, name: str, default_text: str, unit: str, minimum: int, maximum: int) -> int | None:
    """The integer set, or None when unset or unusable (the latter with a warning whose effective
    value is ``default_text``)."""
    value = r.raw(name)
    if value is None:
        return None
    text = value.strip()
    if text.startswith("+"):
        text = text[1:]
    bounds = (
        f"a whole number of at least {minimum}"
        if maximum == MAX_INT
        else f"a whole number between {minimum} and {maximum}"
    )
    if _UINT_RE.fullmatch(text):
        if minimum <= int(text) <= maximum:
            return int(text)
        rule = bounds
    elif text.startswith("-") and _UINT_RE.fullmatch(text[1:]):
        rule = bounds
    else:
        rule = "a whole number" + (f" of {unit}" if unit else "")
    in_effect = f"{name} {default_text}" if default_text.startswith("unset") else f"{name}={default_text}"
    r.warn(name, default_text, f'{name}="{value}" cannot be used: {name} must be {rule}. In effect: {in_effect}.')
    return None


@dataclass(frozen=True, kw_only=True)
class Integer(Declaration[int]):
    default: int | Derived[int]
    #: What the number counts, named when the value is not a number at all ("" names nothing).
    unit: str
    minimum: int = 0
    maximum: int = MAX_INT

    def read(self, r: Reader, earlier: Mapping[str, Any]) -> int:
        default = resolve_default(self.default, earlier)
        value = _whole_number(r, self.env, str(default), self.unit, self.minimum, self.maximum)
        return default if value is None else value

    def unset(self, earlier: Mapping[str, Any]) -> int:
        return resolve_default(self.default, earlier)

    def documented_defaults(self) -> tuple[str, ...]:
        return () if isinstance(self.default, Derived) else (f"`{self.default}`",)


def cores() -> int:
    """The cores this process may run on (its CPU affinity where the system tells it), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - no sched_getaffinity (macOS, Windows)
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True, kw_only=True)
class ProcessCount(Declaration[int]):
    """A number of processes: a whole number from 1 to ``maximum``, or ``auto`` for one per core
    (:func:`cores`). Anything else warns, and the default is in effect."""

    default: int
    maximum: int

    def read(self, r: Reader, earlier: Mapping[str, Any]) -> int:
        value = r.raw(self.env)
        if value is None:
            return self.default
        if value.strip().lower() == "auto":
            return min(cores(), self.maximum)
        number = _whole_number(r, self.env, str(self.default), "processes, or auto", 1, self.maximum)
        return self.default if number is None else number

    def unset(self, earlier: Mapping[str, Any]) -> int:
        return self.default

    def documented_defaults(self) -> tuple[str, ...]:
        return (f"`{self.default}`",)


@dataclass(frozen=True, kw_only=True)
class OptionalInteger(Declaration[int | None]):
    """A whole number, or None when unset (the code using it decides what unset means)."""

    #: What is in effect when unset, beginning with "unset".
    unset_text: str
    unit: str
    minimum: int = 0
    maximum: int = MAX_INT

    def read(self, r: Reader, earlier: Mapping[str, Any]) -> int | None:
        return _whole_number(r, self.env, self.unset_text, self.unit, self.minimum, self.maximum)

    def unset(self, earlier: Mapping[str, Any]) -> int | None:
        return None


@dataclass(frozen=True, kw_only=True)
class Flag(Declaration[bool]):
    default: bool

    def read(self, r: Reader, earlier: Mapping[str, Any]) -> bool:
        value = r.raw(self.env)
        if value is None:
            return self.default
        word = value.strip().lower()
        if word in _TRUE:
            return True
        if word in _FALSE:
            return False
        name = self.env
        shown = "1" if self.default else "0"
        r.warn(
            name,
            "true" if self.default else "false",
            f'{name}="{value}" is not a yes/no value (1/0, true/false, yes/no, on/off). '
            f"{name}={shown} ({'on' if self.default else 'off'}) is in effect.",
        )
        return self.default

    def unset(self, earlier: Mapping[str, Any]) -> bool:
        return self.default

    def documented_defaults(self) -> tuple[str, ...]:
        return ("on", "`1`") if self.default else ("off", "`0`")


@dataclass(frozen=True, kw_only=True)
class Choice(Declaration[S]):
    """One word of ``choices``, compared case-insensitively."""

    default: S | Derived[S]
    choices: tuple[S, ...]
    #: What a choice is called in the message ("store", "mode").
    noun: str
    #: Whether another word refuses start; if not, it warns and the default is in effect.
    refuse: bool = False
    #: For a warning: what follows '<VAR>=<default> is in effect: '.
    note: str = ""

    def read(self, r: Reader, earlier: Mapping[str, Any]) -> S:
        default = resolve_default(self.default, earlier)
        value = r.raw(self.env)
        if value is None:
            return default
        word = value.strip().lower()
        for choice in self.choices:
            if choice == word:
                return choice
        name = self.env
        listed = ", ".join(self.choices)
        if self.refuse:
            ways_out = " or ".join(f"{name}={c}" for c in self.choices)
            raise ConfigRefusal(name, f"{name}={value} is not a {self.noun} this build has ({listed}). Set {ways_out}.")
        r.warn(
            name,
            default,
            f'{name}="{value}" is not a {self.noun} ({listed}). {name}={default} is in effect: {self.note}',
        )
        return default

    def unset(self, earlier: Mapping[str, Any]) -> S:
        return resolve_default(self.default, earlier)

    @property
    def refuses(self) -> bool:
        return self.refuse

    def documented_defaults(self) -> tuple[str, ...]:
        return () if isinstance(self.default, Derived) else (f"`{self.default}`",)
