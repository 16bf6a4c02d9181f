"""The agent config loader: ngrok agent config v2 files, merged in order, strictly checked."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from edgeway.agent.config import (
    TOP_UNSUPPORTED,
    TUNNEL_UNSUPPORTED,
    Addr,
    AgentConfig,
    ConfigError,
    load,
    load_merged,
    merge,
    parse_tunnel,
    split_paths,
    to_yaml,
)
from edgeway.agent.settings import AgentSettings

CA_PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return str(path)


def error(paths: list[str]) -> str:
    with pytest.raises(ConfigError) as info:
        load(paths)
    return str(info.value)


def one(tmp_path: Path, text: str) -> AgentConfig:
    return load([write(tmp_path, "a.yml", "version: 2\n" + textwrap.dedent(text))])


def one_error(tmp_path: Path, text: str) -> tuple[str, str]:
    """The message for a single file, and the file's name (what the message must start with)."""
    path = write(tmp_path, "a.yml", "version: 2\n" + textwrap.dedent(text))
    return error([path]), path


def tunnel_error(tmp_path: Path, body: str) -> str:
    """The message for a tunnel `web` defined by `body`, with the `file: tunnels.web.` prefix
    checked and stripped."""
    indented = textwrap.indent(textwrap.dedent(body), "    ")
    message, path = one_error(tmp_path, f"tunnels:\n  web:\n{indented}")
    assert message.startswith(f"{path}: tunnels.web."), message
    return message.removeprefix(f"{path}: tunnels.web.")


# --config values and merging ----------------------------------------------------------------


def test_split_paths_takes_commas_and_repeats() -> None:
    assert split_paths(["a.yml,b.yml", "c.yml", ",,d.yml,", " e.yml , f.yml"]) == [
        "a.yml", "b.yml", "c.yml", "d.yml", "e.yml", "f.yml"]
    assert split_paths([]) == []
    assert split_paths([""]) == []


def test_merge_scalars_lists_and_maps() -> None:
    first: dict[str, Any] = {
        "version": 2, "authtoken": "one", "web_allow_hosts": ["a.example", "b.example"],
        "tunnels": {"web": {"proto": "http", "addr": 80, "basic_auth": ["u:12345678"]}}}
    second: dict[str, Any] = {
        "authtoken": "two", "web_allow_hosts": ["c.example"],
        "tunnels": {"web": {"addr": 81, "basic_auth": ["v:87654321"]},
                    "ssh": {"proto": "tcp", "addr": 22}}}
    merged, origins = merge([("a.yml", first), ("b.yml", second)])
    assert merged == {
        "version": 2, "authtoken": "two", "web_allow_hosts": ["c.example"],
        "tunnels": {"web": {"proto": "http", "addr": 81, "basic_auth": ["v:87654321"]},
                    "ssh": {"proto": "tcp", "addr": 22}}}
    assert origins["version"] == "a.yml"
    assert origins["authtoken"] == "b.yml"
    assert origins["tunnels.web.proto"] == "a.yml"
    assert origins["tunnels.web.addr"] == "b.yml"
    assert origins["tunnels.web.basic_auth"] == "b.yml"
    assert origins["tunnels.ssh"] == origins["tunnels.ssh.proto"] == "b.yml"
    assert first["tunnels"]["web"]["addr"] == 80  # the inputs are left alone
    merged["tunnels"]["ssh"]["addr"] = 2222
    assert second["tunnels"]["ssh"]["addr"] == 22


def test_merge_null_does_not_erase_and_replacing_a_map_forgets_its_keys() -> None:
    merged, origins = merge([
        ("a.yml", {"authtoken": "one", "tunnels": {"web": {"proto": "http"}}}),
        ("b.yml", {"authtoken": None, "tunnels": None})])
    assert merged == {"authtoken": "one", "tunnels": {"web": {"proto": "http"}}}
    assert origins["authtoken"] == "a.yml"
    merged, origins = merge([("a.yml", {"x": {"y": 1}}), ("b.yml", {"x": [1]})])
    assert merged == {"x": [1]}
    assert origins == {"x": "b.yml"}


def test_two_files_merge(tmp_path: Path) -> None:
    a = write(tmp_path, "a.yml", """\
        version: 2
        authtoken: token-one
        server_addr: tunnel.example.com
        tunnels:
          web:
            proto: http
            addr: 8080
            domain: web.example.com
            basic_auth: ["alice:password1", "bob:password2"]
          edge:
            labels: [edge=one, team=a]
            addr: 9000
        """)
    b = write(tmp_path, "b.yml", """\
        authtoken: token-two
        tunnels:
          web:
            addr: 8081
            basic_auth: ["carol:password3"]
          edge:
            labels: [edge=two]
          ssh:
            proto: tcp
            addr: 22
        """)
    cfg = load([a, b])
    assert cfg.authtoken == "token-two"
    assert cfg.server_addr == "tunnel.example.com:443"
    assert cfg.files == (a, b)
    assert list(cfg.tunnels) == ["web", "edge", "ssh"]
    web = cfg.tunnels["web"]
    assert (web.proto, web.domain, web.addr.port) == ("http", "web.example.com", 8081)
    assert web.basic_auth == (("carol", "password3"),)
    assert cfg.tunnels["edge"].labels == {"edge": "two"}
    assert cfg.tunnels["edge"].addr.port == 9000
    assert cfg.tunnels["ssh"].addr.url() == "tcp://127.0.0.1:22"


