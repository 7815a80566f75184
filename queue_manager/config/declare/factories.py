"""The factories a setting is declared with (``integer``, ``flag``, ``text``, ``choice``, ...), the
settings class they make fields of, and the declarations read back from it in declaration order.

Each factory returns a dataclass field carrying its declaration, typed as the setting's value (as
``dataclasses.field()`` is). The variable, the default and the description are positional, so a
declaration reads as one line and no call names a ``default=`` that would make the field optional.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar, cast, dataclass_transform

from queue_manager.config.declare.base import MAX_INT, Declaration, Derived
from queue_manager.config.declare.lists import HostNames, IPNetwork, Networks, SecretList
from queue_manager.config.declare.scalars import (
    Choice,
    Flag,
    Integer,
    Name,
    OptionalInteger,
    OptionalText,
    Path,
    ProcessCount,
    Text,
)
from queue_manager.config.declare.urls import HttpUrl, SmtpUrl

T = TypeVar("T")
S = TypeVar("S", bound=str)
C = TypeVar("C")

_METADATA_KEY = "queue_manager.config"


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
