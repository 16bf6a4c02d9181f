"""The SSH gateway's interactive session as a person has it: ``ssh -t -R ... v2@host http``
typed on a terminal (a pseudo-terminal of its own; ssh asks the gateway for one), its screen
read: the forwarding line, each request as it is served, and Ctrl+C typed on the keyboard
ending the session and its tunnel (ssh exits 0), with no traceback or error on the
screen."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from tests.agent.terminal import Pty
from tests.server import Server, trust
from tests.sshgw.client import SshUser, poll


def test_the_interactive_session_on_a_terminal(server: Server, user: SshUser, service: int,
                                               tmp_path: Path) -> None:
    with server.client() as api:
        cred = user.credential(api)
    argv = user.args((f"0:localhost:{service}",), ["http"], "-t")
    term = Pty(tmp_path, *argv[1:], program=(argv[0],))
    try:
        term.wait_for("Forwarding http://")
        found = re.search(r"Forwarding (http://\S+)", term.text)
        assert found, term.text
        url = found.group(1)
        host = url.split("://", 1)[1]
        r = httpx.get(f"http://127.0.0.1:{server.http_port}/from-a-person",
                      headers={"Host": host}, timeout=20, verify=trust())
        assert (r.status_code, r.text) == (200, "svc /from-a-person")
        term.wait_for("/from-a-person")  # the request line, on the person's screen
        term.type(b"\x03")  # Ctrl+C, as the keyboard sends it (ssh passes it on)
        code = term.finish()
    finally:
        term.close()
    screen = term.text
    assert "Traceback" not in screen and "Error" not in screen, screen
    # ended by the person, as a command they stopped: not "Received disconnect" (255), even
    # with the edge's kept-alive channel of the request above still open
    assert code == 0 and "disconnect" not in screen.lower(), (code, screen)
    with server.client() as api:
        poll(lambda: not [s for s in api.get("/tunnel_sessions").json()["tunnel_sessions"]
                          if s.get("credential", {}).get("id") == cred["id"]],
             "the session to end")
    r = httpx.get(f"http://127.0.0.1:{server.http_port}/", headers={"Host": host}, timeout=20,
                  verify=trust())
    assert r.status_code == 404