def test_comma_separated_and_repeated_config_values(tmp_path: Path) -> None:
    a = write(tmp_path, "a.yml", "version: 2\nauthtoken: aaaa\n")
    b = write(tmp_path, "b.yml", "authtoken: bbbb\nmetadata: from-b\n")
    c = write(tmp_path, "c.yml", "metadata: from-c\n")
    cfg = load(split_paths([f"{a},{b}", c]))
    assert cfg.files == (a, b, c)
    assert (cfg.authtoken, cfg.metadata) == ("bbbb", "from-c")
    cfg = load(split_paths([c, f"{b},{a}"]))
    assert (cfg.authtoken, cfg.metadata) == ("aaaa", "from-b")


def test_defaults(tmp_path: Path) -> None:
    cfg = one(tmp_path, "tunnels:\n  web: {proto: http, addr: 80}\n")
    assert cfg.version == 2
    assert (cfg.authtoken, cfg.server_addr, cfg.root_cas) == ("", "", "trusted")
    assert cfg.web_addr == "127.0.0.1:4040"
    assert (cfg.metadata, cfg.web_allow_hosts) == ("", ())
    assert (cfg.heartbeat_interval, cfg.heartbeat_tolerance) == (10.0, 15.0)
    assert cfg.inspect_db_size == 50 * 1024 * 1024
    web = cfg.tunnels["web"]
    assert web.addr == Addr("http", "127.0.0.1", 80)
    assert (web.inspect, web.schemes, web.domain, web.subdomain) == (True, ("https",), "", "")
    assert (web.basic_auth, web.labels, web.host_header, web.metadata) == ((), {}, "", "")
    assert one(tmp_path, "").tunnels == {}
    assert one(tmp_path, "tunnels:\n").tunnels == {}


# reading files ------------------------------------------------------------------------------


