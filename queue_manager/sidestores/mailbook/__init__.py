"""The turn-e-mail address book: in this process, or in Valkey for the fleet (never PostgreSQL)."""
