"""An event destination's delivery on its page: its dead letters (the newest ``SHOWN``, each
with its event, error and attempts) with **Send again**, and **Send a test event** (the
API's ``verify``: a real event to the target, its answer shown). Both go through the API's
own operations; a key that may not call them sees no button."""

from __future__ import annotations

from typing import Any

from edgeway.dashboard.web import Ctx, api_refusal

SHOWN = 20
COLLECTION = "event_destinations"


async def section(ctx: Ctx, api: str) -> dict[str, Any]:
    """What the destination's page shows of its delivery."""
    answer = await ctx.call("GET", f"{api}/dead_letters", [("limit", str(SHOWN))])
    body = answer.body if answer.ok else {}
    return {"dead_letters": body.get("dead_letters", []),
            "more_dead": bool(body.get("next_page_uri")),
            "can_verify": ctx.can("POST", f"{api}/verify"),
            "can_resend": ctx.can("POST", f"{api}/dead_letters/resend")}


async def test_event(ctx: Ctx, api: str) -> str:
    """Send a test event; what the target answered, as the page's notice."""
    answer = await ctx.call("POST", f"{api}/verify", body={})
    if not answer.ok:
        raise api_refusal(answer)
    got = answer.body
    said = "delivered" if got.get("delivered") else "not delivered"
    return (f"Test event {got.get('event_id', '')} {said} to {got.get('target', '')} in "
            f"{got.get('ms', '')} ms: {str(got.get('answer', ''))[:500]}")


async def send_again(ctx: Ctx, api: str) -> str:
    """Queue every dead letter again; how many, as the page's notice."""
    answer = await ctx.call("POST", f"{api}/dead_letters/resend", body={})
    if not answer.ok:
        raise api_refusal(answer)
    count = int(answer.body.get("resent") or 0)
    return f"{count} dead letter{'s' if count != 1 else ''} queued to be sent again."