def test_missing_unreadable_and_empty_files(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.yml")
    assert error([missing]) == f"{missing}: no such file"
    assert error([str(tmp_path)]).startswith(f"{tmp_path}: cannot be read")
    empty = write(tmp_path, "empty.yml", "")
    assert error([empty]).startswith(f"{empty}: the top level must be a mapping")
    listed = write(tmp_path, "list.yml", "- version: 2\n")
    assert "(got a list)" in error([listed])
    binary = tmp_path / "bin.yml"
    binary.write_bytes(b"version: 2\nauthtoken: \xff\n")
    assert error([str(binary)]).startswith(f"{binary}: cannot be read: not UTF-8")
    with pytest.raises(ConfigError, match="no config file given"):
        load([])


@pytest.mark.parametrize(("text", "line"), [
    ("version: 2\ntunnels:\n  web: [1\n", 4),
    ("version: 2\nauthtoken: a: b\n", 2),
    ("version: 2\nversion: 2\n", 2),
    ("version: 2\n---\nversion: 2\n", 2),
])
def test_invalid_yaml_names_the_line(tmp_path: Path, text: str, line: int) -> None:
    good = write(tmp_path, "good.yml", "version: 2\n")
    bad = write(tmp_path, "bad.yml", text)
    assert error([good, bad]).startswith(f"{bad}: line {line}: invalid YAML: ")


def test_keys_must_be_strings_and_tunnels_mappings(tmp_path: Path) -> None:
    message, path = one_error(tmp_path, "tunnels:\n  8080: {proto: http, addr: 80}\n")
    assert message == f"{path}: tunnels.8080: keys must be strings (got 8080; quote it)"
    message, path = one_error(tmp_path, "tunnels: [web]\n")
    assert message.startswith(f"{path}: tunnels: must be a mapping")
    good = write(tmp_path, "good.yml", "version: 2\ntunnels:\n  web: {proto: http, addr: 1}\n")
    bad = write(tmp_path, "bad.yml", "tunnels:\n  web:\n")
    assert error([good, bad]).startswith(f"{bad}: tunnels.web: must be a mapping")


# the top level ------------------------------------------------------------------------------


def test_version(tmp_path: Path) -> None:
    assert load([write(tmp_path, "s.yml", 'version: "2"\n')]).version == 2
    for bad in ("3", '"3"'):
        path = write(tmp_path, "v3.yml", f"version: {bad}\nagent:\n  authtoken: x\n")
        assert error([path]) == (
            f"{path}: version: this agent reads config version 2; version 3 (with `agent` and "
            "`endpoints`) is not supported")
    for bad, shown in (("true", "true"), ("1", "1"), ("2.0", "2.0"), ("v2", "'v2'")):
        path = write(tmp_path, "bad.yml", f"version: {bad}\n")
        assert error([path]) == f"{path}: version: must be 2 (got {shown})"


def test_version_required_in_the_merged_result(tmp_path: Path) -> None:
    a = write(tmp_path, "a.yml", "authtoken: x\n")
    b = write(tmp_path, "b.yml", "metadata: y\n")
    assert error([a, b]) == f"{a}, {b}: version: required: add `version: 2`"
    c = write(tmp_path, "c.yml", "version: 2\n")
    assert load([a, c]).authtoken == "x"


def test_version_3_in_the_later_file(tmp_path: Path) -> None:
    a = write(tmp_path, "a.yml", "version: 2\n")
    b = write(tmp_path, "b.yml", "version: 3\n")
    assert error([a, b]).startswith(f"{b}: version: this agent reads config version 2")


def test_unknown_top_level_keys(tmp_path: Path) -> None:
    message, path = one_error(tmp_path, "authtokn: x\n")
    assert message == f"{path}: authtokn: unknown key (did you mean 'authtoken'?)"
    message, path = one_error(tmp_path, "zzzzzz: 1\n")
    assert message.startswith(f"{path}: zzzzzz: unknown key; allowed keys: authtoken, ")
    assert "tunnels" in message and "web_addr" in message


def test_the_agents_own_settings(tmp_path: Path) -> None:
    cfg = one(tmp_path, """\
        console_ui: iftty
        log: /tmp/agent.log
        log_level: warn
        log_format: logfmt
        update_check: false
        region: eu
        connect_timeout: 2s500ms
        server_addr: connect.example.com:443
        authtoken: abcd
        """)
    assert cfg.options == AgentSettings(console_ui="iftty", log="/tmp/agent.log",
                                        log_level="warn", log_format="logfmt", region="eu",
                                        connect_timeout=2.5)
    assert one(tmp_path, "console_ui: false\nlog: false\n").options == AgentSettings(
        console_ui="false", log="false")
    assert one(tmp_path, "authtoken: x\n").options == AgentSettings()
    assert AgentSettings(console_ui="iftty").plan(False, False) == (False, "stderr")
    assert AgentSettings(console_ui="iftty").plan(True, False) == (True, "stderr")
    # the log never shares the console's terminal
    assert AgentSettings().plan(True, True) == (True, "false")
    assert AgentSettings(log="stderr").plan(True, True) == (False, "stderr")
    assert AgentSettings(log="stderr").plan(True, False) == (True, "stderr")
    assert AgentSettings(log="stdout").plan(True, False) == (False, "stdout")
    assert AgentSettings(log="/tmp/a.log").plan(True, True) == (True, "/tmp/a.log")
    assert AgentSettings().plan(False, True) == (True, "stderr")  # screens to a pipe


@pytest.mark.parametrize(("text", "rule"), [
    ("console_ui: maybe", "console_ui: must be true, false or iftty (got 'maybe')"),
    ("log_level: loud", "log_level: must be one of trace, debug, info, warn, error, crit"),
    ("log_format: xml", "log_format: must be one of json, logfmt, term (got 'xml')"),
    ("log: 3", "log: must be a string (got 3)"),
    ("region: EU!", "region: must be a region code such as us or eu (got 'EU!')"),
    ("region: eu\nserver_addr: 127.0.0.1:4443",
     "region: needs server_addr to be the agent ingress domain"),
    ("connect_timeout: forever", "connect_timeout: must be a duration like '10s'"),
    ("connect_timeout: 1h", "connect_timeout: must be at most 10m"),
    ("update_check: true", "update_check: the Edgeway agent never checks for updates"),
    ("update_channel: stable", "update_channel: the Edgeway agent has no update channels"),
])
def test_the_agents_own_settings_are_checked(tmp_path: Path, text: str, rule: str) -> None:
    message, path = one_error(tmp_path, text + "\n")
    assert message.startswith(f"{path}: {rule}"), message


@pytest.mark.parametrize("key", sorted(TOP_UNSUPPORTED))
def test_unsupported_top_level_keys(tmp_path: Path, key: str) -> None:
    message, path = one_error(tmp_path, f"{key}: x\n")
    assert message == f"{path}: {key}: not supported by the Edgeway agent"


@pytest.mark.parametrize(("value", "rule"), [
    ("12345", "must be a string (got int)"),
    ('""', "must be a non-empty string without spaces"),
    ('"abc def"', "must be a non-empty string without spaces"),
])
def test_authtoken(tmp_path: Path, value: str, rule: str) -> None:
    message, path = one_error(tmp_path, f"authtoken: {value}\n")
    assert message == f"{path}: authtoken: {rule}"
    assert "12345" not in message.removeprefix(path)  # a token is never echoed


@pytest.mark.parametrize(("value", "expected"), [
    ("tunnel.example.com", "tunnel.example.com:443"),
    ("tunnel.example.com:4443", "tunnel.example.com:4443"),
    ("10.0.0.1", "10.0.0.1:443"),
    ('"[::1]:8443"', "[::1]:8443"),
    ('"[::1]"', "[::1]:443"),
    ('"::1"', "[::1]:443"),
    ("localhost", "localhost:443"),
])
def test_server_addr(tmp_path: Path, value: str, expected: str) -> None:
    assert one(tmp_path, f"server_addr: {value}\n").server_addr == expected


@pytest.mark.parametrize(("value", "rule"), [
    ("bad_host!:443", "'bad_host!' is not a valid host name or IP address"),
    ("example.com:0", "port must be from 1 to 65535 (got 0)"),
    ("example.com:99999", "port must be from 1 to 65535 (got 99999)"),
    ("example.com:https", "port must be from 1 to 65535 (got 'https')"),
    ("1.2.3.999", "'1.2.3.999' is not a valid host name or IP address"),
    ('""', "must not be empty"),
    ("443", "must be a string (got 443)"),
])
def test_server_addr_rules(tmp_path: Path, value: str, rule: str) -> None:
    a = write(tmp_path, "a.yml", "version: 2\nserver_addr: ok.example.com\n")
    b = write(tmp_path, "b.yml", f"server_addr: {value}\n")
    message = error([a, b])
    assert message.startswith(f"{b}: server_addr: ")
    assert rule in message


def test_root_cas(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert one(tmp_path, "root_cas: host\n").root_cas == "host"
    assert one(tmp_path, "root_cas: trusted\n").root_cas == "trusted"
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "ca.pem").write_text(CA_PEM)
    (tmp_path / "other").mkdir()
    monkeypatch.chdir(tmp_path / "other")  # relative to the file, not the working directory
    a = write(tmp_path, "conf/a.yml", "version: 2\nroot_cas: ca.pem\n")
    assert load([a]).root_cas == str(tmp_path / "conf" / "ca.pem")
    b = write(tmp_path, "b.yml", "root_cas: conf/ca.pem\n")
    assert load([a, b]).root_cas == str(tmp_path / "conf" / "ca.pem")
    relative = os.path.join("..", "conf", "a.yml")  # a relative config path works too
    assert load([relative]).root_cas == str(tmp_path / "conf" / "ca.pem")
    c = write(tmp_path, "c.yml", "root_cas: ca.pem\n")  # no ca.pem next to c.yml
    message = error([a, c])
    assert message.startswith(f"{c}: root_cas: must be trusted, host or a PEM file")
    assert str(tmp_path / "ca.pem") in message
    (tmp_path / "not.pem").write_text("hello\n")
    d = write(tmp_path, "d.yml", "root_cas: not.pem\n")
    assert error([a, d]) == f"{d}: root_cas: {tmp_path / 'not.pem'} holds no PEM certificate"


def test_web_addr(tmp_path: Path) -> None:
    assert one(tmp_path, "web_addr: false\n").web_addr is None
    assert one(tmp_path, "web_addr: 0.0.0.0:4041\n").web_addr == "0.0.0.0:4041"
    assert one(tmp_path, "web_addr: localhost:4040\n").web_addr == "localhost:4040"
    a = write(tmp_path, "a.yml", "version: 2\nweb_addr: false\n")
    b = write(tmp_path, "b.yml", "web_addr: 127.0.0.1:5000\n")
    assert load([a, b]).web_addr == "127.0.0.1:5000"
    assert load([b, a]).web_addr is None
    for bad, rule in (("true", "must be a string (got true)"),
                      ("localhost", "must be host:port (got 'localhost')")):
        message, path = one_error(tmp_path, f"web_addr: {bad}\n")
        assert message == f"{path}: web_addr: {rule}"


def test_metadata_length(tmp_path: Path) -> None:
    assert len(one(tmp_path, f"metadata: {'m' * 4096}\n").metadata) == 4096
    message, path = one_error(tmp_path, f"metadata: {'m' * 4097}\n")
    assert message == f"{path}: metadata: must be at most 4096 characters (got 4097)"
    assert tunnel_error(tmp_path, f"proto: tcp\naddr: 22\nmetadata: {'é' * 4097}\n") == (
        "metadata: must be at most 4096 characters (got 4097)")
    assert tunnel_error(tmp_path, "proto: tcp\naddr: 22\nmetadata: [1]\n") == (
        "metadata: must be a string (got a list)")


@pytest.mark.parametrize(("value", "seconds"), [
    ("10s", 10.0), ("500ms", 0.5), ("1m", 60.0), ("1m30s", 90.0), ("1.5h", 5400.0),
    ("250us", 0.00025), ("2", 2.0), ("0.25", 0.25),
])
def test_durations(tmp_path: Path, value: str, seconds: float) -> None:
    cfg = one(tmp_path, f"heartbeat_interval: {value}\nheartbeat_tolerance: {value}\n")
    assert cfg.heartbeat_interval == pytest.approx(seconds)
    assert cfg.heartbeat_tolerance == pytest.approx(seconds)


@pytest.mark.parametrize(("value", "rule"), [
    ("0s", "must be longer than zero (got '0s')"),
    ("0", "must be longer than zero (got 0)"),
    ("-1", "must be longer than zero (got -1)"),
    ('"10"', "must be a duration like '10s', '500ms' or '1m30s' (got '10')"),
    ("1m30", "must be a duration like '10s', '500ms' or '1m30s' (got '1m30')"),
    ("ten", "must be a duration like '10s', '500ms' or '1m30s' (got 'ten')"),
    ("true", "must be a duration like '10s', '500ms' or '1m30s' (got true)"),
])
def test_duration_rules(tmp_path: Path, value: str, rule: str) -> None:
    message, path = one_error(tmp_path, f"heartbeat_tolerance: {value}\n")
    assert message == f"{path}: heartbeat_tolerance: {rule}"


def test_inspect_db_size(tmp_path: Path) -> None:
    assert one(tmp_path, "inspect_db_size: 0\n").inspect_db_size == 50 * 1024 * 1024
    assert one(tmp_path, "inspect_db_size: -1\n").inspect_db_size == -1
    assert one(tmp_path, "inspect_db_size: 1000\n").inspect_db_size == 1000
    for bad in ("-2", "50MB", "true"):
        message, path = one_error(tmp_path, f"inspect_db_size: {bad}\n")
        assert message.startswith(f"{path}: inspect_db_size: must be a number of bytes")


def test_web_allow_hosts(tmp_path: Path) -> None:
    cfg = one(tmp_path, "web_allow_hosts: [localhost, .example.com, 10.0.0.0/8, '::1']\n")
    assert cfg.web_allow_hosts == ("localhost", ".example.com", "10.0.0.0/8", "::1")
    message, path = one_error(tmp_path, "web_allow_hosts: [localhost, 'bad host']\n")
    assert message == (f"{path}: web_allow_hosts: entries must be IPs, CIDRs, host names or "
                       ".suffixes (got 'bad host')")
    message, path = one_error(tmp_path, "web_allow_hosts: localhost\n")
    assert message == f"{path}: web_allow_hosts: must be a list of strings (got 'localhost')"


# tunnels ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("proto", "addr", "url"), [
    ("http", "80", "http://127.0.0.1:80"),
    ("http", '"8080"', "http://127.0.0.1:8080"),
    ("http", "localhost:3000", "http://localhost:3000"),
    ("http", '"[::1]:8080"', "http://[::1]:8080"),
    ("http", "http://app.internal:8000", "http://app.internal:8000"),
    ("http", "https://localhost", "https://localhost:443"),
    ("http", "http://localhost/", "http://localhost:80"),
    ("https", "8443", "http://127.0.0.1:8443"),
    ("tcp", "22", "tcp://127.0.0.1:22"),
    ("tcp", "tcp://10.0.0.5:5432", "tcp://10.0.0.5:5432"),
    ("tls", '"443"', "tcp://127.0.0.1:443"),
    ("tls", "backend:443", "tcp://backend:443"),
])
def test_addr_forms(tmp_path: Path, proto: str, addr: str, url: str) -> None:
    cfg = one(tmp_path, f"tunnels:\n  t:\n    proto: {proto}\n    addr: {addr}\n")
    assert cfg.tunnels["t"].addr.url() == url


