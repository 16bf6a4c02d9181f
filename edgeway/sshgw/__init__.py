"""The SSH gateway: a stock OpenSSH client exposes a service with ``ssh -R`` and a command
(``http``, ``https``, ``tcp``, ``tls``). Each remote forward is a tunnel in the same registry,
through the same binder, as an agent's (a virtual agent): edges, routes, tunnel groups,
modules on binds, sessions and tunnels in the API and IP restrictions treat it alike.

``server`` listens and follows the platform's changes, ``session`` is one client (its
authentication, the command, its end), ``forwards`` its remote forwards and their tunnels,
``channels`` carries public connections back to the client,
``terminal`` is what the user sees, ``command`` reads the command, ``keys`` says who the
client and the gateway are."""
