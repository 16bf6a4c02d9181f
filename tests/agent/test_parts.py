"""The agent's parts without sockets: --resolve, the one-liners' flags, the tunnel options and
the Bind they make, the Host header rewrite on scripted bytes, replay edits, the metrics'
rates and percentiles, the config file commands, and the hints for session failures."""

from __future__ import annotations

import argparse
import base64
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from edgeway.agent import cli, configcmd
from edgeway.agent.bindmsg import bind_message
from edgeway.agent.captures import Store
from edgeway.agent.config import ConfigError, load, load_merged, to_yaml
from edgeway.agent.dial import hint
from edgeway.agent.inspect import Tap
from edgeway.agent.metrics import Meter, TunnelMetrics
from edgeway.agent.requestsapi import ApiError, dechunk, edited
from edgeway.agent.tunnelconfig import parse_tunnel


def parse(*argv: str) -> argparse.Namespace:
    top = argparse.ArgumentParser()
    sub = top.add_subparsers(dest="command", required=True)
    cli.add_parsers(sub)
    return top.parse_args(argv)


def test_resolve_takes_host_address_and_curls_form_only() -> None:
    assert cli.parse_resolve(["t.example.com:127.0.0.1", "Other.example:4443:[::1]",
                              "x.example:db.internal"]) == {
        "t.example.com": "127.0.0.1", "other.example:4443": "::1", "x.example": "db.internal"}
    for bad in ("127.0.0.1", "host:", ":127.0.0.1", "h:99999:127.0.0.1", "h:80:not an address",
                "h:80:1.2.3.4:5", "a b:127.0.0.1"):
        with pytest.raises(ValueError, match="HOST:ADDRESS or HOST:PORT:ADDRESS"):
            cli.parse_resolve([bad])


def oneliner(tmp_path: Path, *argv: str) -> Any:
    from edgeway.agent import oneliner as flags

    args = parse(*argv)
    name = flags.tunnel_name(args)
    cfg, _ = load_merged([], {**flags.session_doc(args),
                              "tunnels": {name: flags.tunnel_doc(args)}})
    return cfg, cfg.tunnels[name]


def test_one_liner_flags_become_a_checked_tunnel(tmp_path: Path) -> None:
    cfg, t = oneliner(tmp_path, "http", "localhost:3000", "--url", "http://app.example.com",
                      "--basic-auth", "alice:a-long-password", "--cidr-allow", "10.0.0.0/8",
                      "--request-header-add", "X-Via: edgeway", "--response-header-remove",
                      "Server", "--compression", "--host-header", "rewrite",
                      "--circuit-breaker", "0.5", "--oauth", "google", "--oauth-allow-email",
                      "a@example.com", "--authtoken", "tok", "--server-addr", "h.example:4443")
    assert (cfg.authtoken, cfg.server_addr, t.name) == ("tok", "h.example:4443",
                                                         "http-localhost_3000")
    assert (t.domain, t.schemes, t.addr.url()) == ("app.example.com", ("http",),
                                                   "http://localhost:3000")
    assert t.rewritten_host() == "localhost:3000" and t.guarded()
    _, msg = bind_message(t, "")
    opts = msg["Opts"]
    assert (msg["Proto"], opts["Domain"]) == ("http", "app.example.com")
    assert opts["BasicAuth"] == {"Credentials": [{"Username": "alice",
                                                  "CleartextPassword": "a-long-password"}]}
    assert opts["IPRestriction"] == {"allow_cidrs": ["10.0.0.0/8"], "deny_cidrs": []}
    assert opts["RequestHeaders"]["add"] == ["X-Via:edgeway"]
    assert opts["ResponseHeaders"]["remove"] == ["Server"]
    assert opts["Compression"] == {} and opts["CircuitBreaker"] == {"error_threshold": 0.5}
    assert opts["OAuth"]["provider"] == "google" and \
        opts["OAuth"]["allow_emails"] == ["a@example.com"]
    assert "HostHeaderRewrite" not in opts  # the agent sets the Host itself
    _, tcp = oneliner(tmp_path, "tcp", "22", "--url", "tcp://127.0.0.1:20001",
                      "--cidr-allow", "0.0.0.0/0", "--cidr-deny", "192.0.2.0/24")
    assert tcp.remote_addr == "127.0.0.1:20001" and \
        bind_message(tcp, "")[1]["Opts"]["IPRestriction"] == {"allow_cidrs": ["0.0.0.0/0"],
                                                              "deny_cidrs": ["192.0.2.0/24"]}
    _, tls = oneliner(tmp_path, "tls", "8443", "--url", "tls://secure.example.com")
    assert tls.proto == "tls" and tls.domain == "secure.example.com"
    _, labeled = oneliner(tmp_path, "http", "3000", "--label", "edge=web")
    assert labeled.labels == {"edge": "web"} and bind_message(labeled, "")[1]["Labels"] == \
        {"edge": "web"}


