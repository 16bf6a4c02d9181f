"""What the OAuth providers' user documents say about who logged in, sans I/O: the e-mail the
e-mail rules check is one the provider verified."""

from __future__ import annotations

from edgeway.edge.login.providers import PROVIDERS


def test_a_microsoft_users_e_mail_is_the_principal_name_never_graphs_mail() -> None:
    """Graph's ``mail`` is whatever the user's tenant set; the common endpoints take every
    tenant, so it cannot be what an e-mail rule trusts ("nOAuth")."""
    parse = PROVIDERS["enterprise_a"].parse
    eve = parse({"id": "1", "mail": "ceo@victim.example", "displayName": "Eve",
                 "userPrincipalName": "eve@attacker.onmicrosoft.com"})
    assert (eve.email, eve.username, eve.name) == (
        "eve@attacker.onmicrosoft.com", "eve@attacker.onmicrosoft.com", "Eve")
    guest = parse({"id": "2", "mail": "ceo@victim.example",
                   "userPrincipalName": "ceo_victim.example#EXT#@host.onmicrosoft.com"})
    assert guest.email == ""


def test_openid_providers_give_no_e_mail_they_did_not_verify() -> None:
    for name in ("search_a", "professional_net"):
        parse = PROVIDERS[name].parse
        assert parse({"sub": "1", "email": "a@corp.example"}).email == "a@corp.example"
        assert parse({"sub": "1", "email": "a@corp.example",
                      "email_verified": True}).email == "a@corp.example"
        assert parse({"sub": "1", "email": "a@corp.example",
                      "email_verified": False}).email == ""
