"""How a setting is declared, and how each kind of setting is read from the environment.

A setting is one field of :class:`~queue_manager.config.settings.Settings`, declared with one of
the factories of ``factories.py`` (``integer``, ``flag``, ``text``, ``choice``, ...)::

    port: int = integer("PORT", 8080, "TCP port to listen on.", maximum=65535)

The factory stores a :class:`Declaration` in the field's metadata: the environment variable, the
default, the bounds or choices, a one-line description, and how a bad value is refused or warned
about. Each factory is typed to return the setting's Python type, so mypy checks the field's
annotation against its declaration, and ``settings.port`` is an ``int`` to every caller.

Reading follows the rules of docs/configuration.md: an empty value counts as unset; a value that
cannot be used is never silently replaced (the warning names the variable, what was set and what
is in effect); the value of a sensitive setting is never copied into a refusal or a warning.

The package, one module per part:

* ``base.py`` — :class:`Declaration` (one setting) and :class:`Derived` (a default computed from
  earlier settings);
* ``reader.py`` — :class:`Reader`: the environment read by declared name, and its warnings;
* ``scalars.py``, ``lists.py``, ``urls.py`` — the kinds of setting and how each is read, refused or
  warned about;
* ``factories.py`` — the factories a declaration is written with, ``settings_class`` and
  ``declarations``.
"""

from __future__ import annotations

from queue_manager.config.declare.base import Declaration, Derived
from queue_manager.config.declare.factories import (
    choice,
    declarations,
    flag,
    host_names,
    http_url,
    identifier,
    integer,
    networks,
    optional_integer,
    optional_text,
    path,
    process_count,
    secret_list,
    settings_class,
    smtp_server,
    text,
)
from queue_manager.config.declare.lists import IPNetwork
from queue_manager.config.declare.reader import HIDDEN, Reader

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
