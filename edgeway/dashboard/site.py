"""``/dashboard/site``: the spec's site-to-site flow as one guided page, each step through
the API's own operations as the signed-in key:

1. the agent ingress (created here, or one chosen): the NS records to create, each with a
   copy button, and ``Check status`` (the ingress's DNS check, record by record);
2. the reserved wildcard domain ``*.<site>.<your domain>``: its two CNAMEs, checked the same
   way, and its certificate's status (the provisioning job, its error and retry time, the
   renewal time);
3. the bot user the site's agents run as;
4. its authtoken, bound to the wildcard by an ACL checked rule by rule as it is typed;
5. the agent config file (``agentfile``) and the CA file beside it, and the start command.

Where the flow stands is in the page's query (``ingress``, ``domain``, ``bot``): the page can
be reloaded, bookmarked and left. The authtoken is shown on the answer to its create only;
the config file is made from the form that answer holds, so the token is in no URL and
nothing keeps it.
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlencode

from starlette.responses import Response

from edgeway.catalog import checks
from edgeway.dashboard import agentfile
from edgeway.dashboard.web import PREFIX, Ctx, Handler, Refusal, api_refusal, redirect
from edgeway.errors import Invalid

PAGE = f"{PREFIX}/site"
STATE = ("ingress", "domain", "bot")
CHOICES = 50  # existing ones offered to continue with
POLICY = {"authority": "letsencrypt"}


def _state(ctx: Ctx, source: dict[str, str] | None = None) -> dict[str, str]:
    given = source if source is not None else dict(ctx.request.query_params)
    return {k: given[k].strip() for k in STATE if given.get(k, "").strip()}


def _url(state: dict[str, str], **more: str) -> str:
    query = urlencode({**state, **more})
    return f"{PAGE}?{query}" if query else PAGE


async def _one(ctx: Ctx, collection: str, id_: str) -> dict[str, Any] | None:
    if not id_:
        return None
    answer = await ctx.call("GET", f"/{collection}/{id_}")
    if answer.status == 404:
        return None
    if not answer.ok:
        raise api_refusal(answer)
    body: dict[str, Any] = answer.body
    return body


async def _choices(ctx: Ctx, collection: str, key: str) -> list[dict[str, Any]]:
    answer = await ctx.call("GET", f"/{collection}", [("limit", str(CHOICES))])
    return list(answer.body[key]) if answer.ok else []


async def _check(ctx: Ctx, collection: str, item: dict[str, Any] | None) -> Any:
    if item is None:
        return None
    found = await ctx.call("GET", f"/{collection}/{item['id']}/dns_check")
    return found.body if found.ok else {"error": "{} ({})".format(*found.error()[:2])}


def acl_verdicts(text: str) -> list[dict[str, str]]:
    """Each non-empty line of an ACL, with the API's verdict on it ("" when it is a rule)."""
    out = []
    for line in text.splitlines():
        rule = line.strip()
        if not rule:
            continue
        try:
            checks.acl_rules([rule])
            out.append({"rule": rule, "error": ""})
        except Invalid as exc:
            out.append({"rule": rule, "error": exc.msg.split(": ", 1)[-1]})
    return out


def _suggested(ingress: dict[str, Any] | None) -> str:
    """``*.site1.<the ingress domain's parent>``: a placeholder, not a value."""
    if ingress is None:
        return "*.site1.example.com"
    labels = str(ingress["domain"]).split(".")
    parent = ".".join(labels[1:]) if len(labels) > 2 else ingress["domain"]
    return f"*.site1.{parent}"


