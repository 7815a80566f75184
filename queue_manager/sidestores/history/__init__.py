"""The hourly history behind the reports: rows folded from samples, kept in this process or in PostgreSQL."""
