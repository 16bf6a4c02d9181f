"""Managed certificates through ACME: the client (client.py, blocking calls of the ``acme``
package, run in threads), job statuses and back-off (status.py), and the manager that keeps
one job per certificate management policy and runs the due ones (manager.py)."""