@pytest.mark.parametrize(("proto", "addr", "rule"), [
    ("http", "tcp://h:1", "URL scheme must be one of http, https here (got 'tcp://h:1')"),
    ("tcp", "http://h:80", "URL scheme must be one of tcp here (got 'http://h:80')"),
    ("tcp", "tcp://h", "tcp URLs need a port (got 'tcp://h')"),
    ("http", "70000", "port must be from 1 to 65535 (got 70000)"),
    ("http", "0", "port must be from 1 to 65535 (got 0)"),
    ("http", "true", "must be a port, host:port or URL (got true)"),
    ("http", "localhost", "must be a port, host:port or URL: must be host:port"),
    ("http", "http://h:80/path", "URL must be scheme://host[:port] only"),
    ("http", "http://user@h:80", "URL must be scheme://host[:port] only"),
    ("http", '"::1:80"', "IPv6 addresses need brackets"),
])
def test_addr_rules(tmp_path: Path, proto: str, addr: str, rule: str) -> None:
    assert rule in tunnel_error(tmp_path, f"proto: {proto}\naddr: {addr}\n")


def test_addr_required_names_the_file_defining_the_tunnel(tmp_path: Path) -> None:
    a = write(tmp_path, "a.yml", "version: 2\ntunnels:\n  web: {proto: http, addr: 80}\n")
    b = write(tmp_path, "b.yml", "tunnels:\n  api: {proto: http}\n")
    assert error([a, b]) == f"{b}: tunnels.api.addr: required: a port, host:port or URL"


