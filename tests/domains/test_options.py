"""The domain options refuse what they cannot honour, naming the option, before anything
starts (the checks ``edgeway serve`` runs, in-process; one case through the real command)."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgeway.cli import parser
from edgeway.serve_cli import server_config
from tests.test_cli import edgeway


@pytest.mark.parametrize(("args", "words"), [
    (["--dns-addr", "127.0.0.1:5353"], "--dns-addr needs --public-ip"),
    (["--public-ip", "10.0.0.300"], "--public-ip: '10.0.0.300' is not an IPv4 or IPv6"),
    (["--dns-check-resolver", "dns.example.com"], "--dns-check-resolver: 'dns.example.com'"),
    (["--acme-directory", "ftp://ca.example.com/dir"], "must be an https:// URL or 'off'"),
    (["--acme-ca-bundle", "/nonexistent/ca.pem"], "--acme-ca-bundle /nonexistent/ca.pem"),
    (["--acme-renew-before", "0"], "--acme-renew-before '0' must be a positive duration"),
    (["--acme-renew-before", "soon"], "--acme-renew-before 'soon'"),
    (["--dns-addr", "localhost"], "must be HOST:PORT"),
])
def test_bad_domain_options_fail_clearly(tmp_path: Path, args: list[str], words: str) -> None:
    with pytest.raises(ValueError) as err:
        server_config(parser().parse_args(["serve", "--data-dir", str(tmp_path), *args]))
    assert words in str(err.value)


def test_the_values_taken(tmp_path: Path) -> None:
    cfg = server_config(parser().parse_args([
        "serve", "--data-dir", str(tmp_path), "--dns-addr", "0.0.0.0:53", "--public-ip",
        "203.0.113.7,2001:db8::7", "--public-ip", "203.0.113.8", "--dns-check-resolver",
        "9.9.9.9,[2620:fe::fe]:5353", "--acme-directory", "off", "--acme-renew-before", "12h"]))
    assert cfg.domains.dns_addr == ("0.0.0.0", 53) and cfg.domains.acme_directory == ""
    assert cfg.settings.public_ips == ("203.0.113.7", "2001:db8::7", "203.0.113.8")
    assert cfg.settings.dns_check_resolvers == (("9.9.9.9", 53), ("2620:fe::fe", 5353))
    assert cfg.domains.acme_renew_before == 12 * 3600 and cfg.settings.acme is False


def test_the_command_refuses_before_starting(tmp_path: Path) -> None:
    r = edgeway("serve", "--data-dir", str(tmp_path), "--dns-addr", "127.0.0.1:5353")
    assert r.returncode == 2 and "--dns-addr needs --public-ip" in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "edgeway.db").exists()
