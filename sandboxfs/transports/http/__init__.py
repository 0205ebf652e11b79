"""Streamable HTTP (and the same over a unix socket): ``server`` runs Hypercorn on trio
with the bearer token, probes and shutdown; ``endpoint`` is the ASGI app that feeds each
request to a session; ``screening`` judges a request's Host, Origin and size before its
body is read (the tenants' proxy screens with it too); ``connections`` gives every
connection a send deadline; ``credentials`` decides what counts as a token;
``metrics`` is ``/metrics``.
"""
