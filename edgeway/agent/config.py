"""Agent config files in the ngrok agent config format version 2 (YAML): read, merge, validate.

Several files may be given (`--config a.yml,b.yml`, or the flag repeated); they merge in order:
later files win for scalars, lists are replaced whole, mappings (the top level, `tunnels` and each
tunnel) merge key by key. A key left empty (`key:`, a YAML null) counts as not set, so it does not
erase an earlier file's value.

The agent's own settings (console_ui, log, log_level, log_format, region, connect_timeout,
update_check, update_channel) are checked in ``edgeway.agent.settings``, each tunnel in
``edgeway.agent.tunnelconfig``. Refused, because the agent cannot honour them: proxy_url,
api_key, remote_management, dns_resolver_ips, crl_noverify, and the tunnel options listed in
TUNNEL_UNSUPPORTED. Every other unknown key is an error too. The command line's options
(``--authtoken``, a one-liner's tunnel…) come last, as one more document named "the command
line".

Each error names the file (for a merged key, the file that set it last), the dotted key path and
the rule: "b.yml: tunnels.web.proto: must be one of http, tcp, tls (got 'ftp')".
"""

from __future__ import annotations

import copy
import io
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from edgeway.agent import apitunnel, settings
from edgeway.agent import configcheck as check
from edgeway.agent.configcheck import DEFAULT_INSPECT_DB_SIZE, show
from edgeway.agent.context import ConfigError, Context
from edgeway.agent.tunnelconfig import (
    TUNNEL_UNSUPPORTED,
    Addr,
    TunnelConfig,
    parse_tunnel,
    tunnel,
)

__all__ = ["TOP_UNSUPPORTED", "TUNNEL_UNSUPPORTED", "Addr", "AgentConfig", "ConfigError",
           "TunnelConfig", "load", "load_merged", "merge", "parse_tunnel", "split_paths",
           "to_yaml"]

SETTINGS: dict[str, Callable[[Any], Any]] = {
    "console_ui": settings.console_ui, "log": settings.log_target,
    "log_level": settings.log_level, "log_format": settings.log_format,
    "region": settings.region, "connect_timeout": settings.connect_timeout,
    "update_check": settings.update_check, "update_channel": settings.update_channel,
    "client_cert": settings.pem_file, "client_key": settings.pem_file}
TOP_KEYS = frozenset({"version", "authtoken", "server_addr", "root_cas", "web_addr",
                      "web_allow_hosts", "inspect_db_size", "metadata", "heartbeat_interval",
                      "heartbeat_tolerance", "tunnels", *SETTINGS})
TOP_UNSUPPORTED = frozenset({"proxy_url", "api_key", "remote_management", "dns_resolver_ips",
                             "crl_noverify"})
DEFAULT_WEB_ADDR = "127.0.0.1:4040"
COMMAND_LINE = "the command line"


def default_config() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "edgeway" / "agent.yml"


@dataclass(frozen=True)
class AgentConfig:
    version: int
    authtoken: str
    server_addr: str  # "host:port", or "" when not set
    root_cas: str  # "trusted", "host" or an absolute path to a PEM file
    web_addr: str | None  # None when the file says `false`
    metadata: str
    heartbeat_interval: float  # seconds
    heartbeat_tolerance: float
    web_allow_hosts: tuple[str, ...]
    inspect_db_size: int  # bytes; -1 disables inspection
    tunnels: dict[str, TunnelConfig]
    files: tuple[str, ...]
    options: settings.AgentSettings = field(default_factory=settings.AgentSettings)

    def missing(self) -> str:
        """What ``start`` still needs that the config does not say, or ""."""
        lacking = [k for k in ("authtoken", "server_addr") if not getattr(self, k)]
        if not lacking:
            return ""
        return (f"the config needs {' and '.join(lacking)} to start (in "
                f"{', '.join(self.files) or 'no file'}; `edgeway config add-authtoken TOKEN` "
                "and `edgeway config add-server-addr HOST:PORT` write them, or pass "
                "--authtoken and --server-addr)")