def test_bad_key_blamed_on_the_file_that_set_it(tmp_path: Path) -> None:
    a = write(tmp_path, "a.yml", "version: 2\ntunnels:\n  web: {proto: http, addr: 80}\n")
    b = write(tmp_path, "b.yml", "tunnels:\n  web: {proto: ftp}\n")
    assert error([a, b]) == f"{b}: tunnels.web.proto: must be one of http, tcp, tls (got 'ftp')"
    c = write(tmp_path, "c.yml", "version: 2\ntunnels:\n  web: {proto: http, addr: 'x:y'}\n")
    d = write(tmp_path, "d.yml", "tunnels:\n  web: {inspect: false}\n")
    assert error([c, d]).startswith(f"{c}: tunnels.web.addr: ")


def test_proto(tmp_path: Path) -> None:
    assert tunnel_error(tmp_path, "addr: 80\n") == (
        "proto: required (http, tcp or tls) unless labels is set")
    assert tunnel_error(tmp_path, "proto: 80\naddr: 80\n") == (
        "proto: must be one of http, tcp, tls (got 80)")
    cfg = one(tmp_path, "tunnels:\n  web: {proto: https, addr: 80}\n")
    assert (cfg.tunnels["web"].proto, cfg.tunnels["web"].schemes) == ("http", ("https",))
    assert tunnel_error(tmp_path, "proto: https\naddr: 80\nschemes: [http]\n").startswith(
        "schemes: proto https already means schemes [https]")


