"""The web dashboard: a server-rendered console under ``/dashboard`` on the management API's
listener (``front`` mounts it), calling the API's own operations in-process with the signed-in
API key's caller (``edgeway.api.inprocess``), never the store.

    front      the listener's app: /dashboard to the dashboard, a browser's / redirected
    app        the dashboard's ASGI app: restrictions, session, CSRF, dispatch, error pages
    web        what a page handler sees (``Ctx``) and answers with; templates; headers
    sessions   sign-in, sign-out and the sessions page (rows in ``store.dashboard``)
    limiter    sign-in attempts per client address
    forms      form members to an operation's JSON body, by the catalog's fields
    overview   live agent sessions and their tunnels, counts; stop and restart
    resources  every listed kind: list, filter, page, create, delete
    detail     one resource: its members, the edit form, the DNS check
    modules    an edge's or a route's modules, each as a form of its own
    site       the site-to-site flow as one guided page (agentfile: the config it hands out)
    nav        which kinds the navigation lists, in groups
"""

from edgeway.dashboard.front import mount

__all__ = ["mount"]