async def _page(ctx: Ctx, state: dict[str, str], status: int = 200, **extra: Any) -> Response:
    ingress, domain, bot = await asyncio.gather(
        _one(ctx, "agent_ingresses", state.get("ingress", "")),
        _one(ctx, "reserved_domains", state.get("domain", "")),
        _one(ctx, "bot_users", state.get("bot", "")))
    check = ctx.request.query_params.get("check", "") if ctx.request.method == "GET" else ""
    ingress_check, domain_check = await asyncio.gather(
        _check(ctx, "agent_ingresses", ingress if check == "ingress" else None),
        _check(ctx, "reserved_domains", domain if check == "domain" else None))
    ingresses, domains, bots = await asyncio.gather(
        _choices(ctx, "agent_ingresses", "ingresses") if ingress is None else _none(),
        _choices(ctx, "reserved_domains", "reserved_domains") if domain is None else _none(),
        _choices(ctx, "bot_users", "bot_users") if bot is None else _none())
    kept = {k: v for k, v in (("ingress", ingress), ("domain", domain), ("bot", bot)) if v}
    state = {k: state[k] for k in kept}
    acl = f"bind:{domain['domain']}" if domain else ""
    values = {"acl": acl, "ingress_domain": "", "wildcard": "", "bot_name": "", "description": "",
              **extra.pop("values", {})}
    return ctx.page("site.html", status, state=state, url=_url, ingress=ingress,
                    domain=domain, bot=bot, ingress_check=ingress_check,
                    domain_check=domain_check, ingresses=ingresses,
                    domains=[d for d in domains if str(d["domain"]).startswith("*.")],
                    bots=bots, suggested=_suggested(ingress), values=values,
                    verdicts=acl_verdicts(values["acl"]), api_tunnel=agentfile.API_TUNNEL,
                    acme=ctx.shared.platform.settings.acme,
                    **{"errors": {}, "made": None, **extra})


async def _none() -> list[dict[str, Any]]:
    return []


async def site(ctx: Ctx) -> Response:
    return await _page(ctx, _state(ctx))


def _placed(answer_error: tuple[str, str, str], field: str) -> dict[str, str]:
    msg, code, _member = answer_error
    return {field: f"{msg} ({code})" if code else msg}


async def _create(ctx: Ctx, collection: str, body: dict[str, Any], field: str,
                  step: str) -> Response:
    state = _state(ctx, ctx.form)
    answer = await ctx.call("POST", f"/{collection}", body=body)
    if answer.status == 403:  # (a role that may not: no form of the page shows it)
        raise api_refusal(answer)
    if not answer.ok:
        return await _page(ctx, state, answer.status, values=ctx.form,
                           errors=_placed(answer.error(), field))
    return redirect(_url({**state, step: answer.body["id"]}) + f"#{step}")


async def new_ingress(ctx: Ctx) -> Response:
    body: dict[str, Any] = {"domain": ctx.form.get("ingress_domain", "").strip()}
    if ctx.form.get("manage") and ctx.shared.platform.settings.acme:
        body["certificate_management_policy"] = POLICY
    return await _create(ctx, "agent_ingresses", body, "ingress_domain", "ingress")


async def new_domain(ctx: Ctx) -> Response:
    body: dict[str, Any] = {"domain": ctx.form.get("wildcard", "").strip()}
    if ctx.form.get("manage") and ctx.shared.platform.settings.acme:
        body["certificate_management_policy"] = POLICY
    return await _create(ctx, "reserved_domains", body, "wildcard", "domain")


async def new_bot(ctx: Ctx) -> Response:
    return await _create(ctx, "bot_users", {"name": ctx.form.get("bot_name", "").strip()},
                         "bot_name", "bot")


async def new_authtoken(ctx: Ctx) -> Response:
    state = _state(ctx, ctx.form)
    if "bot" not in state or "ingress" not in state:
        raise Refusal(400, "Form refused", "An authtoken is made for the chosen bot user "
                      "and agent ingress: choose them first.")
    rules = [r.strip() for r in ctx.form.get("acl", "").splitlines() if r.strip()]
    answer = await ctx.call("POST", "/credentials", body={
        "owner_id": state["bot"], "acl": rules,
        "description": ctx.form.get("description", "").strip()[:255]})
    if answer.status == 403:
        raise api_refusal(answer)
    if not answer.ok:
        return await _page(ctx, state, answer.status, values=ctx.form,
                           errors=_placed(answer.error(), "acl"))
    made = answer.body
    file = await _file(ctx, state, made["token"], agentfile.password())
    return await _page(ctx, state, 201, values=ctx.form, made={
        "id": made["id"], "token": made["token"], "password": file.password,
        "text": file.text(), "start": agentfile.start_command(),
        "file": agentfile.FILE, "ca_file": agentfile.CA_FILE if file.root_cas else ""})


