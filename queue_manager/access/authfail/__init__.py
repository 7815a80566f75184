"""ADMIN_AUTH_FAIL_PER_MIN: wrong credentials counted per address, in this process or for the fleet in Valkey.

* ``base.py`` — the budget the sign-in paths spend (``AuthBudget``);
* ``memory.py`` — this process's count (STORE=memory): ``AuthFailures``;
* ``valkey.py`` — the fleet's count in Valkey (STORE=valkey): ``SharedAuthFailures``.
"""
