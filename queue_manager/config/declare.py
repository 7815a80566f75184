"""How a setting is declared, and how each kind of setting is read from the environment.

A setting is one field of :class:`~queue_manager.config.settings.Settings`, declared with one of
the factories at the end of this module (``integer``, ``flag``, ``text``, ``choice``, ...)::

    port: int = integer("PORT", 8080, "TCP port to listen on.", maximum=65535)

The factory stores a :class:`Declaration` in the field's metadata: the environment variable, the
default, the bounds or choices, a one-line description, and how a bad value is refused or warned
about. Each factory is typed to return the setting's Python type, so mypy checks the field's
annotation against its declaration, and ``settings.port`` is an ``int`` to every caller.

Reading follows the rules of docs/configuration.md: an empty value counts as unset; a value that
cannot be used is never silently replaced (the warning names the variable, what was set and what
is in effect); the value of a sensitive setting is never copied into a refusal or a warning.
"""

from __future__ import annotations

import ipaddress
import os
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Generic, TypeVar, cast, dataclass_transform
from urllib.parse import urlsplit

from queue_manager.config.outcomes import ConfigRefusal, ConfigWarning

__all__ = [
    "HIDDEN",
    "Declaration",
    "Derived",
    "IPNetwork",
    "Reader",
    "choice",
    "declarations",
    "flag",
    "host_names",
    "http_url",
    "identifier",
    "integer",
    "networks",
    "optional_integer",
    "optional_text",
    "path",
    "process_count",
    "secret_list",
    "settings_class",
    "smtp_server",
    "text",
]

T = TypeVar("T")
S = TypeVar("S", bound=str)
C = TypeVar("C")

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: What a warning shows instead of the value of a sensitive setting.
HIDDEN = "(hidden)"
# Largest integer a JSON consumer (the console, a Node port) can hold exactly.
MAX_INT = 2**53 - 1

_UINT_RE = re.compile(r"[0-9]+")
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})

_METADATA_KEY = "queue_manager.config"


# --------------------------------------------------------------------------------- the reader


class Reader:
    """One environment mapping, read by declared variable name only, and the warnings it gave.

    ``step`` is the position, in the order settings are read, of what is being read or checked;
    :attr:`warnings` lists the warnings in step order (in the order given within a step).
    """

    def __init__(self, environ: Mapping[str, str], declared: Sequence[Declaration[Any]]) -> None:
        self._env = environ
        self._known = frozenset(d.env for d in declared)
        self._sensitive = frozenset(d.env for d in declared if d.sensitive)
        self.step = 0
        self._warnings: list[tuple[int, ConfigWarning]] = []

    def raw(self, name: str) -> str | None:
        """The value set, or None when unset or empty."""
        assert name in self._known, f"{name} must be declared in queue_manager/config/settings.py"
        value = self._env.get(name)
        if value is None or value == "":
            return None
        return value

    def shown(self, name: str) -> str | None:
        """The set value as it may be reported (secrets hidden)."""
        value = self.raw(name)
        if value is None:
            return None
        return HIDDEN if name in self._sensitive else value

    def warn(self, name: str, effective: str | None, message: str, *, set_value: str | None = None) -> None:
        shown = self.shown(name) if set_value is None else set_value
        self._warnings.append((self.step, ConfigWarning(name, shown, effective, message)))

    @property
    def warnings(self) -> tuple[ConfigWarning, ...]:
        return tuple(w for _, w in sorted(self._warnings, key=lambda item: item[0]))

    def warned(self, name: str) -> bool:
        """Whether a warning so far names ``name``."""
        return any(w.variable == name for _, w in self._warnings)


# ---------------------------------------------------------------------------- declarations


@dataclass(frozen=True)
class Derived(Generic[T]):
    """A default computed from the settings read before this one (a mapping of field name to value)."""

    compute: Callable[[Mapping[str, Any]], T]
    #: How docs/configuration.md describes it, for the reader of the declaration.
    described: str


def _default(default: T | Derived[T], earlier: Mapping[str, Any]) -> T:
    return default.compute(earlier) if isinstance(default, Derived) else default


