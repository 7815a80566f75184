"""The HTTP API described: each route's parameters, body, answers and sign-in, beside the router's table.

``model`` is the shape of one description, ``components`` the shared schemas and security schemes,
``visitor_ops`` and ``admin_ops`` the descriptions themselves, ``document`` the OpenAPI 3.1 document
generated from :data:`queue_manager.routes.table.TABLE` and them, and ``reference`` the HTML page
``/docs/api`` renders from that document.
"""
