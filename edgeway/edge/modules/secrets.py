"""Vault secrets in traffic policies: ``secrets.get("<vault>", "<secret>")`` in a CEL
expression or a ``${...}`` interpolation is replaced, when the policy is compiled, by the
secret's value as a CEL string literal. The values come unsealed with the routing snapshot
(``load``), so requests never read the store nor unseal anything. A policy naming a secret
that does not exist is not run (``Missing``: its traffic is refused, naming the secret)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from edgeway import catalog
from edgeway.catalog.vaults import SEAL_CONTEXT
from edgeway.pki.seal import Sealer
from edgeway.store.repo import Repo

Secrets = Mapping[tuple[str, str], str]  # (vault name, secret name) -> value
_LITERAL = r"""("(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')"""
_CALL = re.compile(r"secrets\s*\.\s*get\s*\(\s*" + _LITERAL + r"\s*,\s*" + _LITERAL + r"\s*\)")
_ANY_CALL = re.compile(r"secrets\s*\.\s*get\b")
_INTERPOLATION = re.compile(r"\$\{(.*?)\}")


class Missing(Exception):
    """A policy names a secret that does not exist."""


def _unquote(literal: str) -> str:
    return re.sub(r"\\(.)", r"\1", literal[1:-1])


def _strings(expr: str) -> list[tuple[int, int]]:
    """Where the string literals of a CEL expression are (``secrets.get`` inside one is
    text, not a call)."""
    spans, i = [], 0
    while i < len(expr):
        quote = expr[i]
        if quote not in "\"'":
            i += 1
            continue
        width = 3 if expr.startswith(quote * 3, i) else 1
        j = i + width
        while j < len(expr) and not expr.startswith(quote * width, j):
            j += 2 if expr[j] == "\\" else 1
        spans.append((i, j + width))
        i = j + width
    return spans


def in_expression(expr: str, secrets: Secrets) -> str:
    """``expr`` with each ``secrets.get`` call replaced by the secret's value."""
    if "secrets" not in expr:
        return expr
    out, last, quoted = [], 0, _strings(expr)
    for m in _CALL.finditer(expr):
        if any(a <= m.start() < b for a, b in quoted):
            continue
        key = (_unquote(m[1]), _unquote(m[2]))
        if key not in secrets:
            raise Missing(f"the secret '{key[1]}' of the vault '{key[0]}' does not exist")
        out += [expr[last:m.start()], json.dumps(secrets[key], ensure_ascii=False)]
        last = m.end()
    done = "".join(out) + expr[last:]
    quoted = _strings(done)
    if any(not any(a <= m.start() < b for a, b in quoted) for m in _ANY_CALL.finditer(done)):
        raise Missing("secrets.get takes the vault's and the secret's names as string "
                      "literals")
    return done


def in_config(value: Any, secrets: Secrets) -> Any:
    """An action's config with the ``secrets.get`` calls of its interpolations replaced."""
    if isinstance(value, str):
        return _INTERPOLATION.sub(lambda m: "${" + in_expression(m[1], secrets) + "}", value)
    if isinstance(value, dict):
        return {k: in_config(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [in_config(v, secrets) for v in value]
    return value


async def load(repo: Repo, sealer: Sealer | None) -> dict[tuple[str, str], str]:
    """Every secret, unsealed, by its vault's (current) name and its own."""
    if sealer is None:
        return {}
    vaults = {id_: str(doc.get("name", "")) for id_, doc in
              await repo.all_docs(catalog.BY_COLLECTION["vaults"])}
    out = {}
    for _id, doc in await repo.all_docs(catalog.BY_COLLECTION["vault_secrets"]):
        vault = vaults.get(str(doc.get("vault_id", "")))
        if vault is not None:
            out[(vault, str(doc.get("name", "")))] = sealer.open(
                str(doc.get("value", "")), SEAL_CONTEXT).decode()
    return out
