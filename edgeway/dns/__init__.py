"""The built-in authoritative DNS server (zones.py: answers, sans-I/O; records.py: the
zones' contents from the store; server.py: UDP and TCP listeners) and the DNS checks of
reserved domains and agent ingresses (check.py)."""
