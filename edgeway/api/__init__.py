"""The management API: an ASGI app built from the catalog (see ``app.build``)."""