async def _file(ctx: Ctx, state: dict[str, str], token: str, password: str
                ) -> agentfile.AgentFile:
    ingress = await _one(ctx, "agent_ingresses", state.get("ingress", ""))
    if ingress is None:
        raise Refusal(404, "Not found", "The agent ingress of this flow no longer exists.")
    domain = await _one(ctx, "reserved_domains", state.get("domain", ""))
    dial = ctx.shared.agent
    settings = ctx.shared.platform.settings
    issued = ((ingress.get("certificate_management_status") or {}).get("renews_at")
              is not None)
    return agentfile.AgentFile(
        token=token, server_addr=agentfile.server_addr(list(ingress["region_domains"]),
                                                       settings.region, dial.port),
        root_cas=not (dial.public_trust and issued),
        api_domain=agentfile.api_domain(str(domain["domain"])) if domain else "",
        password=password, ingress=str(ingress["domain"]))


async def config(ctx: Ctx) -> Response:
    """The agent config file, from the form on the authtoken's answer."""
    token, password = ctx.form.get("token", "").strip(), ctx.form.get("password", "").strip()
    if not token or not password:
        raise Refusal(400, "Form refused", "The config file is made from the form shown once "
                      "with a new authtoken: create the authtoken again.")
    file = await _file(ctx, _state(ctx, ctx.form), token, password)
    return Response(file.text(), 200, media_type="application/yaml", headers={
        "content-disposition": f'attachment; filename="{agentfile.FILE}"',
        "cache-control": "no-store"})


async def _chains(ctx: Ctx, names: set[str]) -> list[str]:
    """The chains of the certificates the platform issued for ``names``."""
    answer = await ctx.call("GET", "/tls_certificates", [("limit", "100")])
    if not answer.ok:
        return []
    out = []
    for cert in answer.body["tls_certificates"]:
        sans = set((cert.get("subject_alternative_names") or {}).get("dns_names") or [])
        if cert.get("issued_at") and sans & names:
            out.append(str(cert["certificate_pem"]))
    return out


async def ca_file(ctx: Ctx) -> Response:
    """``ca.pem`` for an ingress's agents: the platform CA and the CAs that issued the
    ingress's certificates."""
    ingress = await _one(ctx, "agent_ingresses", ctx.request.query_params.get("ingress", ""))
    names = set(ingress["region_domains"]) if ingress else set()
    pem = agentfile.ca_bundle(ctx.shared.agent.ca_pem, await _chains(ctx, names))
    return Response(pem, 200, media_type="application/x-pem-file", headers={
        "content-disposition": f'attachment; filename="{agentfile.CA_FILE}"',
        "cache-control": "no-store"})


async def acl(ctx: Ctx) -> Response:
    """The ACL's verdicts, rule by rule (htmx, as it is typed)."""
    return ctx.page("_acl.html", verdicts=acl_verdicts(ctx.form.get("acl", "")))


def routes() -> list[tuple[str, str, Handler, bool]]:
    return [("/site", "GET", site, False), ("/site/ingress", "POST", new_ingress, False),
            ("/site/domain", "POST", new_domain, False), ("/site/bot", "POST", new_bot, False),
            ("/site/authtoken", "POST", new_authtoken, False),
            ("/site/acl", "POST", acl, False), ("/site/config", "POST", config, False),
            ("/site/ca.pem", "GET", ca_file, False)]
