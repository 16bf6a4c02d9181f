"""How an SSH gateway session ends besides the client leaving: the user types Ctrl-C on a
terminal session, the SSH credential is deleted or its ACL narrowed, an IP restriction of
type ``agent`` refuses the client's address (at connection, and for a live session); and a
forward added or cancelled later (``ssh -O forward|cancel`` through the client's control
socket) is bound or unbound on its own."""

from __future__ import annotations

import subprocess

import httpx

from tests.edge.test_ip_restrictions import restriction
from tests.server import Server
from tests.sshgw.client import SshUser, made, poll, unique

OTHER = "127.0.0.2"  # a client address the restriction below does not allow


def _urls(api: httpx.Client) -> list[str]:
    return [t["public_url"] for t in api.get("/tunnels").json()["tunnels"]]


def test_ctrl_c_on_a_terminal_ends_the_session(server: Server, user: SshUser,
                                               service: int) -> None:
    with server.client() as api:
        user.credential(api)
        ssh = user.start(f"0:localhost:{service}", command=["http"], options=("-tt",),
                         stdin=subprocess.PIPE)
        [url] = ssh.urls()
        assert "Forwarding " + url + "\r\n" in ssh.stdout()  # a terminal: CR LF lines
        assert ssh.proc.stdin is not None
        ssh.proc.stdin.write(b"\x03")
        ssh.proc.stdin.flush()
        ssh.exited()
        poll(lambda: url not in _urls(api), "the tunnel to go")


def test_credential_deleted_or_narrowed(server: Server, user: SshUser, service: int) -> None:
    name, other = unique("narrow") + ".example.com", unique("gone") + ".example.com"
    with server.client() as api:
        made(api, "/reserved_domains", {"domain": name})
        made(api, "/reserved_domains", {"domain": other})
        cred = user.credential(api)
        double = user.start(f"0:localhost:{service}", f"0:127.0.0.1:{service}",
                            command=["http", f"--domain={name}"])
        assert double.exited() == 1  # one name, one tunnel: the second forward is refused
        assert f"the domain '{name}' is already bound by another tunnel" in double.stderr()
        wide = user.start(f"0:localhost:{service}", command=["http"])
        [generated] = wide.urls()
        narrowed = user.start(f"0:localhost:{service}", command=["http", f"--domain={name}"])
        [named] = narrowed.urls()
        assert api.patch(f"/ssh_credentials/{cred['id']}",
                         json={"acl": [f"bind:{name}", f"bind:{other}"]}
                         ).status_code == 200
        wide.wait_for("The server stopped .*the credential's ACL no longer allows this "
                      "tunnel", stream="stderr")
        poll(lambda: generated not in _urls(api), "the tunnel the ACL no longer allows")
        assert named in _urls(api)
        also = user.start(f"0:localhost:{service}", command=["http", f"--domain={other}"])
        also.urls()
        [domain] = [d for d in api.get("/reserved_domains").json()["reserved_domains"]
                    if d["domain"] == other]
        assert api.delete(f"/reserved_domains/{domain['id']}").status_code == 204
        also.wait_for(f"The server stopped .*{other}.*deleted", stream="stderr")
        poll(lambda: not [u for u in _urls(api) if other in u], "the unreserved name to go")
        assert api.delete(f"/ssh_credentials/{cred['id']}").status_code == 204
        assert narrowed.exited() != 0
        assert f"the SSH credential {cred['id']} was deleted" in narrowed.stderr()
        poll(lambda: named not in _urls(api), "the deleted credential's tunnel to go")


def test_agent_ip_restrictions_apply_to_ssh_clients(server: Server, user: SshUser,
                                                    service: int) -> None:
    with server.client() as api:
        user.credential(api)
        with restriction(api, "agent", "127.0.0.1/32", enforced=False) as rid:
            live = user.start(f"0:localhost:{service}", command=["http"],
                              options=("-b", OTHER))
            [url] = live.urls()
            assert api.patch(f"/ip_restrictions/{rid}", json={"enforced": True}
                             ).status_code == 200
            assert live.exited() != 0  # the live session from that address ends
            assert f"the address {OTHER} may not start agent sessions" in live.stderr()
            poll(lambda: url not in _urls(api), "its tunnel to go")
            refused = user.start(f"0:localhost:{service}", command=["http"],
                                 options=("-b", OTHER))
            assert refused.exited() == 255
            assert f"IP restriction '{rid}' refuses it" in refused.stderr()
            allowed = user.start(f"0:localhost:{service}", command=["http"])
            assert allowed.urls()  # 127.0.0.1 is allowed


def test_forwards_added_and_cancelled_later(server: Server, user: SshUser,
                                            service: int) -> None:
    control = ("-o", "ControlMaster=yes", "-o", f"ControlPath={user.dir}/control")
    with server.client() as api:
        user.credential(api)
        master = user.start(f"0:localhost:{service}", command=["http"], options=control)
        [first] = master.urls()

        def mux(op: str) -> subprocess.CompletedProcess[str]:
            args = user.args((f"0:127.0.0.1:{service}",), None, "-O", op,
                             "-o", f"ControlPath={user.dir}/control")
            return subprocess.run(args, capture_output=True, text=True, timeout=30)

        assert mux("forward").returncode == 0
        [_, second] = master.urls(2)
        assert second != first and second in _urls(api)
        assert mux("cancel").returncode == 0
        master.wait_for(f"Stopped forwarding {second}")
        poll(lambda: second not in _urls(api), "the cancelled forward's tunnel to go")
        assert first in _urls(api)