@dataclass(frozen=True, kw_only=True)
class Declaration(ABC, Generic[T]):
    """Everything about one setting but its field name and Python type (the field has those)."""

    env: str
    doc: str
    #: Never copied into a refusal, a warning or a hardening line.
    sensitive: bool = False

    @abstractmethod
    def read(self, r: Reader, earlier: Mapping[str, Any]) -> T:
        """The value in effect: the parsed value when set, the default when unset, the default with
        a warning when unusable. Raises :class:`ConfigRefusal` for a value that refuses start.
        ``earlier`` holds the settings read before this one, for a derived default."""

    @abstractmethod
    def unset(self, earlier: Mapping[str, Any]) -> T:
        """The value when the variable is unset."""

    @property
    def refuses(self) -> bool:
        """Whether a bad value of this setting alone refuses start."""
        return False

    @property
    def derived(self) -> bool:
        """Whether the value when unset is computed from other settings (a :class:`Derived` default)."""
        return isinstance(getattr(self, "default", None), Derived)

    def documented_defaults(self) -> tuple[str, ...]:
        """How docs/configuration.md may begin this setting's Default cell; () when not checked."""
        return ()


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
            return _default(self.default, earlier)
        if self.pattern.fullmatch(value):
            return value
        shown = value
        if self.shown_length is not None and len(value) > self.shown_length:
            shown = value[: self.shown_length - 3] + "..."
        raise ConfigRefusal(self.env, f"{self.env}={shown!r} is not {self.refusal}")

    def unset(self, earlier: Mapping[str, Any]) -> str:
        return _default(self.default, earlier)

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
        default = _default(self.default, earlier)
        value = _whole_number(r, self.env, str(default), self.unit, self.minimum, self.maximum)
        return default if value is None else value

    def unset(self, earlier: Mapping[str, Any]) -> int:
        return _default(self.default, earlier)

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
        default = _default(self.default, earlier)
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
        return _default(self.default, earlier)

    @property
    def refuses(self) -> bool:
        return self.refuse

    def documented_defaults(self) -> tuple[str, ...]:
        return () if isinstance(self.default, Derived) else (f"`{self.default}`",)


def _bad_entry(name: str, entry: str) -> str:
    hint = " (two entries missing their comma?)" if any(ch.isspace() for ch in entry) else ""
    return f'{name} entry "{entry}" is not an IP address or a CIDR range{hint}.'


def _parse_network(entry: str) -> IPNetwork:
    if "%" in entry or any(ch.isspace() for ch in entry):
        raise ValueError(entry)
    return ipaddress.ip_network(entry, strict=False)


def _has_host_bits(entry: str) -> bool:
    try:
        ipaddress.ip_network(entry, strict=True)
    except ValueError:
        return True
    return False


@dataclass(frozen=True, kw_only=True)
class Networks(Declaration[tuple[IPNetwork, ...]]):
    """Comma-separated addresses or CIDR ranges, IPv4 and IPv6; a single address becomes a /32 or
    /128. A malformed entry refuses start (``refuse``) or is dropped with a warning."""

    refuse: bool

    def read(self, r: Reader, earlier: Mapping[str, Any]) -> tuple[IPNetwork, ...]:
        name = self.env
        value = r.raw(name)
        if value is None:
            return ()
        result: list[IPNetwork] = []
        dropped: list[str] = []
        widened: list[tuple[str, IPNetwork]] = []
        for entry in (part.strip() for part in value.split(",")):
            if not entry:
                continue
            try:
                network = _parse_network(entry)
            except ValueError:
                if self.refuse:
                    raise ConfigRefusal(
                        name,
                        f"{_bad_entry(name, entry)} Fix that entry (entries are separated by commas, e.g. "
                        f"{name}=173.245.48.0/20,2400:cb00::/32) or unset {name}.",
                    ) from None
                dropped.append(entry)
                continue
            if "/" in entry and _has_host_bits(entry):
                widened.append((entry, network))
            result.append(network)
        found = tuple(result)
        effective = ",".join(str(n) for n in found) or None
        for entry in dropped:
            r.warn(name, effective, f"{_bad_entry(name, entry)} It is ignored; fix it to have it apply.")
        for entry, network in widened:
            r.warn(
                name,
                effective,
                f'{name} entry "{entry}" has host bits set; it is read as the range {network}. '
                f"Write {network} to say so, or a single address without a prefix length.",
            )
        if not found and not dropped:
            r.warn(name, None, f'{name}="{value}" lists no address; it is treated as unset.')
        return found

    def unset(self, earlier: Mapping[str, Any]) -> tuple[IPNetwork, ...]:
        return ()

    @property
    def refuses(self) -> bool:
        return self.refuse


def _is_http_url(value: str) -> bool:
    try:
        parts = urlsplit(value.strip())
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


@dataclass(frozen=True, kw_only=True)
class HttpUrl(Declaration[str | None]):
    """An http(s) URL with a host (whitespace trimmed); anything else warns and is not used."""

    #: What follows '... is not an http(s) URL with a host, so '.
    otherwise: str

    def read(self, r: Reader, earlier: Mapping[str, Any]) -> str | None:
        value = r.raw(self.env)
        if value is None:
            return None
        if _is_http_url(value):
            return value.strip()
        named = self.env if self.sensitive else f'{self.env}="{value}"'
        r.warn(self.env, None, f"{named} is not an http(s) URL with a host, so {self.otherwise}")
        return None

    def unset(self, earlier: Mapping[str, Any]) -> str | None:
        return None


