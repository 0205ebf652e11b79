"""The tenants' front (``--tenants FILE``): one listener in front of one confined worker
process per tenant.

``proxy`` authenticates each request and forwards it to its tenant's worker;
``supervisor`` starts, watches, restarts and reloads the workers; ``config`` reads and
checks the tenants file; ``tether`` keeps a worker from outliving the front; ``metrics``
is the front's ``/metrics`` (its own, and its workers' by tenant).  Above the transports
(the proxy screens requests as the HTTP transport does), below the CLI.
"""
