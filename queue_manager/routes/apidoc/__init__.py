"""The HTTP API described: each route's parameters, body, answers and sign-in, beside the router's table.

``model`` is the shape of one description, ``components`` the shared schemas and security schemes,
``visitor_ops`` and ``admin_ops`` the descriptions themselves, ``document`` the OpenAPI 3.1 document
generated from a table of routes handed in and them, ``serve`` one table's document as served, and
``reference`` the HTML page ``/docs/api`` renders from that document. None of them imports the table:
``routes/table.py`` hands its own over.
"""
