"""One resource's page: every member as the API shows it, the edit form (the members an
update may change, as the kind's PATCH takes them: only those changed are sent), and for
reserved domains and agent ingresses, the DNS check of the records to create (``Check
status``: each record ok, missing or wrong, with what was expected and what was found)."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from edgeway.dashboard import forms
from edgeway.dashboard.nav import Entry
from edgeway.dashboard.resources import entry_of
from edgeway.dashboard.web import PREFIX, Ctx, Handler, api_refusal, redirect

CHECKED = ("reserved_domains", "agent_ingresses")


async def _page(ctx: Ctx, entry: Entry, status: int = 200, **extra: Any) -> Response:
    kind, id_ = entry.kind, ctx.params["id"]
    answer = await ctx.call("GET", f"{kind.url}/{id_}")
    if not answer.ok:
        raise api_refusal(answer)
    item = answer.body
    widgets = forms.update_widgets(kind) \
        if "update" in kind.ops and ctx.can("PATCH", f"{kind.url}/x") else []
    current = {w.name: forms.text_of(w, forms.stored(kind, w.name, item)) for w in widgets}
    check = None
    if kind.collection in CHECKED and ctx.request.query_params.get("check") == "dns":
        found = await ctx.call("GET", f"{kind.url}/{id_}/dns_check")
        check = found.body if found.ok else {"error": "{} ({})".format(*found.error()[:2])}
    notice = "Saved." if "updated" in ctx.request.query_params else ""
    return ctx.page("show.html", status, entry=entry, item=item, widgets=widgets,
                    notice=notice, checkable=kind.collection in CHECKED, check=check,
                    can_delete="delete" in kind.ops and ctx.can("DELETE", f"{kind.url}/x"),
                    **{"values": current, "errors": {}, "form_error": "", **extra})


async def show(ctx: Ctx) -> Response:
    return await _page(ctx, entry_of(ctx))


async def update(ctx: Ctx) -> Response:
    entry = entry_of(ctx)
    kind, id_ = entry.kind, ctx.params["id"]
    answer = await ctx.call("GET", f"{kind.url}/{id_}")
    if not answer.ok:
        raise api_refusal(answer)
    widgets = forms.update_widgets(kind)
    current = {w.name: forms.text_of(w, forms.stored(kind, w.name, answer.body))
               for w in widgets}
    body, errors = forms.changes(ctx.form, widgets, current)
    if errors:
        return await _page(ctx, entry, 400, values=ctx.form, errors=errors)
    if body:
        answer = await ctx.call("PATCH", f"{kind.url}/{id_}", body=body)
        if not answer.ok:
            msg, code, member = answer.error()
            text = f"{msg} ({code})" if code else msg
            field = forms.input_of(member)
            if field in {w.name for w in widgets}:
                return await _page(ctx, entry, answer.status, values=ctx.form,
                                   errors={field: text})
            return await _page(ctx, entry, answer.status, values=ctx.form, form_error=text)
    return redirect(f"{PREFIX}/{entry.slug}/{id_}?updated=1")


def routes() -> list[tuple[str, str, Handler, bool]]:
    return [("/{slug}/{id}", "GET", show, False), ("/{slug}/{id}", "POST", update, False)]
