"""Forms from the catalog's fields, and a submitted form back to an operation's JSON body.

Each member a create accepts gets an input by its declared type: a line of text, a text
area for certificates and documents, a choice for booleans and enumerations (with "default"
first: a member left out takes the API's default), a number, one item per line for a list
of strings, one ``name: value`` per line for a mapping of strings (headers), and JSON for
anything nested. An empty input is left out of the body. Values
are converted only as far as their input promises; a number that is not one goes to the
API as written, so that the API's own message names what is wrong. Only JSON that does not
parse is refused here, next to its input.
"""

from __future__ import annotations

import json
import types
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import msgspec

from edgeway.catalog.model import Field, Kind

LONG_TEXT = frozenset({"public_key", "idp_metadata", "value", "body", "policy"})


def long_text(name: str) -> bool:
    """A member holding a document (a PEM, a key, a body) rather than a line."""
    return name in LONG_TEXT or name.endswith("_pem")


@dataclass(frozen=True)
class Widget:
    name: str
    kind: str  # text, area, choice, number, lines, pairs (name: value lines), json
    doc: str
    required: bool
    choices: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return self.name.replace("_", " ")


def _bare(typ: Any) -> Any:
    """``typ`` without ``| None`` (or msgspec's unset) and its constraints (``Annotated``)."""
    if get_origin(typ) is Annotated:
        return _bare(get_args(typ)[0])
    if get_origin(typ) in (Union, types.UnionType):
        rest = [a for a in get_args(typ) if a not in (type(None), msgspec.UnsetType)]
        return _bare(rest[0]) if len(rest) == 1 else typ
    return typ


def widget(f: Field) -> Widget:
    return widget_for(f.name, f.type, f.doc, f.create == "required")


def widget_for(name: str, typ: Any, doc: str, required: bool) -> Widget:
    """The input of a member ``name`` of type ``typ``."""
    typ = _bare(typ)
    if typ is bool:
        return Widget(name, "choice", doc, required, ("true", "false"))
    if get_origin(typ) is Literal:
        return Widget(name, "choice", doc, required, tuple(str(a) for a in get_args(typ)))
    if typ in (int, float):
        return Widget(name, "number", doc, required)
    if typ is str:
        return Widget(name, "area" if long_text(name) else "text", doc, required)
    if get_origin(typ) is list and get_args(typ) == (str,):
        return Widget(name, "lines", doc, required)
    if get_origin(typ) is dict and get_args(typ) == (str, str):
        return Widget(name, "pairs", doc, required)
    return Widget(name, "json", doc, required)


def create_widgets(kind: Kind) -> list[Widget]:
    """The inputs of a kind's create form: the members a create accepts, required first."""
    fields = [f for f in kind.fields if f.create != "no"]
    fields.sort(key=lambda f: f.create != "required")
    return [widget(f) for f in fields]


def update_widgets(kind: Kind) -> list[Widget]:
    """The inputs of a kind's edit form: the members an update may change."""
    return [widget(f) for f in kind.fields if f.update and not f.immutable]


def stored(kind: Kind, name: str, shown: dict[str, Any]) -> Any:
    """A member's value as its input takes it, from the resource as the API shows it (a
    member holding ids is shown as Refs under another name)."""
    f = kind.field(name)
    if f.link is not None and f.link.render_as:
        refs = shown.get(f.link.render_as)
        if isinstance(refs, list):
            return [r["id"] for r in refs if isinstance(r, dict)]
        return refs.get("id") if isinstance(refs, dict) else None
    return shown.get(name)


def text_of(w: Widget, value: Any) -> str:
    """What input ``w`` shows for ``value``."""
    if value is None:
        return ""
    if w.kind == "choice":
        return ("true" if value else "false") if isinstance(value, bool) else str(value)
    if w.kind == "lines":
        return "\n".join(str(v) for v in value)
    if w.kind == "pairs" and isinstance(value, dict):
        return "\n".join(f"{k}: {v}" for k, v in value.items())
    if w.kind == "json":
        return json.dumps(value, indent=2)
    return str(value)


def changes(form: dict[str, str], widgets: list[Widget], current: dict[str, str]
            ) -> tuple[dict[str, Any], dict[str, str]]:
    """The PATCH body of an edit form: only the inputs changed from ``current`` (their
    texts as shown); an input emptied sends the empty value (a text, a list)."""
    changed = [w for w in widgets if form.get(w.name, "").strip() !=
               current.get(w.name, "").strip()]
    body, errors = body_of(form, changed)
    for w in changed:
        if not form.get(w.name, "").strip() and w.kind in ("text", "area", "lines", "pairs"):
            body[w.name] = {"lines": [], "pairs": {}}.get(w.kind, "")
    return body, errors


def _number(text: str) -> Any:
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            continue
    return text  # (the API says what is wrong with it)


def body_of(form: dict[str, str], widgets: list[Widget]) -> tuple[dict[str, Any], dict[str, str]]:
    """The JSON body a form asks for, and the inputs that could not be read (name -> why)."""
    body: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for w in widgets:
        text = form.get(w.name, "")
        if not text.strip():
            continue
        if w.kind == "choice" and w.choices == ("true", "false"):
            body[w.name] = text == "true"
        elif w.kind == "number":
            body[w.name] = _number(text.strip())
        elif w.kind == "lines":
            body[w.name] = [line.strip() for line in text.splitlines() if line.strip()]
        elif w.kind == "pairs":
            body[w.name], bad = _pairs(text)
            if bad:
                errors[w.name] = f"line '{bad}' is not 'name: value'"
        elif w.kind == "json":
            try:
                body[w.name] = json.loads(text)
            except ValueError as exc:
                errors[w.name] = f"is not valid JSON: {exc}"
        else:
            body[w.name] = text
    return body, errors


def _pairs(text: str) -> tuple[dict[str, str], str]:
    """``name: value`` lines as a mapping, and the first line that is not one ("")."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        name, colon, value = line.partition(":")
        if not colon or not name.strip():
            return out, line.strip()
        out[name.strip()] = value.strip()
    return out, ""


def input_of(member: str) -> str:
    """The input an API error's member belongs to: ``acl[0]`` and ``target.auth`` are
    ``acl`` and ``target``."""
    return member.split(".", 1)[0].split("[", 1)[0]
