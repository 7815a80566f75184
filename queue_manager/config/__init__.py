"""Every environment variable the server reads, read and validated in one place.

``load_settings()`` turns the process environment (or any mapping handed to it) into a
frozen :class:`Settings`. Nothing else in the package reads ``os.environ``.

Two outcomes besides success:

* :class:`ConfigRefusal` — the server must not start. Raised for the few settings where
  starting would be worse than stopping (see "Refusals: when the server will not start" in
  the Operations Guide). The message names the setting and the way out.
* :class:`ConfigWarning` — the server starts, and the warning is reported on
  ``/api/admin/health``. A value that could not be applied as written is never silently
  substituted: the warning names the variable, what was set and what is in effect.

Secrets (ADMIN_KEY, SECRET, SECRET_PREVIOUS, EDGE_SECRET, PUBLIC_API_KEY) and URLs that can
carry credentials (VALKEY_URL, DATABASE_URL, ALERT_WEBHOOK_URL) are never copied into a
refusal, a warning or a hardening line.

An empty string counts as unset for every variable. Apart from the DOCS_DIR and PG_CA_FILE
checks, the random default QM_INSTANCE_ID and WORKERS=auto (the cores this process may use),
``load_settings`` is a pure function of its mapping.

The package:

* ``settings.py`` — :class:`Settings`: every setting declared once (variable, type, default,
  bounds or choices, a one-line description); :data:`ENV_VARS` and :data:`DECLARATIONS` come from it.
* ``declare/`` — the kinds of setting, how each is read, refused or warned about, and the
  factories a declaration is written with.
* ``rules.py`` — checks across settings (store against URLs, keys against defaults, ...) and
  the hardening list.
* ``load.py`` — :func:`load_settings`.
* ``outcomes.py`` — :class:`ConfigRefusal` and :class:`ConfigWarning`.
* ``effective.py`` — :func:`effective_settings`: every setting's value in effect and its source,
  secrets masked (what ``qm config`` prints and ``/api/admin/health`` lists under ``settings``).

The human-readable table of all of this is docs/configuration.md; a unit test keeps the two
in step with the declarations.
"""

from __future__ import annotations

from queue_manager.config.declare import Declaration, IPNetwork
from queue_manager.config.effective import EffectiveSetting, effective_settings
from queue_manager.config.load import load_settings, read_settings
from queue_manager.config.outcomes import ConfigRefusal, ConfigWarning
from queue_manager.config.rules import (
    HARDENING_ADMIN_KEY,
    HARDENING_EDGE_SECRET,
    HARDENING_PUBLIC_API_KEY,
    HARDENING_PUBLIC_API_KEY_DEFAULT,
    HARDENING_SECRET_DEFAULT,
    HARDENING_SECRET_SHORT,
)
from queue_manager.config.settings import (
    DECLARATIONS,
    DEFAULT_ADMIN_KEY,
    DEFAULT_PUBLIC_API_KEY,
    DEFAULT_SECRET,
    DEFAULT_SHUTDOWN_DRAIN_MS,
    ENV_VARS,
    INLINE_SHUTDOWN_DRAIN_FLOOR_MS,
    MAX_WORKERS,
    MIN_EDGE_SECRET_LEN,
    MIN_SECRET_LEN,
    ProtectionMode,
    Settings,
    SidestoreName,
    StoreName,
)

__all__ = [
    "DECLARATIONS",
    "DEFAULT_ADMIN_KEY",
    "DEFAULT_PUBLIC_API_KEY",
    "DEFAULT_SECRET",
    "DEFAULT_SHUTDOWN_DRAIN_MS",
    "ENV_VARS",
    "HARDENING_ADMIN_KEY",
    "HARDENING_EDGE_SECRET",
    "HARDENING_PUBLIC_API_KEY",
    "HARDENING_PUBLIC_API_KEY_DEFAULT",
    "HARDENING_SECRET_DEFAULT",
    "HARDENING_SECRET_SHORT",
    "INLINE_SHUTDOWN_DRAIN_FLOOR_MS",
    "MAX_WORKERS",
    "MIN_EDGE_SECRET_LEN",
    "MIN_SECRET_LEN",
    "ConfigRefusal",
    "ConfigWarning",
    "Declaration",
    "EffectiveSetting",
    "IPNetwork",
    "ProtectionMode",
    "Settings",
    "SidestoreName",
    "StoreName",
    "effective_settings",
    "load_settings",
    "read_settings",
]
