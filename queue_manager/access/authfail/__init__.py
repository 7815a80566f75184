"""ADMIN_AUTH_FAIL_PER_MIN: wrong credentials counted per address, in this process or for the fleet in Valkey."""