def split_paths(values: list[str]) -> list[str]:
    """--config values: each may be comma-separated; order kept, empty parts dropped."""
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def read(path: str) -> dict[str, Any]:
    """One file, parsed, with the shape checks that need the file itself."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    try:
        doc = YAML(typ="safe").load(data.decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: cannot be read: not UTF-8 (byte {exc.start})") from None
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}: " if mark is not None else ""
        raise ConfigError(f"{path}: {where}invalid YAML: {exc.problem or exc.context}") from None
    except YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {exc}") from None
    if not isinstance(doc, dict):
        got = "an empty file" if doc is None else show(doc)
        raise ConfigError(f"{path}: the top level must be a mapping of keys such as version and "
                          f"tunnels (got {got})")
    _check_keys(path, doc, ())
    tunnels = doc.get("tunnels")
    if tunnels is not None and not isinstance(tunnels, dict):
        raise ConfigError(f"{path}: tunnels: must be a mapping of tunnel names to definitions "
                          f"(got {show(tunnels)})")
    for name, one in (tunnels or {}).items():
        if not isinstance(one, dict):
            raise ConfigError(f"{path}: tunnels.{name}: must be a mapping with proto, addr… "
                              f"(got {show(one)})")
    return doc


def _check_keys(path: str, value: object, at: tuple[str, ...]) -> None:
    if isinstance(value, list):
        for item in value:
            _check_keys(path, item, at)
    elif isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ConfigError(f"{path}: {'.'.join((*at, str(key)))}: keys must be strings "
                                  f"(got {show(key)}; quote it)")
            _check_keys(path, item, (*at, key))


def merge(docs: list[tuple[str, dict[str, Any]]]) -> tuple[dict[str, Any], dict[str, str]]:
    """Merge parsed documents in order: later files win for scalars, lists are replaced, maps
    (the tunnels map included, and each tunnel's own map) merge key by key. Returns the merged
    document and, for each dotted key path, the file that set it last (for error messages)."""
    merged: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for name, doc in docs:
        _merge_into(merged, doc, "", name, origins)
    return merged, origins


def _merge_into(target: dict[str, Any], doc: dict[str, Any], prefix: str, name: str,
                origins: dict[str, str]) -> None:
    for key, value in doc.items():
        if value is None:
            continue
        path = f"{prefix}{key}"
        if not (isinstance(value, dict) and isinstance(target.get(key), dict)):
            for stale in [p for p in origins if p.startswith(path + ".")]:
                del origins[stale]
            target[key] = {} if isinstance(value, dict) else copy.deepcopy(value)
        if isinstance(value, dict):
            _merge_into(target[key], value, path + ".", name, origins)
        origins[path] = name


def load(paths: list[str]) -> AgentConfig:
    """Read, merge and validate. Raises ConfigError."""
    return load_merged(paths)[0]


def load_merged(paths: list[str], command_line: dict[str, Any] | None = None
                ) -> tuple[AgentConfig, dict[str, Any]]:
    """`load`, also returning the merged document (for `to_yaml`); `command_line` is merged
    last (the flags of `start` and the one-liners), and then a file may be missing."""
    if not paths and command_line is None:
        raise ConfigError("no config file given")
    docs = [(path, read(path)) for path in paths]
    if command_line:
        docs.append((COMMAND_LINE, {"version": 2} if not docs else {}))
        docs.append((COMMAND_LINE, command_line))
    merged, origins = merge(docs)
    return validate(merged, origins, tuple(paths) or (COMMAND_LINE,)), merged


def validate(doc: dict[str, Any], origins: dict[str, str], files: tuple[str, ...]
             ) -> AgentConfig:
    """Check a merged document (see `merge`) and build the config."""
    ctx = Context(origins, files)
    version = doc.get("version")
    if "version" not in doc:
        raise ctx.error(("version",), "required: add `version: 2`")
    if version in (3, "3"):
        raise ctx.error(("version",), "this agent reads config version 2; version 3 (with "
                                      "`agent` and `endpoints`) is not supported")
    if not (version == "2" or (type(version) is int and version == 2)):  # not True, not 2.0
        raise ctx.error(("version",), f"must be 2 (got {show(version)})")
    for key in doc:
        if key in TOP_UNSUPPORTED:
            raise ctx.error((key,), "not supported by the Edgeway agent")
        if key not in TOP_KEYS:
            raise ctx.error((key,), check.unknown_key(key, TOP_KEYS))
    tunnels = doc.get("tunnels", {})
    if not isinstance(tunnels, dict):
        raise ctx.error(("tunnels",), f"must be a mapping of names to tunnels "
                                      f"(got {show(tunnels)})")
    web_default: str | None = DEFAULT_WEB_ADDR
    server_addr = ctx.get(doc, ("server_addr",), check.server_addr, "")
    config = AgentConfig(
        version=2,
        authtoken=ctx.get(doc, ("authtoken",), check.authtoken, ""),
        server_addr=server_addr,
        root_cas=ctx.get(doc, ("root_cas",), lambda v: check.root_cas(v, ctx.file(("root_cas",))),
                         "trusted"),
        web_addr=ctx.get(doc, ("web_addr",), check.web_addr, web_default),
        metadata=ctx.get(doc, ("metadata",), check.metadata, ""),
        heartbeat_interval=ctx.get(doc, ("heartbeat_interval",), check.duration, 10.0),
        heartbeat_tolerance=ctx.get(doc, ("heartbeat_tolerance",), check.duration, 15.0),
        web_allow_hosts=ctx.get(doc, ("web_allow_hosts",),
                                lambda v: tuple(map(check.allow_host, check.string_list(v))), ()),
        inspect_db_size=ctx.get(doc, ("inspect_db_size",), check.inspect_db_size,
                                DEFAULT_INSPECT_DB_SIZE),
        tunnels={name: tunnel(ctx, name, t, ("tunnels", name)) for name, t in tunnels.items()},
        files=files,
        options=_settings(ctx, doc, server_addr),
    )
    if config.web_addr:  # (with port 0, checked at start against the port chosen)
        host, port = check.web_host_port(config.web_addr)
        for name, one in config.tunnels.items():
            if why := apitunnel.refusal(one, host, port):
                raise ctx.error(("tunnels", name), why)
    return config


def _settings(ctx: Context, doc: dict[str, Any], server_addr: str) -> settings.AgentSettings:
    given = {key: ctx.get(doc, (key,), parse, None) for key, parse in SETTINGS.items()}
    given = {k: v for k, v in given.items() if v is not None and not k.startswith("update_")}
    if given.get("region"):
        host = settings.server_host(server_addr, "")
        if not host or host.replace(".", "").isdigit() or ":" in host:
            raise ctx.error(("region",), "needs server_addr to be the agent ingress domain "
                                         "(the agent dials tunnel.<region>.<that domain>), "
                                         f"not {server_addr or 'unset'}")
    try:
        settings.client_certificate(given.get("client_cert", ""), given.get("client_key", ""))
    except check.Invalid as exc:
        raise ctx.error(("client_cert",), str(exc)) from None
    return settings.AgentSettings(**given)


def _mask_token(token: object) -> str:
    text = str(token)
    return text[:4] + "…" if len(text) > 8 else "…"


def to_yaml(config_doc: dict[str, Any]) -> str:
    """The merged document as YAML, the authtoken masked, passwords and secrets hidden."""
    doc = copy.deepcopy(config_doc)
    if "authtoken" in doc:
        doc["authtoken"] = _mask_token(doc["authtoken"])
    tunnels = doc.get("tunnels")
    for one in tunnels.values() if isinstance(tunnels, dict) else ():
        auth = one.get("basic_auth") if isinstance(one, dict) else None
        if isinstance(auth, list):
            one["basic_auth"] = [f"{str(e).partition(':')[0]}:********" for e in auth]
        for key, secret in (("oauth", "client_secret"), ("oidc", "client_secret"),
                            ("verify_webhook", "secret")):
            part = one.get(key) if isinstance(one, dict) else None
            if isinstance(part, dict) and part.get(secret):
                part[secret] = "********"
    yaml = YAML(typ="safe")
    yaml.default_flow_style = False
    yaml.allow_unicode = True
    yaml.representer.sort_base_mapping_type_on_output = False
    out = io.StringIO()
    yaml.dump(doc, out)
    return out.getvalue()
