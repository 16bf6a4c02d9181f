"""The SAML login flow (the ``saml`` module), with python3-saml (XML signatures by xmlsec;
nothing here reads a signature itself). The route's service provider lives on its own host
at ``/.edgeway/saml/<route id>`` (``catalog/modules/saml.py`` renders the same URLs):

- that path serves the SP metadata, signed with the route's key;
- a request without a session on another host of the edge goes to that host first; there
  the browser is sent to the IdP's single sign-on service with a signed AuthnRequest
  (HTTP-Redirect; ``ForceAuthn`` and the NameID format as configured). The login's state (the
  request id and where to return) is a signed cookie of its own, ``SameSite=None`` so that it
  comes along with the IdP's cross-site POST; the RelayState names it;
- ``/acs`` takes the IdP's POSTed response: python3-saml checks the response's and the
  assertion's signatures against the IdP metadata's certificate (the assertion must be
  signed), issuer, destination, recipient, time conditions and the InResponseTo of our
  request; the edge also requires an audience restriction naming this SP, the configured
  NameID format, an assertion id never used before (remembered in the database until the
  assertion expires) and, with ``authorized_groups``, a group among them. A response that
  answers no request of ours is an IdP-initiated login: refused unless
  ``allow_idp_initiated``, its RelayState being the target;
- ``/slo`` takes the IdP's signed LogoutRequest (that user's sessions of the route end, on
  every node) or its answer to ours (``/.edgeway/saml/logout`` ends the session and, when the
  IdP has a single logout service, logs out there too).
"""

from __future__ import annotations

import secrets
import time
import zlib
from typing import Any
from urllib.parse import parse_qs, urlsplit

import structlog
from lxml.etree import LxmlError
from onelogin.saml2.auth import OneLogin_Saml2_Auth
from onelogin.saml2.constants import OneLogin_Saml2_Constants as C
from onelogin.saml2.errors import OneLogin_Saml2_Error, OneLogin_Saml2_ValidationError
from onelogin.saml2.idp_metadata_parser import OneLogin_Saml2_IdPMetadataParser
from onelogin.saml2.logout_request import OneLogin_Saml2_Logout_Request
from onelogin.saml2.response import OneLogin_Saml2_Response
from onelogin.saml2.settings import OneLogin_Saml2_Settings

from edgeway.catalog.modules import saml as catalog_saml
from edgeway.edge.hooks import Exchange
from edgeway.edge.hosts import request_host
from edgeway.edge.login import base as login
from edgeway.edge.login.base import LOGIN_TTL, Gate, Identity, ProviderError
from edgeway.edge.login.flow import Flow, Services
from edgeway.edge.login.sessions import Live
from edgeway.edge.modules import saml
from edgeway.edge.modules.saml import Config
from edgeway.edge.pages import Fixed, page
from edgeway.pki.seal import SealError

log = structlog.get_logger()
MAX_RESPONSE = 1 << 20  # bytes of a POSTed SAML response
SETTINGS = 1024  # routes whose python3-saml settings are kept made
UNSPECIFIED = "urn:oasis:names:tc:SAML:1.1:nameid-format:unspecified"
# what python3-saml raises on messages that are not SAML (bad base64, deflate or XML)
MALFORMED = (OneLogin_Saml2_Error, OneLogin_Saml2_ValidationError, ValueError, LxmlError,
             zlib.error)
SECURITY = {
    "authnRequestsSigned": True, "logoutRequestSigned": True, "logoutResponseSigned": True,
    "signMetadata": True, "wantAssertionsSigned": True, "wantMessagesSigned": False,
    "wantNameId": True, "wantAssertionsEncrypted": False, "wantNameIdEncrypted": False,
    "requestedAuthnContext": False, "rejectDeprecatedAlgorithm": True,
    "signatureAlgorithm": C.RSA_SHA256, "digestAlgorithm": C.SHA256,
    "allowRepeatAttributeName": True,
}