#: The schemes SMTP_URL accepts: STARTTLS (required), implicit TLS, and no TLS for a local relay.
SMTP_SCHEMES = ("smtp", "smtps", "smtp+plain")


def _is_smtp_url(value: str) -> bool:
    try:
        parts = urlsplit(value.strip())
        parts.port  # noqa: B018 - a port out of range raises here
    except ValueError:
        return False
    return parts.scheme in SMTP_SCHEMES and bool(parts.hostname) and parts.path in ("", "/") and not parts.query


@dataclass(frozen=True, kw_only=True)
class SmtpUrl(Declaration[str | None]):
    """smtp://, smtps:// or smtp+plain:// with a host and nothing after it (whitespace trimmed); anything
    else warns (never quoting the value: it may carry a password) and is not used."""

    otherwise: str

    def read(self, r: Reader, earlier: Mapping[str, Any]) -> str | None:
        value = r.raw(self.env)
        if value is None:
            return None
        if _is_smtp_url(value):
            return value.strip()
        r.warn(
            self.env,
            None,
            f"{self.env} is not an smtp://, smtps:// or smtp+plain:// URL with a host and no path, so {self.otherwise}",
        )
        return None

    def unset(self, earlier: Mapping[str, Any]) -> str | None:
        return None


@dataclass(frozen=True, kw_only=True)
class HostNames(Declaration[tuple[str, ...]]):
    """Comma-separated host names, lower-cased, without repeats; an entry with a path or a space
    warns and is dropped."""

    def read(self, r: Reader, earlier: Mapping[str, Any]) -> tuple[str, ...]:
        name = self.env
        value = r.raw(name)
        if value is None:
            return ()
        hosts: list[str] = []
        dropped: list[str] = []
        for entry in (part.strip().lower() for part in value.split(",")):
            if not entry:
                continue
            if "/" in entry or any(ch.isspace() for ch in entry):
                dropped.append(entry)
            elif entry not in hosts:
                hosts.append(entry)
        effective = ",".join(hosts) or None
        for entry in dropped:
            r.warn(
                name,
                effective,
                f'{name} entry "{entry}" is not a host name (write qm.example.com, without a scheme or '
                "path); it is ignored.",
            )
        return tuple(hosts)

    def unset(self, earlier: Mapping[str, Any]) -> tuple[str, ...]:
        return ()


@dataclass(frozen=True, kw_only=True)
class SecretList(Declaration[tuple[str, ...]]):
    """Comma-separated secrets (whitespace trimmed, empty entries skipped). An entry shorter than
    ``min_length`` refuses start, naming only its position."""

    min_length: int
    #: What follows '<VAR> entry i of n is shorter than N characters: '.
    too_short: str
    #: What follows '<VAR> is set but holds no value (only commas or spaces), so '.
    empty: str

    def read(self, r: Reader, earlier: Mapping[str, Any]) -> tuple[str, ...]:
        name = self.env
        value = r.raw(name)
        if value is None:
            return ()
        entries = [e for e in (part.strip() for part in value.split(",")) if e]
        for index, entry in enumerate(entries, start=1):
            if len(entry) < self.min_length:
                # Never print the value, nor anything derived from it beyond its position.
                raise ConfigRefusal(
                    name,
                    f"{name} entry {index} of {len(entries)} is shorter than {self.min_length} characters: "
                    f"{self.too_short}",
                )
        if not entries:
            r.warn(name, None, f"{name} is set but holds no value (only commas or spaces), so {self.empty}")
        return tuple(entries)

    def unset(self, earlier: Mapping[str, Any]) -> tuple[str, ...]:
        return ()

    @property
    def refuses(self) -> bool:
        return True


# ------------------------------------------------------------------------------- the factories
#
# Each returns a dataclass field carrying its declaration, typed as the setting's value (as
# ``dataclasses.field()`` is). The variable, the default and the description are positional, so a
# declaration reads as one line and no call names a ``default=`` that would make the field optional.


def _declare(declaration: Declaration[T]) -> T:
    return cast(T, field(metadata={_METADATA_KEY: declaration}))


def text(env: str, default: str, doc: str, /, *, strip: bool = False, sensitive: bool = False) -> str:
    """A string; ``strip`` trims it, and a blank value then means the default."""
    return _declare(Text(env=env, doc=doc, default=default, strip=strip, sensitive=sensitive))


def optional_text(env: str, doc: str, /, *, sensitive: bool = False) -> str | None:
    """A string as set, or None when unset."""
    return _declare(OptionalText(env=env, doc=doc, sensitive=sensitive))


