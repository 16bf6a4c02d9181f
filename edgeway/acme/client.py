"""The ACME conversation of one certificate order, with the maintained ``acme`` package
(blocking: the manager runs each step in a thread): the account (an ES256 key, registered
once and shared by all nodes through the store), the order, the challenges, finalization.

Challenges: http-01 for plain names the CA reaches through the public HTTP listener; dns-01
for wildcards and for names inside the platform's own zones, whose TXT records the built-in
DNS serves (``challenge`` says where). The caller stores each answer before ``answer`` tells
the CA to validate.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar, cast

from acme import challenges, client, crypto_util, errors, messages
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from josepy.jwa import ES256
from josepy.jwk import JWKEC

T = TypeVar("T")
USER_AGENT = "edgeway"
# ACME calls block on the network: their own few threads, so that a slow or unreachable CA
# never holds the threads the rest of the server uses (asyncio.to_thread's)
_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="acme")


async def call(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on one of the ACME threads."""
    return await asyncio.get_running_loop().run_in_executor(_POOL, fn, *args)


@dataclass(frozen=True)
class Challenge:
    name: str  # the identifier (``*.x`` for a wildcard)
    kind: str  # http-01 or dns-01
    key: str  # where the answer is served: ``http:<token>`` or ``dns:<record name>``
    value: str  # the key authorization (http-01) or the TXT value (dns-01)
    body: messages.ChallengeBody


class AcmeFailure(Exception):
    """The CA refused or failed: ``code`` is DNS_ERROR (the user's DNS must change) or
    INTERNAL_ERROR (temporary)."""

    def __init__(self, code: str, msg: str, account_gone: bool = False) -> None:
        super().__init__(msg)
        self.code, self.msg, self.account_gone = code, msg, account_gone


def new_account_key() -> str:
    key = JWKEC(key=ec.generate_private_key(ec.SECP256R1()))
    return json.dumps(key.to_json())


def private_key(kind: str) -> bytes:
    key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey = (
        ec.generate_private_key(ec.SECP256R1()) if kind == "ecdsa"
        else rsa.generate_private_key(65537, 2048))
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


DNS_PROBLEMS = ("dns", "connection", "unauthorized", "incorrectResponse", "caa",
                "rejectedIdentifier", "tls")


def _problem(err: messages.Error | None, name: str) -> AcmeFailure:
    if err is None:
        return AcmeFailure("INTERNAL_ERROR", f"the CA did not validate {name}")
    kind = str(err.typ or "").rsplit(":", 1)[-1]
    code = "DNS_ERROR" if kind in DNS_PROBLEMS else "INTERNAL_ERROR"
    return AcmeFailure(code, f"the CA could not validate {name}: {err.detail or kind}")


class Acme:
    def __init__(self, directory: str, account_key: str, ca_bundle: Path | None) -> None:
        self.key = JWKEC.json_loads(account_key)
        self.net = client.ClientNetwork(self.key, alg=ES256, user_agent=USER_AGENT)
        if ca_bundle is not None:  # (handed to requests' ``verify``)
            self.net.verify_ssl = cast(bool, str(ca_bundle))
        self.directory_url = directory
        self.client: client.ClientV2 | None = None

    def connect(self, account_uri: str | None, email: str) -> str:
        """The account's URI, registering it first when there is none."""
        directory = client.ClientV2.get_directory(self.directory_url, self.net)
        self.client = client.ClientV2(directory, self.net)
        if account_uri:
            self.net.account = messages.RegistrationResource(body=messages.Registration(),
                                                             uri=account_uri)
            return account_uri
        reg = messages.NewRegistration.from_data(email=email or None,
                                                 terms_of_service_agreed=True)
        try:
            regr = self.client.new_account(reg)
        except errors.ConflictError as exc:  # the key has an account already
            regr = messages.RegistrationResource(body=messages.Registration(),
                                                 uri=exc.location)
            self.net.account = regr
        return str(regr.uri)

    def order(self, names: list[str], key_pem: bytes) -> messages.OrderResource:
        assert self.client is not None
        try:
            return self.client.new_order(crypto_util.make_csr(key_pem, names))
        except messages.Error as err:
            gone = str(err.typ or "").endswith(":accountDoesNotExist")
            raise AcmeFailure("INTERNAL_ERROR", f"the CA refused the order: "
                              f"{err.detail or err.typ}", account_gone=gone) from None

    def challenges(self, order: messages.OrderResource,
                   dns_name: Any) -> list[Challenge]:
        """What each pending authorization asks for; ``dns_name(identifier)`` is where the
        dns-01 TXT record is served, or None when http-01 must be used."""
        out = []
        for authz in order.authorizations:
            if authz.body.status == messages.STATUS_VALID:
                continue
            name = ("*." if authz.body.wildcard else "") + authz.body.identifier.value
            record = dns_name(name)
            want = challenges.DNS01 if record else challenges.HTTP01
            body = next((c for c in authz.body.challenges if isinstance(c.chall, want)), None)
            if body is None:
                raise AcmeFailure("INTERNAL_ERROR", f"the CA offers no {want.typ} "
                                  f"challenge for {name}")
            if record:
                out.append(Challenge(name, "dns-01", f"dns:{record}",
                                     body.chall.validation(self.key), body))
            else:
                token = body.chall.encode("token")
                out.append(Challenge(name, "http-01", f"http:{token}",
                                     body.chall.validation(self.key), body))
        return out

    def answer(self, challenge: Challenge) -> None:
        assert self.client is not None
        self.client.answer_challenge(challenge.body, challenge.body.chall.response(self.key))

    def finish(self, order: messages.OrderResource, deadline: datetime) -> str:
        """The full chain (PEM) once the CA validated every name."""
        assert self.client is not None
        try:
            done = self.client.poll_and_finalize(order, deadline)
        except errors.ValidationError as exc:
            for authz in exc.failed_authzrs:
                name = authz.body.identifier.value
                failed = [c.error for c in authz.body.challenges if c.error is not None]
                raise _problem(failed[0] if failed else None, name) from None
            raise AcmeFailure("INTERNAL_ERROR", "the CA did not validate the names") \
                from None
        except errors.TimeoutError:
            raise AcmeFailure("INTERNAL_ERROR", "the CA did not finish the order in time") \
                from None
        return str(done.fullchain_pem)
