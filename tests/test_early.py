"""``edgeway serve``'s listeners bound before its imports (``edgeway.early``): the server
adopts each one (the same socket), one bound for another address of its port is closed so the
server's own bind succeeds, and nothing is bound for --help, --reuse-port (a rolling restart)
or --workers."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from edgeway import early
from edgeway.config import listen_socket
from tests.server import free_port


@pytest.fixture(autouse=True)
def clean() -> Iterator[None]:
    yield
    early.release()


def test_the_server_adopts_what_was_bound_early() -> None:
    tunnel, http = free_port(), free_port()
    early.prebind(["serve", "--tunnel-addr", f"127.0.0.1:{tunnel}", f"--http-addr=:{http}",
                   "--https-addr", "off"], {})
    bound = dict(early._bound)
    assert set(bound) == {("127.0.0.1", tunnel), ("127.0.0.1", http)}
    sock = listen_socket("tunnel listener", "127.0.0.1", tunnel)
    assert sock is bound[("127.0.0.1", tunnel)]  # (the very socket: no gap)
    sock.close()
    other = listen_socket("public HTTP listener", "0.0.0.0", http)  # (another address)
    assert other.getsockname() == ("0.0.0.0", http) and not early._bound
    other.close()


def test_the_environment_names_the_addresses_too() -> None:
    port = free_port()
    early.prebind(["serve"], {"EDGEWAY_TUNNEL_ADDR": f"127.0.0.1:{port}",
                              "EDGEWAY_HTTP_ADDR": "off", "EDGEWAY_HTTPS_ADDR": "off"})
    assert set(early._bound) == {("127.0.0.1", port)}


@pytest.mark.parametrize("argv, env", [
    (["serve", "--help"], {}), (["serve", "--reuse-port"], {}),
    (["serve"], {"EDGEWAY_REUSE_PORT": "1"}), (["serve", "--workers", "2"], {}),
    (["serve"], {"EDGEWAY_WORKERS": "3"}), (["http", "3000"], {}), ([], {})])
def test_nothing_is_bound_early_then(argv: list[str], env: dict[str, str]) -> None:
    port = free_port()
    early.prebind([*argv, "--tunnel-addr", f"127.0.0.1:{port}", "--http-addr", "off",
                   "--https-addr", "off"], env)
    assert not early._bound


def test_the_server_imports_no_repl() -> None:
    """The CEL package's own REPL (prompt_toolkit) is not imported with the server: it cost
    every cold start a quarter of a second, before agents could come back."""
    code = ("import sys, edgeway.server\n"
            "from edgeway.celpkg import cel\n"
            "assert cel.evaluate('1 + 2', {}) == 3\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'prompt_toolkit'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert out.strip() == "[]"