def test_labeled_tunnels(tmp_path: Path) -> None:
    cfg = one(tmp_path, """\
        tunnels:
          edge:
            labels: [edge=edghts_2a, team=web-1]
            addr: https://localhost:8443
            metadata: m
        """)
    edge = cfg.tunnels["edge"]
    assert (edge.proto, edge.labels, edge.metadata) == (
        "", {"edge": "edghts_2a", "team": "web-1"}, "m")
    assert edge.addr == Addr("https", "localhost", 8443)
    assert (edge.inspect, edge.schemes) == (False, ())
    assert tunnel_error(tmp_path, "labels: [a=b]\nproto: http\naddr: 80\n").startswith(
        "proto: must be left out when labels is set")
    assert tunnel_error(tmp_path, "labels: [a=b]\naddr: 80\ndomain: x.example.com\n") == (
        "domain: does not apply to labeled tunnels (they take: addr, allow_unauthenticated, "
        "labels, metadata)")
    for bad, rule in (("[novalue]", "entry 1 must be a distinct name=value (got 'novalue')"),
                      ("[a=1, a=2]", "entry 2 must be a distinct name=value (got 'a=2')"),
                      ("['bad name=1']", "entry 1 must be a distinct name=value"),
                      ("[]", "must list at least one name=value")):
        assert tunnel_error(tmp_path, f"labels: {bad}\naddr: 80\n").startswith(f"labels: {rule}")


@pytest.mark.parametrize(("body", "rule"), [
    ("proto: tcp\naddr: 22\ninspect: false\n", "inspect: does not apply to tcp tunnels"),
    ("proto: tcp\naddr: 22\ndomain: x.example.com\n", "domain: does not apply to tcp tunnels"),
    ("proto: tls\naddr: 443\nbasic_auth: []\n", "basic_auth: does not apply to tls tunnels"),
    ("proto: tls\naddr: 443\nschemes: [https]\n", "schemes: does not apply to tls tunnels"),
    ("proto: http\naddr: 80\nremote_addr: x:1\n", "remote_addr: does not apply to http tunnels"),
    ("proto: http\naddr: 80\nlabels: [a=b]\n", "proto: must be left out when labels is set"),
])
def test_keys_that_do_not_apply_to_the_proto(tmp_path: Path, body: str, rule: str) -> None:
    assert tunnel_error(tmp_path, body).startswith(rule)


def test_unknown_tunnel_keys(tmp_path: Path) -> None:
    assert tunnel_error(tmp_path, "proto: http\nadr: 80\n") == (
        "adr: unknown key (did you mean 'addr'?)")
    message = tunnel_error(tmp_path, "proto: http\naddr: 80\nqqqqqqq: 1\n")
    assert message.startswith("qqqqqqq: unknown key; allowed keys: addr, "
                              "allow_unauthenticated, basic_auth, "
                              "circuit_breaker, compression, crt, domain, ")


@pytest.mark.parametrize("key", sorted(TUNNEL_UNSUPPORTED))
def test_unsupported_tunnel_options(tmp_path: Path, key: str) -> None:
    assert tunnel_error(tmp_path, f"proto: http\naddr: 80\n{key}: x\n") == (
        f"{key}: {TUNNEL_UNSUPPORTED[key]}")
    assert "not supported" in TUNNEL_UNSUPPORTED[key]


def test_renamed_tunnel_options(tmp_path: Path) -> None:
    assert tunnel_error(tmp_path, "proto: http\naddr: 80\nbind_tls: true\n").startswith(
        "bind_tls: no longer supported: use schemes")
    assert tunnel_error(tmp_path, "proto: http\naddr: 80\nauth: 'a:password1'\n").startswith(
        "auth: no longer supported: use basic_auth")


def test_tunnel_names(tmp_path: Path) -> None:
    cfg = one(tmp_path, "tunnels:\n  web.v2-x_1: {proto: http, addr: 80}\n")
    assert cfg.tunnels["web.v2-x_1"].name == "web.v2-x_1"
    for name in ("'my app'", "''", "'wéb'"):
        message, path = one_error(tmp_path, f"tunnels:\n  {name}: {{proto: http, addr: 80}}\n")
        assert message.startswith(f"{path}: tunnels.")
        assert "tunnel names must be letters, digits, '_', '.' or '-'" in message


