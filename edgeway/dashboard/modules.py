"""The modules of an edge or a route as forms of their own, on its page: one per module the
kind carries, its inputs from the module's request shape (the members its ``PUT`` takes), filled
from the module as the API shows it (ids for the Refs it shows, ``********`` for a secret:
sent back, it keeps the stored one). Save is the module's ``PUT`` (the form is the whole
module, as the API replaces it), Remove its ``DELETE``; the API's message shows next to the
input its member names. The traffic policy's document gets a code editor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from edgeway.api.modules import ATTACHED
from edgeway.catalog.model import Kind
from edgeway.catalog.modules import REGISTRY
from edgeway.dashboard import forms

CODE = {("traffic_policy", "value")}  # (members edited as code)


@dataclass(frozen=True)
class ModuleForm:
    name: str
    doc: str
    widgets: list[forms.Widget]
    values: dict[str, str]
    set: bool  # configured (not null)
    enabled: bool
    errors: dict[str, str]
    form_error: str = ""

    @property
    def label(self) -> str:
        return self.name.replace("_", " ")


def names(kind: Kind) -> list[str]:
    """The modules ``kind`` carries, in the catalog's order (none: not an edge or route)."""
    if kind.collection not in ATTACHED:
        return []
    return [f.name for f in kind.fields if f.name in REGISTRY]


def widgets(kind: Kind, name: str) -> list[forms.Widget]:
    shape = REGISTRY[name].request_for(ATTACHED[kind.collection])
    out = []
    for f in msgspec.structs.fields(shape):
        w = forms.widget_for(f.name, f.type, "", f.required)
        if (name, f.name) in CODE:
            w = forms.Widget(w.name, "code", w.doc, w.required)
        out.append(w)
    return out


def _plural(stem: str) -> str:
    return stem[:-1] + "ies" if stem.endswith("y") else stem + "s"


def request_values(shown: dict[str, Any], ws: list[forms.Widget]) -> dict[str, Any]:
    """The module as its ``PUT`` takes it, from the module as the API shows it: a member of
    ids (``ip_policy_ids``) from the Refs shown in its place (``ip_policies``)."""
    out: dict[str, Any] = {}
    for w in ws:
        if w.name in shown:
            out[w.name] = shown[w.name]
        elif w.name.endswith("_ids") and isinstance(shown.get(_plural(w.name[:-4])), list):
            out[w.name] = [r["id"] for r in shown[_plural(w.name[:-4])] if isinstance(r, dict)]
        elif w.name.endswith("_id") and isinstance(shown.get(w.name[:-3]), dict):
            out[w.name] = shown[w.name[:-3]].get("id")
    return out


def texts(ws: list[forms.Widget], values: dict[str, Any]) -> dict[str, str]:
    return {w.name: forms.text_of(w, values.get(w.name)) for w in ws}


def of(kind: Kind, item: dict[str, Any], failed: dict[str, Any] | None = None
       ) -> list[ModuleForm]:
    """The forms of the modules of ``item`` (``failed``: the one whose save was refused, with
    what was sent and the errors)."""
    out = []
    for name in names(kind):
        ws = widgets(kind, name)
        shown = item.get(name)
        if failed is not None and failed["name"] == name:
            out.append(ModuleForm(name, REGISTRY[name].doc, ws, failed["values"],
                                  shown is not None, bool((shown or {}).get("enabled", True)),
                                  failed["errors"], failed["form_error"]))
            continue
        values = texts(ws, request_values(shown, ws)) if isinstance(shown, dict) else {}
        out.append(ModuleForm(name, REGISTRY[name].doc, ws, values, shown is not None,
                              bool((shown or {}).get("enabled", True)), {}))
    return out


def body(form: dict[str, str], ws: list[forms.Widget]) -> tuple[dict[str, Any], dict[str, str]]:
    """The ``PUT`` body of a module's form, and the inputs that could not be read."""
    return forms.body_of(form, ws)


def placed(member: str, name: str) -> str:
    """The input an API error's member names in module ``name``'s form ("": none of them)."""
    return forms.input_of(member.removeprefix(f"{name}."))
