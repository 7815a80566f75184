"""The names of the cookies and the query parameter Queue Manager sets and reads, in one place.

Per room (``<room>`` is the room id, which is why room ids are limited to letters, digits, ``-``, ``_``):

* ``qm_<room>``: the visitor's signed token, their place in line or their pass.
* ``qms_<room>``: a random value of the visitor's own; its hash is part of who they are.
* ``qm_dk_<room>``: the door key an admitted browser keeps and shows at its next door check.
* ``qmp_<room>``: the visitor's edge pass (``PASS_SIGNING=ed25519``), which a connector checks itself;
  not ``qm_<room>``, so it is never read as a token.
* ``qmr_<room>``: on an inline host, the page a visitor came from, read only by the join under the
  queue's prefix (it is not ``qm_<room>``, so it is never read as a token).

For the whole site:

* ``qm_console``: the operator console's signed-in session, scoped to the admin API: ``Path=/api/admin``,
  or ``Path=/__qm/api/admin`` when the console is served under an inline host's queue prefix
  (:func:`console_path`). It is set, cleared and cleared again on a refused session with the path the
  request came in on, so the browser sends it to exactly the admin API the console calls.
* ``qm_lang``: the language a visitor picked on the waiting page.
* ``qm_token`` (a query parameter, not a cookie): the token the waiting page hands to the site.
* ``qm_pass`` (a query parameter of ``/api/check``): an edge pass, when the caller sends it that way.
"""

from __future__ import annotations

CONSOLE = "qm_console"
CONSOLE_PATH = "/api/admin"
LANGUAGE = "qm_lang"
TOKEN_PARAM = "qm_token"
PASS_PARAM = "qm_pass"

# per room: the prefix followed by the room id (a concatenation at the call site, no call on the hot path)
TICKET = "qm_"
SESSION = "qms_"
DOOR_KEY = "qm_dk_"
RETURN_TO = "qmr_"
EDGE_PASS = "qmp_"


def console_path(prefix: str) -> str:
    """The ``Path`` of ``qm_console`` for a request that came in under ``prefix`` ("" or "/__qm")."""
    return prefix + CONSOLE_PATH