def test_basic_auth(tmp_path: Path) -> None:
    cfg = one(tmp_path, """\
        tunnels:
          web:
            proto: http
            addr: 80
            basic_auth: ["alice:12345678", "bob:pa:ss:word"]
        """)
    assert cfg.tunnels["web"].basic_auth == (("alice", "12345678"), ("bob", "pa:ss:word"))
    message = tunnel_error(tmp_path, "proto: http\naddr: 80\nbasic_auth: ['a:password1', "
                                     "'bob:short7']\n")
    assert message == ("basic_auth: entry 2 (user 'bob'): the password must be at least 8 "
                       "characters")
    assert "short7" not in message
    for bad in ("['nocolon']", "[':password1']"):
        assert tunnel_error(tmp_path, f"proto: http\naddr: 80\nbasic_auth: {bad}\n") == (
            "basic_auth: entry 1 must be user:password")
    assert tunnel_error(tmp_path, "proto: http\naddr: 80\nbasic_auth: 'a:password1'\n") == (
        "basic_auth: must be a list of strings (got 'a:password1')")


def test_host_header(tmp_path: Path) -> None:
    for value in ("rewrite", "preserve", "example.com", "example.com:8080"):
        cfg = one(tmp_path, f"tunnels:\n  w: {{proto: http, addr: 80, host_header: {value}}}\n")
        assert cfg.tunnels["w"].host_header == value
    assert "'bad host' is not a valid host name" in tunnel_error(
        tmp_path, "proto: http\naddr: 80\nhost_header: bad host\n")


def test_schemes(tmp_path: Path) -> None:
    cfg = one(tmp_path, "tunnels:\n  w: {proto: http, addr: 80, schemes: [http, https]}\n")
    assert cfg.tunnels["w"].schemes == ("http", "https")
    for bad in ("[]", "[ftp]", "[http, http]"):
        assert tunnel_error(tmp_path, f"proto: http\naddr: 80\nschemes: {bad}\n").startswith(
            "schemes: must list http and/or https, each once")
    assert tunnel_error(tmp_path, "proto: http\naddr: 80\nschemes: https\n") == (
        "schemes: must be a list of strings (got 'https')")


def test_domains(tmp_path: Path) -> None:
    cfg = one(tmp_path, """\
        tunnels:
          a: {proto: http, addr: 80, hostname: Old.Example.com}
          b: {proto: tls, addr: 443, domain: '*.example.com'}
          c: {proto: http, addr: 80, subdomain: foo}
        """)
    assert cfg.tunnels["a"].domain == "old.example.com"
    assert cfg.tunnels["b"].domain == "*.example.com"
    assert (cfg.tunnels["c"].subdomain, cfg.tunnels["c"].domain) == ("foo", "")
    assert tunnel_error(tmp_path, "proto: http\naddr: 80\ndomain: a.example\n"
                                  "hostname: b.example\n") == (
        "hostname: cannot be combined with domain")
    assert tunnel_error(tmp_path, "proto: http\naddr: 80\ndomain: a.example\n"
                                  "subdomain: b\n") == "subdomain: cannot be combined with domain"
    assert tunnel_error(tmp_path, "proto: http\naddr: 80\ndomain: 1.2.3.4\n") == (
        "domain: must be a domain name (wildcards as *.name) (got '1.2.3.4')")
    assert tunnel_error(tmp_path, "proto: http\naddr: 80\nsubdomain: '*.x'\n") == (
        "subdomain: must be a domain name (got '*.x')")


def test_remote_addr_and_inspect(tmp_path: Path) -> None:
    cfg = one(tmp_path, """\
        tunnels:
          ssh: {proto: tcp, addr: 22, remote_addr: '1.tcp.example.com:12345'}
          web: {proto: http, addr: 80, inspect: false}
        """)
    assert cfg.tunnels["ssh"].remote_addr == "1.tcp.example.com:12345"
    assert (cfg.tunnels["ssh"].inspect, cfg.tunnels["ssh"].schemes) == (False, ())
    assert cfg.tunnels["web"].inspect is False
    assert tunnel_error(tmp_path, "proto: tcp\naddr: 22\nremote_addr: example.com\n") == (
        "remote_addr: must be host:port (got 'example.com')")
    # YAML 1.2: `no` is a string, not a boolean
    assert tunnel_error(tmp_path, "proto: http\naddr: 80\ninspect: no\n") == (
        "inspect: must be true or false (got 'no')")


def test_parse_tunnel_for_the_local_api() -> None:
    config = parse_tunnel("ssh", {"proto": "tcp", "addr": "22", "remote_addr": None},
                          "request body")
    assert (config.name, config.proto, config.addr.url()) == ("ssh", "tcp", "tcp://127.0.0.1:22")
    with pytest.raises(ConfigError) as info:
        parse_tunnel("web", {"proto": "ftp", "addr": 80}, "request body")
    assert str(info.value) == "request body: proto: must be one of http, tcp, tls (got 'ftp')"
    with pytest.raises(ConfigError) as info:
        parse_tunnel("a b", {"proto": "http", "addr": 80}, "request body")
    assert str(info.value).startswith("request body: name: tunnel names must be")


# printing -----------------------------------------------------------------------------------