@pytest.mark.parametrize(("argv", "words"), [
    (["http", "3000", "--basic-auth", "alice:short"], "at least 8 characters"),
    (["http", "3000", "--cidr-allow", "10.0.0.300/8"], "ip_restriction: allow_cidrs: entry 1"),
    (["tcp", "22", "--cidr-deny", "192.0.2.0/24"],
     "ip_restriction: deny CIDRs without any allow CIDR would refuse every address"),
    (["http", "3000", "--circuit-breaker", "2"], "circuit_breaker: must be the error threshold"),
    (["http", "3000", "--verify-webhook", "nope"], "not a provider the edge verifies"),
    (["http", "3000", "--verify-webhook", "github"], "secret: required for github"),
    (["http", "3000", "--oidc", "ftp://x"], "issuer_url"),
    (["http", "3000", "--oidc", "https://id.example.com"], "client_id"),
    (["http", "3000", "--request-header-add", "bad header"], "request_header: add:"),
    (["http", "3000", "--ua-filter-deny", "("], "not a regular expression"),
    (["http", "3000", "--host-header", "bad host"], "host_header"),
    (["http", "3000", "--label", "a=b", "--basic-auth", "u:aaaaaaaa"], "labeled tunnels"),
    (["tcp", "22", "--url", "tcp://h"], "tcp://HOST:PORT"),
    (["http", "3000", "--url", "https://x.example.com:8443"], "without port or path"),
])
def test_one_liner_errors_name_the_option(tmp_path: Path, argv: list[str], words: str) -> None:
    with pytest.raises((ConfigError, ValueError)) as info:
        oneliner(tmp_path, *argv)
    assert words in str(info.value)


def test_tunnel_options_in_a_config_file(tmp_path: Path) -> None:
    path = tmp_path / "a.yml"
    path.write_text("version: 2\ntunnels:\n  w:\n    proto: http\n    addr: 80\n"
                    "    verify_webhook: {provider: GitHub, secret: s3cret}\n"
                    "    oidc: {issuer_url: 'https://id.example.com', client_id: c,"
                    " client_secret: hidden, allow_domains: ['@example.com']}\n"
                    "    user_agent_filter: {deny: ['curl/.*']}\n"
                    "    websocket_tcp_converter: true\n    compression: false\n"
                    "  t: {proto: tcp, addr: 22, ip_restriction: {allow_cidrs: [10.0.0.0/8]}}\n")
    cfg = load([str(path)])
    mw = cfg.tunnels["w"].middleware
    assert mw["WebhookVerification"]["provider"] == "github"
    assert mw["OIDC"]["allow_domains"] == ["example.com"] and "Compression" not in mw
    assert mw["UserAgentFilter"] == {"allow": [], "deny": ["curl/.*"]}
    assert mw["WebsocketTCPConverter"] == {}
    shown = to_yaml(load_merged([str(path)])[1])
    assert "s3cret" not in shown and "hidden" not in shown
    path.write_text("version: 2\ntunnels:\n  t: {proto: tls, addr: 1, compression: true}\n")
    with pytest.raises(ConfigError, match="compression: does not apply to tls tunnels"):
        load([str(path)])
    with pytest.raises(ConfigError, match="oauth: provider"):
        parse_tunnel("x", {"proto": "http", "addr": 1, "oauth": {"provider": "Bad Name"}}, "body")


HEAD = b"GET /a HTTP/1.1\r\nhost: public.example\r\nX-A: 1\r\nHOST: again\r\n\r\n"
POST = b"POST /b HTTP/1.1\r\nHost: public.example\r\nContent-Length: 5\r\n\r\nhello"
WS = b"GET /ws HTTP/1.1\r\nHost: public.example\r\nConnection: Upgrade\r\nUpgrade: ws\r\n\r\n"


