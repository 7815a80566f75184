"""A declared setting: everything about it but its field name and Python type (the field has those),
and a default computed from the settings read before it."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from queue_manager.config.declare.reader import Reader

T = TypeVar("T")

# Largest integer a JSON consumer (the console, a Node port) can hold exactly.
MAX_INT = 2**53 - 1


@dataclass(frozen=True)
class Derived(Generic[T]):
    """A default computed from the settings read before this one (a mapping of field name to value)."""

    compute: Callable[[Mapping[str, Any]], T]
    #: How docs/configuration.md describes it, for the reader of the declaration.
    described: str


def resolve_default(default: T | Derived[T], earlier: Mapping[str, Any]) -> T:
    """The default in effect: computed from ``earlier`` when it is a :class:`Derived`."""
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
