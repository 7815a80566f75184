"""Rooms kept as code: ``qm export`` writes every room of a running server as one document, ``qm apply``
makes a server's rooms what such a document says (a plan first, then each change through the admin API).

document.py: the document (the room's writable settings, its shape, YAML or JSON, a stable order);
plan.py: what applying it would change, checked with the server's own room model before anything is
sent; admin.py: the admin API calls; command.py: the two command lines and their exit codes.
"""
