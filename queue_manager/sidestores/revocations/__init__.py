"""Revoked edge passes per room: in this process, or in Valkey for the fleet."""
