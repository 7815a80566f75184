"""HTTP on raw ASGI, below the routes: requests and responses, cookies, negotiation, files, direct frames."""
