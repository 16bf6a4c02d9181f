"""One resource's page: every member as the API shows it, the edit form (the members an
update may change, as the kind's PATCH takes them: only those changed are sent), and for
reserved domains and agent ingresses, the DNS check of the records to create (``Check
status``: each record ok, missing or wrong, with what was expected and what was found).

An edge or a route shows each of its modules as a form of its own (``modules``: Save is the
module's ``PUT``, Remove its ``DELETE``), and what serves it (``behind``: its backend down to
the live tunnels).

A kind with children (an HTTPS edge's routes, ``Kind.children``) lists them on its page
with their create form; a child has a page of its own under its parent's
(``/dashboard/edges_https/<edge>/routes/<route>``), with the same edit form and delete.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.responses import Response

from edgeway import catalog, ids
from edgeway.catalog.model import Child, Kind
from edgeway.dashboard import behind, delivery, forms, modules
from edgeway.dashboard.nav import BY_SLUG
from edgeway.dashboard.resources import cell, columns, entry_of
from edgeway.dashboard.web import PREFIX, Ctx, Handler, Refusal, api_refusal, redirect

CHECKED = ("reserved_domains", "agent_ingresses")


@dataclass(frozen=True)
class Target:
    """A resource the page is about: its kind, its operation's path, its page's path, and
    the page above it (label, path)."""
    kind: Kind
    api: str
    page: str
    up: tuple[str, str]


def _child(parent: Kind, member: str) -> tuple[Child, Kind]:
    for child in parent.children:
        if child.member == member:
            return child, catalog.BY_COLLECTION[child.collection]
    raise Refusal(404, "Not found", f"{parent.title} has no {member}.")


def target(ctx: Ctx, slug: str = "") -> Target:
    entry = BY_SLUG[slug] if slug else entry_of(ctx)
    id_ = ctx.params["id"]
    top = Target(entry.kind, f"{entry.kind.url}/{id_}", f"{PREFIX}/{entry.slug}/{id_}",
                 (entry.label, f"{PREFIX}/{entry.slug}"))
    if "cid" not in ctx.params:  # (the parent's page, or a child's create)
        return top
    child, kind = _child(entry.kind, ctx.params["child"])
    url = kind.url.format(**{child.via: id_})
    return Target(kind, f"{url}/{ctx.params['cid']}", f"{top.page}/{child.member}/"
                  f"{ctx.params['cid']}", (id_, top.page))


def _values(kind: Kind, widgets: list[forms.Widget], item: dict[str, Any]) -> dict[str, str]:
    return {w.name: forms.text_of(w, forms.stored(kind, w.name, item)) for w in widgets}


async def _page(ctx: Ctx, t: Target, status: int = 200, **extra: Any) -> Response:
    answer = await ctx.call("GET", t.api)
    if not answer.ok:
        raise api_refusal(answer)
    item = answer.body
    fixed = t.kind.fixed(item) if t.kind.fixed is not None else ""  # (read-only: say why)
    widgets = _edit_widgets(t.kind) if "update" in t.kind.ops and ctx.can("PATCH", t.api) \
        and not fixed else []
    module_forms = modules.of(t.kind, item, extra.pop("failed", None)) \
        if ctx.can("PUT", f"{t.api}/module") else []
    check = None
    if t.kind.collection in CHECKED and ctx.request.query_params.get("check") == "dns":
        found = await ctx.call("GET", f"{t.api}/dns_check")
        check = found.body if found.ok else {"error": "{} ({})".format(*found.error()[:2])}
    children = []
    for c in t.kind.children:
        kind = catalog.BY_COLLECTION[c.collection]
        offered = "create" in kind.ops and ctx.can("POST", kind.url.format(**{c.via: "x"}))
        children.append({"member": c.member, "rows": item.get(c.member) or [],
                         "columns": columns(kind), "cell": cell,
                         "widgets": forms.create_widgets(kind) if offered else []})
    params = ctx.request.query_params
    module = params.get("module", "")
    done = "saved" if "saved" in params else "removed" if "removed" in params else ""
    notice = extra.pop("notice", "") or (
        f"{done.capitalize()} the {module} module." if done and module in modules.names(t.kind)
        else "Saved." if "updated" in params else
                                         f"Deleted {params['deleted']}."
                                         if ids.split_id(params.get("deleted", "")) else "")
    sent = await delivery.section(ctx, t.api) \
        if t.kind.collection == delivery.COLLECTION else None
    served_by = await behind.of(ctx, item) if modules.names(t.kind) else None
    return ctx.page("show.html", status, t=t, item=item, widgets=widgets, notice=notice,
                    delivery=sent, modules=module_forms, behind=served_by,
                    checkable=t.kind.collection in CHECKED, check=check, children=children,
                    can_delete="delete" in t.kind.ops and ctx.can("DELETE", t.api)
                    and not fixed, fixed=fixed,
                    **{"values": _values(t.kind, widgets, item), "errors": {},
                       "form_error": "", "child_errors": {}, **extra})


def _edit_widgets(kind: Kind) -> list[forms.Widget]:
    """The edit form's inputs: the members an update may change, modules left to their own
    forms."""
    own = set(modules.names(kind))
    return [w for w in forms.update_widgets(kind) if w.name not in own]


async def show(ctx: Ctx) -> Response:
    return await _page(ctx, target(ctx))


def _placed(answer_error: tuple[str, str, str], names: set[str]) -> dict[str, Any]:
    """An API error as the form shows it: next to the input its member names, or above."""
    msg, code, member = answer_error
    text = f"{msg} ({code})" if code else msg
    field = forms.input_of(member)
    return {"errors": {field: text}} if field in names else {"form_error": text}


async def update(ctx: Ctx) -> Response:
    t = target(ctx)
    answer = await ctx.call("GET", t.api)
    if not answer.ok:
        raise api_refusal(answer)
    widgets = _edit_widgets(t.kind)
    body, errors = forms.changes(ctx.form, widgets, _values(t.kind, widgets, answer.body))
    if errors:
        return await _page(ctx, t, 400, values=ctx.form, errors=errors)
    if body:
        answer = await ctx.call("PATCH", t.api, body=body)
        if not answer.ok:
            return await _page(ctx, t, answer.status, values=ctx.form,
                               **_placed(answer.error(), {w.name for w in widgets}))
    return redirect(f"{t.page}?updated=1")


async def delete(ctx: Ctx) -> Response:
    t = target(ctx)
    answer = await ctx.call("DELETE", t.api)
    if not answer.ok:
        raise api_refusal(answer)
    return redirect(t.up[1] + f"?deleted={t.api.rsplit('/', 1)[1]}")


async def create_child(ctx: Ctx) -> Response:
    t = target(ctx)
    child, kind = _child(t.kind, ctx.params["child"])
    widgets = forms.create_widgets(kind)
    body, errors = forms.body_of(ctx.form, widgets)
    status, placed = 400, {"errors": errors}
    if not errors:
        answer = await ctx.call("POST", kind.url.format(**{child.via: ctx.params["id"]}),
                                body=body)
        if answer.ok:
            return redirect(f"{t.page}/{child.member}/{answer.body['id']}")
        status, placed = answer.status, _placed(answer.error(), {w.name for w in widgets})
    return await _page(ctx, t, status, child_errors={
        "member": child.member, "values": ctx.form, "errors": placed.get("errors", {}),
        "form_error": placed.get("form_error", "")})


def _module(ctx: Ctx, t: Target) -> str:
    name = ctx.params["module"]
    if name not in modules.names(t.kind):
        raise Refusal(404, "Not found", f"{t.kind.title} has no module '{name}'.")
    return name


async def save_module(ctx: Ctx) -> Response:
    """The module's ``PUT``, with its form as the whole module."""
    t = target(ctx)
    name = _module(ctx, t)
    ws = modules.widgets(t.kind, name)
    body, errors = modules.body(ctx.form, ws)
    status, form_error = 400, ""
    if not errors:
        answer = await ctx.call("PUT", f"{t.api}/{name}", body=body)
        if answer.ok:
            return redirect(f"{t.page}?module={name}&saved=1")
        if answer.status in (403, 404):
            raise api_refusal(answer)
        msg, code, member = answer.error()
        text = f"{msg} ({code})" if code else msg
        field = modules.placed(member, name)
        status = answer.status
        if field in {w.name for w in ws}:
            errors = {field: text}
        else:
            form_error = text
    return await _page(ctx, t, status, failed={"name": name, "values": ctx.form,
                                               "errors": errors, "form_error": form_error})