def test_the_agent_sets_the_host_header_on_every_request() -> None:
    tap = Tap(Store(0), "web", "", host="localhost:3000")
    forwarded = b""
    for piece in (HEAD[:10], HEAD[10:] + POST[:30], POST[30:]):  # pipelined, cut anywhere
        tap.request(piece)
        forwarded += tap.take()
    assert forwarded == (b"GET /a HTTP/1.1\r\nHost: localhost:3000\r\nX-A: 1\r\n\r\n"
                         b"POST /b HTTP/1.1\r\nHost: localhost:3000\r\nContent-Length: 5\r\n"
                         b"\r\nhello")
    # an upgrade: held until answered, then the bytes pass as they are
    tap = Tap(None, "web", "", host="h")
    tap.request(WS + b"\x81\x01x")
    assert tap.take().startswith(b"GET /ws HTTP/1.1\r\nHost: h\r\n")
    tap.response(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: ws\r\n\r\n")
    assert tap.take() == b"\x81\x01x"
    tap.request(b"\x81\x01y")
    assert tap.take() == b"\x81\x01y" and not tap.failed
    broken = Tap(None, "web", "", host="h")  # bytes it cannot follow are never passed on
    broken.request(b"NOT HTTP\x00\r\n\r\n")
    assert broken.failed and broken.take() == b""


def capture(raw: bytes) -> Any:
    tap = Tap(Store(0), "web", "")
    tap.request(raw)
    assert tap.store is not None
    return tap.store.newest(1)[0]


def test_replay_edits_rebuild_the_request() -> None:
    ex = capture(b"POST /a?x=1 HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n"
                 b"X-Keep: 1\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
    assert dechunk(b"3\r\nabc\r\n0\r\n\r\n") == b"abc"
    assert edited(ex, {}) == bytes(ex.request.raw)  # unchanged: as captured
    assert edited(ex, {"uri": "/b"}) == (b"POST /b HTTP/1.1\r\nHost: h\r\nX-Keep: 1\r\n"
                                         b"Content-Length: 5\r\n\r\nabcde")
    out = edited(ex, {"method": "PUT", "headers": {"Host": "h", "X-New": ["1", "2"]},
                      "body_base64": base64.b64encode(b"\x00\x01").decode()})
    assert out == (b"PUT /a?x=1 HTTP/1.1\r\nHost: h\r\nX-New: 1\r\nX-New: 2\r\n"
                   b"Content-Length: 2\r\n\r\n\x00\x01")
    for doc, member in (({"method": "G ET"}, "method"), ({"uri": "no-slash"}, "uri"),
                        ({"uri": "/a b"}, "uri"), ({"headers": {"X": "a\r\nb"}}, "headers.X"),
                        ({"headers": {"Bad Name": "1"}}, "headers.Bad Name"),
                        ({"body": 3}, "body"), ({"body_base64": "!!"}, "body_base64")):
        with pytest.raises(ApiError) as info:
            edited(ex, doc)
        assert info.value.status == 400 and info.value.err.startswith(member), info.value.err


def test_rates_and_percentiles() -> None:
    now = [100.0]
    meter = Meter(lambda: now[0])
    for _ in range(60):
        meter.mark()
    assert meter.json()["rate1"] == 0  # no tick yet
    now[0] += 1
    assert meter.json() == {"rate1": 60.0, "rate5": 60.0, "rate15": 60.0}  # the first tick
    now[0] += 60  # a quiet minute: rate1 falls to 1/e of it, rate15 far less
    rates = meter.json()
    assert 21 < rates["rate1"] < 23 and rates["rate5"] > rates["rate1"]
    m = TunnelMetrics(http=False, clock=lambda: now[0])
    for ms in range(1, 101):
        m.opened()
        m.closed(ms * 1_000_000)
    out = m.json()
    assert "http" not in out and out["conns"]["count"] == 100 and out["conns"]["gauge"] == 0
    assert out["conns"]["p50"] == pytest.approx(50.5e6) and \
        out["conns"]["p99"] == pytest.approx(99.99e6)
    assert TunnelMetrics(http=True).json()["http"]["count"] == 0


def test_config_commands_write_the_default_file(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "config" / "edgeway" / "agent.yml"
    configcmd.main(parse("config", "add-authtoken", "tok_123"))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    text = path.read_text()
    assert text.startswith(configcmd.STARTER) and text.endswith("authtoken: tok_123\n")
    configcmd.main(parse("config", "add-server-addr", "tunnel.example.com:4443"))
    configcmd.main(parse("config", "add-authtoken", "tok_456"))  # replaced in place
    text = path.read_text()
    assert "# Tunnels, started with" in text and "tok_123" not in text
    assert load([str(path)]).authtoken == "tok_456"
    configcmd.main(parse("config", "check"))
    assert "authtoken: …\n" in capsys.readouterr().out  # masked
    with pytest.raises(SystemExit) as info:
        configcmd.main(parse("config", "add-server-addr", "not a host"))
    assert info.value.code == 2 and "server_addr:" in capsys.readouterr().err
    bare = tmp_path / "bare.yml"
    configcmd.main(parse("config", "add-authtoken", "tok", "--config", str(bare)))
    with pytest.raises(SystemExit):  # check runs start's checks: no server_addr
        configcmd.main(parse("agent", "config", "check", "--config", str(bare)))
    assert "needs server_addr to start" in capsys.readouterr().err
    os.environ["EDITOR"] = "true"
    configcmd.main(parse("config", "edit", "--config", str(tmp_path / "new.yml")))
    assert (tmp_path / "new.yml").read_text() == configcmd.STARTER


def test_hints_say_what_to_do() -> None:
    cfg, _ = load_merged([], {"root_cas": "host"})
    assert "edgeway ca export" in hint("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify "
                                       "failed: self-signed certificate", cfg)
    assert "POST /credentials" in hint("the authtoken is not valid", cfg)
    assert "edgeway serve" in hint("[Errno 111] Connection refused", cfg)
    assert hint("something else", cfg) == ""
