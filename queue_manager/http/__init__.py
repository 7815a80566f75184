"""The HTTP layer: thin. Parses, calls the store, renders. Raw ASGI on the hot paths."""
