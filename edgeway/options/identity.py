"""``edgeway serve``'s options for end-user logins: OAuth provider endpoints, the platform's
managed OAuth applications, the login host of their callback."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from edgeway.config import IdentityOptions, split_list
from edgeway.edge.login.providers import BY_SDK_NAME, PROVIDERS, check_endpoint
from edgeway.errors import Invalid
from edgeway.options import AppendOver, option


def add(serve: argparse.ArgumentParser) -> None:
    option(serve, "--oauth-endpoint", [], var="OAUTH_ENDPOINTS",
           read=lambda text: list(split_list(text)), action=AppendOver,
           metavar="PROVIDER.NAME=URL",
           help="replace an OAuth provider's endpoint, e.g. code_host_a.token=https://"
                "github.example.com/login/oauth/access_token (repeatable; names in the "
                "README; the variable: comma-separated)")
    option(serve, "--oauth-apps", None, type=Path, metavar="FILE",
           help="JSON file of the platform's managed OAuth applications: "
                '{"<provider>": {"client_id": ..., "client_secret": ...}}')
    option(serve, "--login-host", "",
           help="host of the managed OAuth applications' callback (default: "
                "login.<base-domain>)")


def _oauth_apps(path: Path | None) -> tuple[tuple[str, str, str], ...]:
    """The managed OAuth applications of ``--oauth-apps``: (provider, client id, secret)."""
    if path is None:
        return ()
    try:
        apps = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"--oauth-apps {path}: {exc}") from None
    if not isinstance(apps, dict):
        raise ValueError(f"--oauth-apps {path}: must hold a JSON object of providers")
    out = []
    for name, app in apps.items():
        provider = BY_SDK_NAME.get(str(name))
        if provider is None:
            raise ValueError(f"--oauth-apps {path}: '{name}' is not a provider (one of "
                             f"{', '.join(PROVIDERS)})")
        if not isinstance(app, dict) or not all(
                isinstance(app.get(k), str) and app[k] for k in ("client_id", "client_secret")):
            raise ValueError(f"--oauth-apps {path}: '{name}' needs a client_id and a "
                             "client_secret (strings)")
        out.append((provider.name, app["client_id"], app["client_secret"]))
    return tuple(out)


def parse(args: argparse.Namespace, base_domain: str) -> IdentityOptions:
    host = args.login_host.strip().lower().rstrip(".") or f"login.{base_domain}"
    try:
        from edgeway.catalog import checks  # (here: the other commands start without it)

        checks.domain_name("--login-host", host)
    except Invalid as exc:
        raise ValueError(f"--login-host {host!r}: {exc.msg}") from None
    return IdentityOptions(tuple(check_endpoint(e) for e in args.oauth_endpoint),
                           _oauth_apps(args.oauth_apps), host)