async def remove_module(ctx: Ctx) -> Response:
    t = target(ctx)
    name = _module(ctx, t)
    answer = await ctx.call("DELETE", f"{t.api}/{name}")
    if not answer.ok:
        raise api_refusal(answer)
    return redirect(f"{t.page}?module={name}&removed=1")


async def test_event(ctx: Ctx) -> Response:
    t = target(ctx, delivery.COLLECTION)
    return await _page(ctx, t, notice=await delivery.test_event(ctx, t.api))


async def send_again(ctx: Ctx) -> Response:
    t = target(ctx, delivery.COLLECTION)
    return await _page(ctx, t, notice=await delivery.send_again(ctx, t.api))


def routes() -> list[tuple[str, str, Handler, bool]]:
    one, child = "/{slug}/{id}", "/{slug}/{id}/{child}/{cid}"
    dest = f"/{delivery.COLLECTION}/{{id}}"
    return [(f"{dest}/verify", "POST", test_event, False),
            (f"{dest}/dead_letters/resend", "POST", send_again, False),
            (one, "GET", show, False), (one, "POST", update, False),
            ("/{slug}/{id}/{child}", "POST", create_child, False),
            (child, "GET", show, False), (child, "POST", update, False),
            (child + "/delete", "POST", delete, False),
            *[(f"{page}/modules/{{module}}{end}", "POST", handler, False)
              for page in (one, child)
              for end, handler in (("", save_module), ("/delete", remove_module))]]