def identifier(
    env: str,
    default: str | Derived[str],
    doc: str,
    /,
    *,
    pattern: str,
    refusal: str,
    shown_length: int | None = None,
) -> str:
    """A name matching ``pattern`` whole; any other value refuses start with
    '<VAR>=<value> is not <refusal>'."""
    return _declare(
        Name(env=env, doc=doc, default=default, pattern=re.compile(pattern), refusal=refusal, shown_length=shown_length)
    )


def path(env: str, doc: str, /, *, directory: bool, refuse: bool, way_out: str) -> str | None:
    """A path to an existing directory (``directory``) or a readable file; None when unset. Any
    other path refuses start (``refuse``) or warns and is not used."""
    return _declare(Path(env=env, doc=doc, directory=directory, refuse=refuse, way_out=way_out))


def integer(
    env: str,
    default: int | Derived[int],
    doc: str,
    /,
    *,
    unit: str = "",
    minimum: int = 0,
    maximum: int = MAX_INT,
) -> int:
    """A whole number from ``minimum`` to ``maximum``; anything else warns, and the default is in effect."""
    return _declare(Integer(env=env, doc=doc, default=default, unit=unit, minimum=minimum, maximum=maximum))


def optional_integer(
    env: str,
    doc: str,
    /,
    *,
    unset_text: str,
    unit: str = "",
    minimum: int = 0,
    maximum: int = MAX_INT,
) -> int | None:
    """A whole number, or None when unset or unusable (the latter warns that ``unset_text`` is in effect)."""
    return _declare(
        OptionalInteger(env=env, doc=doc, unset_text=unset_text, unit=unit, minimum=minimum, maximum=maximum)
    )


def process_count(env: str, default: int, doc: str, /, *, maximum: int) -> int:
    """A number of processes from 1 to ``maximum``, or ``auto`` (one per core); anything else warns,
    and the default is in effect."""
    return _declare(ProcessCount(env=env, doc=doc, default=default, maximum=maximum))


def flag(env: str, default: bool, doc: str, /) -> bool:
    """Yes/no: 1/0, true/false, yes/no, on/off in any case; anything else warns, and the default is in effect."""
    return _declare(Flag(env=env, doc=doc, default=default))


def choice(
    env: str,
    default: S | Derived[S],
    choices: tuple[S, ...],
    doc: str,
    /,
    *,
    noun: str,
    refuse: bool = False,
    note: str = "",
) -> S:
    """One of ``choices``; any other word refuses start (``refuse``) or warns, and the default is in effect."""
    return _declare(Choice(env=env, doc=doc, default=default, choices=choices, noun=noun, refuse=refuse, note=note))


def networks(env: str, doc: str, /, *, refuse: bool) -> tuple[IPNetwork, ...]:
    """Comma-separated IP addresses and CIDR ranges; a malformed entry refuses start (``refuse``) or is dropped."""
    return _declare(Networks(env=env, doc=doc, refuse=refuse))


def http_url(env: str, doc: str, /, *, otherwise: str, sensitive: bool = False) -> str | None:
    """An http(s) URL with a host, or None; anything else warns '... so <otherwise>'."""
    return _declare(HttpUrl(env=env, doc=doc, otherwise=otherwise, sensitive=sensitive))


def smtp_server(env: str, doc: str, /, *, otherwise: str) -> str | None:
    """An SMTP server URL (smtp://, smtps://, smtp+plain://), or None; anything else warns '... so <otherwise>'.
    Always sensitive: the URL may carry a password."""
    return _declare(SmtpUrl(env=env, doc=doc, otherwise=otherwise, sensitive=True))


def host_names(env: str, doc: str, /) -> tuple[str, ...]:
    """Comma-separated host names, lower-cased."""
    return _declare(HostNames(env=env, doc=doc))


def secret_list(env: str, doc: str, /, *, min_length: int, too_short: str, empty: str) -> tuple[str, ...]:
    """Comma-separated secrets of at least ``min_length`` characters each (always sensitive)."""
    return _declare(
        SecretList(env=env, doc=doc, sensitive=True, min_length=min_length, too_short=too_short, empty=empty)
    )


@dataclass_transform(
    frozen_default=True,
    field_specifiers=(
        text,
        optional_text,
        identifier,
        path,
        integer,
        optional_integer,
        process_count,
        flag,
        choice,
        networks,
        http_url,
        smtp_server,
        host_names,
        secret_list,
    ),
)
def settings_class(cls: type[C]) -> type[C]:
    """Make ``cls`` a frozen dataclass. Type checkers read a field declared with a factory above as a
    required field of the type its annotation names (and check the factory returns that type)."""
    return dataclass(frozen=True)(cls)


def declarations(cls: type[Any]) -> dict[str, Declaration[Any]]:
    """The declared settings of a :func:`settings_class`, by field name, in declaration order."""
    return {f.name: f.metadata[_METADATA_KEY] for f in fields(cls) if _METADATA_KEY in f.metadata}
