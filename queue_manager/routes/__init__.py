"""The queue's routes: the one table, the router, the app that screens and dispatches, and the handlers by area."""