class SamlFlow(Flow):
    kind = "saml"

    def __init__(self, gate: Services, https_port: int) -> None:
        super().__init__(gate)
        self.https_port = https_port
        self._settings: dict[str, tuple[Config, OneLogin_Saml2_Settings]] = {}

    def site(self, cfg: Config) -> str:
        return catalog_saml.site(cfg.host, self.https_port)

    def settings(self, cfg: Config) -> OneLogin_Saml2_Settings:
        """The route's python3-saml settings, made once per configuration (all of it: a
        module removed and added again has a new signing key), for the ``SETTINGS`` routes
        used last."""
        cached = self._settings.pop(cfg.common.key, None)
        if cached is not None and cached[0] == cfg:
            self._settings[cfg.common.key] = cached  # (now the last used)
            return cached[1]
        base = self.site(cfg) + cfg.base
        try:
            idp = OneLogin_Saml2_IdPMetadataParser.parse(cfg.idp_metadata)["idp"]
            key = self.gate.sessions.sealer.open(cfg.key_sealed, "saml").decode()
        except (*MALFORMED, SealError) as exc:
            raise ProviderError(f"the route's SAML configuration cannot be used: {exc}") from None
        made = OneLogin_Saml2_Settings({
            "strict": True, "debug": False, "idp": idp, "security": SECURITY,
            "sp": {"entityId": base, "NameIDFormat": cfg.nameid_format,
                   "assertionConsumerService": {"url": base + "/acs",
                                                "binding": C.BINDING_HTTP_POST},
                   "singleLogoutService": {"url": base + "/slo",
                                           "binding": C.BINDING_HTTP_REDIRECT},
                   "x509cert": cfg.cert_pem, "privateKey": key}})
        self._settings[cfg.common.key] = (cfg, made)
        while len(self._settings) > SETTINGS:  # (routes deleted, or not used for long)
            del self._settings[next(iter(self._settings))]
        return made

    def _request(self, cfg: Config, path: str, get: dict[str, str] | None = None,
                 post: dict[str, str] | None = None) -> dict[str, Any]:
        """A request as python3-saml reads it (the URL it was sent to: on the SP's host)."""
        return {"https": "on", "http_host": self.site(cfg).split("://", 1)[1],
                "script_name": path, "get_data": get or {}, "post_data": post or {}}

    def _auth(self, cfg: Config, path: str, **data: dict[str, str]) -> OneLogin_Saml2_Auth:
        return OneLogin_Saml2_Auth(self._request(cfg, path, **data),
                                   old_settings=self.settings(cfg))

    @staticmethod
    def _cfg(hook: Gate) -> Config:
        assert isinstance(hook, saml.Login)
        return hook.config

    async def own(self, hook: Gate, x: Exchange, path: str) -> Fixed | None:
        cfg = self._cfg(hook)
        if path == cfg.base:
            xml = self.settings(cfg).get_sp_metadata()
            return Fixed(200, (("Content-Type", "application/samlmetadata+xml"),),
                         xml if isinstance(xml, bytes) else str(xml).encode())
        if path == cfg.base + "/acs":
            return await self._acs(hook, x)
        if path == cfg.base + "/slo":
            return await self._slo(hook, x)
        if path.startswith(f"{login.PREFIX}saml/"):
            return page(404, "Not found", f"{path} is not a path of this route's SAML "
                        "service provider.", 4004)
        return None

    async def begin(self, hook: Gate, x: Exchange) -> Fixed:
        cfg = self._cfg(hook)
        target = x.req.target.decode("latin-1")
        if request_host(x.req.headers) != cfg.host:  # the SP lives on the route's own host
            return login.redirect(self.site(cfg) + target)
        auth = self._auth(cfg, target.split("?", 1)[0])
        browser = secrets.token_urlsafe(16)
        url = auth.login(return_to=browser, force_authn=cfg.force_authn)
        state = login.sign(self.gate.key, {"k": cfg.common.key, "b": browser, "r": target,
                                           "i": auth.get_last_request_id(),
                                           "x": int(time.time()) + LOGIN_TTL})
        return login.redirect(url, login.set_cookie(cfg.common.state_cookie, state, LOGIN_TTL,
                                                    same_site="None"))

    async def _form(self, x: Exchange) -> dict[str, str] | Fixed:
        if x.req.method != b"POST":
            return page(405, "Method not allowed", "The assertion consumer service takes the "
                        "identity provider's POST.", 4015)
        body = await x.read_body(MAX_RESPONSE)
        if body is None:
            return page(413, "Payload too large", "The SAML response is too large.", 4013,
                        (("Connection", "close"),))
        x.body = body
        return {k: v[0] for k, v in parse_qs(body.decode("latin-1")).items()}

    def _started_here(self, cfg: Config, x: Exchange, relay: str) -> dict[str, Any] | None:
        """The login this browser started (its state cookie), if the RelayState names it."""
        value = login.cookies(x.req.headers).get(cfg.common.state_cookie, "")
        state = login.unsign(self.gate.key, value) if value else None
        if state is None or state.get("k") != cfg.common.key or state.get("b") != relay \
                or state.get("x", 0) < time.time():
            return None
        return state

    def _idp_target(self, cfg: Config, relay: str) -> str:
        parts = urlsplit(relay)
        if parts.scheme == "https" and parts.hostname == cfg.host:
            return login.local_target(parts.path + (f"?{parts.query}" if parts.query else ""))
        return login.local_target(relay)

    async def _acs(self, hook: Gate, x: Exchange) -> Fixed:
        cfg = self._cfg(hook)
        form = await self._form(x)
        if isinstance(form, Fixed):
            return form
        relay = form.get("RelayState", "")
        try:
            answering = OneLogin_Saml2_Response(self.settings(cfg), form.get("SAMLResponse", ""))
            in_response_to = answering.get_in_response_to()
        except MALFORMED as exc:
            return login.refused("Login failed", f"That is not a SAML response: {exc}", 400)
        if in_response_to:
            state = self._started_here(cfg, x, relay)
            if state is None or state.get("i") != in_response_to:
                return login.refused("Login failed", "The SAML response does not answer a "
                                     "login started in this browser, or came too late; start "
                                     "again.", 400)
            target = login.local_target(state.get("r"))
        elif not cfg.allow_idp_initiated:
            return login.refused("Login refused", "Logins started by the identity provider "
                                 "are not allowed here (allow_idp_initiated is off); start "
                                 "from the site.")
        else:
            target = self._idp_target(cfg, relay)
        auth = self._auth(cfg, cfg.base + "/acs", post=form)
        auth.process_response(request_id=in_response_to or None)
        refusal = await self._refusal(cfg, auth, answering)
        if refusal is not None:
            return refusal
        attributes = auth.get_attributes()
        name_id = str(auth.get_nameid())
        who = Identity(name_id, next(iter(saml.values(attributes, saml.EMAIL)), "") or (
            name_id if "emailAddress" in (auth.get_nameid_format() or "") else ""),
            next(iter(saml.values(attributes, saml.NAME)), ""),
            next(iter(saml.values(attributes, saml.USERNAME)), ""))
        details = {"name_id": name_id, "name_id_format": str(auth.get_nameid_format() or ""),
                   "session_index": str(auth.get_session_index() or ""),
                   "nq": str(auth.get_nameid_nq() or ""), "spnq": str(auth.get_nameid_spnq()
                                                                      or "")}
        return await self.gate.establish(hook, x, who, ("saml", self._idp_entity(cfg)),
                                         target, details=details)

    def _idp_entity(self, cfg: Config) -> str:
        return str(self.settings(cfg).get_idp_data().get("entityId", ""))

    async def _refusal(self, cfg: Config, auth: OneLogin_Saml2_Auth,
                       answering: OneLogin_Saml2_Response) -> Fixed | None:
        """What python3-saml found wrong, and the edge's own checks after it."""
        if auth.get_errors() or not auth.is_authenticated():
            log.info("saml_response_refused", key=cfg.common.key,
                     reason=auth.get_last_error_reason())
            return login.refused("Login refused", "The identity provider's answer was "
                                 f"refused: {auth.get_last_error_reason() or 'not valid'}.")
        entity = self.settings(cfg).get_sp_data()["entityId"]
        if entity not in answering.get_audiences():
            return login.refused("Login refused", "The assertion is not restricted to this "
                                 f"service provider ({entity}) as its audience.")
        fmt = auth.get_nameid_format() or UNSPECIFIED
        if cfg.nameid_format != UNSPECIFIED and fmt != cfg.nameid_format:
            return login.refused("Login refused", f"The assertion's NameID format is {fmt}, "
                                 f"not {cfg.nameid_format} (nameid_format).")
        expires = auth.get_last_assertion_not_on_or_after() or time.time() + LOGIN_TTL
        if not await self.gate.sessions.first_use(
                f"{self._idp_entity(cfg)} {auth.get_last_assertion_id()}", float(expires)):
            return login.refused("Login refused", "That assertion was used before: a SAML "
                                 "assertion logs in once.")
        groups = set(saml.values(auth.get_attributes(), saml.GROUPS))
        if cfg.groups and not groups & set(cfg.groups):
            return login.refused("Not allowed", f"{auth.get_nameid()} may not use this site: "
                                 "not a member of any of authorized_groups.")
        return None

    async def _slo(self, hook: Gate, x: Exchange) -> Fixed:
        cfg = self._cfg(hook)
        query = {k: v[0] for k, v in login.query(x.req.target).items()}
        auth = self._auth(cfg, cfg.base + "/slo", get=query)
        ended = 0
        try:
            if "SAMLRequest" in query:
                if "Signature" not in query:
                    return login.refused("Logout refused", "The logout request is not signed.")
                request = OneLogin_Saml2_Logout_Request(self.settings(cfg), query["SAMLRequest"])
                xml = request.get_xml()
                name_id = OneLogin_Saml2_Logout_Request.get_nameid(xml)
                indexes = OneLogin_Saml2_Logout_Request.get_session_indexes(xml) or [""]
                url = auth.process_slo()
                if auth.get_errors():
                    raise OneLogin_Saml2_Error(auth.get_last_error_reason() or "not valid")
                for index in indexes:
                    ended += await self.gate.sessions.end_user_sessions(
                        ("saml", self._idp_entity(cfg)), name_id, cfg.common.realm, index)
                log.info("saml_single_logout", key=cfg.common.key, sessions=ended)
                return login.redirect(str(url), login.set_cookie(cfg.common.cookie, "", 0))
            auth.process_slo(keep_local_session=True)
            if auth.get_errors():
                raise OneLogin_Saml2_Error(auth.get_last_error_reason() or "not valid")
        except MALFORMED as exc:
            return login.refused("Logout refused", f"The logout message was refused: {exc}",
                                 400)
        return login.signed_out(cfg.common)

    async def logout(self, hook: Gate, x: Exchange, live: Live | None) -> Fixed:
        """The session ended here; when the IdP has a single logout service, there too."""
        cfg = self._cfg(hook)
        details = (live.doc.get("details") or {}) if live is not None else {}
        if not details.get("name_id") or not self.settings(cfg).get_idp_data().get(
                "singleLogoutService", {}).get("url"):
            return login.signed_out(cfg.common)
        auth = self._auth(cfg, cfg.base + "/slo")
        url = auth.logout(name_id=details["name_id"],
                          session_index=details.get("session_index") or None,
                          name_id_format=details.get("name_id_format") or None,
                          nq=details.get("nq") or None, spnq=details.get("spnq") or None)
        return login.redirect(str(url), login.set_cookie(cfg.common.cookie, "", 0))