def test_to_yaml_masks_secrets(tmp_path: Path) -> None:
    a = write(tmp_path, "a.yml", "version: 2\nauthtoken: 2abcdefghijklmnop\n")
    b = write(tmp_path, "b.yml", """\
        tunnels:
          web: {proto: http, addr: 80, basic_auth: ['alice:secretpassword']}
        """)
    cfg, doc = load_merged([a, b])
    assert cfg.authtoken == "2abcdefghijklmnop"
    text = to_yaml(doc)
    assert "2abcdefghijklmnop" not in text and "secretpassword" not in text
    printed = YAML(typ="safe").load(text)
    assert printed == {"version": 2, "authtoken": "2abc…",
                       "tunnels": {"web": {"proto": "http", "addr": 80,
                                           "basic_auth": ["alice:********"]}}}
    assert text.index("version") < text.index("authtoken") < text.index("tunnels")
    assert doc["authtoken"] == "2abcdefghijklmnop"  # the document itself is left alone
    assert "authtoken" not in to_yaml({"version": 2})


def test_traffic_policies_are_checked_and_sent_as_json(tmp_path: Path) -> None:
    policy = ("traffic_policy:\n  on_http_request:\n    - expressions: [\"req.method == 'GET'\"]\n"
              "      actions: [{type: deny, config: {status_code: 404}}]\n")
    cfg = one(tmp_path, "tunnels:\n  web:\n    proto: http\n    addr: 80\n    "
              + policy.replace("\n", "\n    ").rstrip() + "\n")
    assert json.loads(cfg.tunnels["web"].traffic_policy) == {"on_http_request": [
        {"expressions": ["req.method == 'GET'"],
         "actions": [{"type": "deny", "config": {"status_code": 404}}]}]}
    assert tunnel_error(tmp_path, "proto: tcp\naddr: 22\ntraffic_policy:\n  on_http_request: []\n"
                        ) == ("traffic_policy: on_http_request: is not a phase here; phases: "
                              "on_tcp_connect")
    message = tunnel_error(tmp_path, "proto: http\naddr: 80\ntraffic_policy: "
                           "'{\"on_http_request\": [{\"expressions\": [\"1 +\"], "
                           "\"actions\": [{\"type\": \"deny\"}]}]}'\n")
    assert message.startswith("traffic_policy: on_http_request[0].expressions[0]: '1 +' is not "
                              "a valid CEL expression")


def test_tls_files_go_to_the_bind_as_the_sdks_send_them(tmp_path: Path) -> None:
    """mutual_tls_cas (http, tls) and crt/key (tls, terminated at the edge): files relative to
    the config, read and checked when it loads, carried base64 as the SDKs carry them."""
    import base64

    from tests.edge.test_mutual_tls import authority_files
    from tests.edge.tls_upstream import self_signed
    ca, _, _ = authority_files(tmp_path, "clients")
    (tmp_path / "certs").mkdir()
    (tmp_path / "certs" / "ca.pem").write_text(ca)
    crt, key = self_signed("*.edgeway.localhost", tmp_path / "certs")
    config = one(tmp_path, f"""
        tunnels:
          web: {{proto: http, addr: 80, mutual_tls_cas: certs/ca.pem}}
          db: {{proto: tls, addr: 5432, crt: certs/{crt.name}, key: certs/{key.name},
                terminate_at: edge, mutual_tls_cas: certs/ca.pem}}
        """)
    b64 = base64.b64encode
    web, db = config.tunnels["web"].middleware, config.tunnels["db"].middleware
    assert web == {"MutualTLSCA": {"MutualTLSCA": b64(ca.encode()).decode()}}
    assert db["TLSTermination"] == {"Cert": b64(crt.read_bytes()).decode(),
                                    "Key": b64(key.read_bytes()).decode()}
    assert db["MutualTLSAtEdge"] == web["MutualTLSCA"]
    for body, rule in (
            ("proto: tls\naddr: 1\ncrt: certs/ca.pem\n", "key: required with crt, key"),
            ("proto: tls\naddr: 1\nmutual_tls_cas: certs/ca.pem\n",
             "mutual_tls_cas: on a tls tunnel needs crt and key"),
            (f"proto: tls\naddr: 1\ncrt: certs/{crt.name}\nkey: certs/{key.name}\n"
             "terminate_at: agent\n", "terminate_at: agent: terminating TLS in the agent"),
            (f"proto: tls\naddr: 1\ncrt: certs/ca.pem\nkey: certs/{key.name}\n",
             "key: crt and key do not load as a pair"),
            ("proto: http\naddr: 1\nmutual_tls_cas: certs/nothing.pem\n",
             "mutual_tls_cas: cannot read"),
            (f"proto: http\naddr: 1\nmutual_tls_cas: certs/{key.name}\n",
             f"mutual_tls_cas: {tmp_path / 'certs' / key.name} holds no PEM certificate"),
            ("proto: tcp\naddr: 1\ncrt: x\n", "crt: does not apply to tcp tunnels")):
        assert tunnel_error(tmp_path, body).startswith(rule), (body, tunnel_error(tmp_path, body))
