"""JSON Schema for what the checks (``checks``, the kinds' and modules' own) enforce, so that
the OpenAPI document states the rules: clients and fuzzers then build valid requests. The
checks stay the authority; these describe them (a pattern may be narrower than the check
where the full rule is not a regular expression, never wider)."""

from __future__ import annotations

from typing import Any

from edgeway import catalog
from edgeway.catalog import checks

_LABEL = r"[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?"
_TOP = r"[a-z]([a-z0-9-]{0,30}[a-z0-9])?"  # the last label: not numeric
_NAME = rf"({_LABEL}\.){{1,6}}{_TOP}"  # at most 7 labels: 230 characters, within 253
_OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4 = rf"{_OCTET}(\.{_OCTET}){{3}}"
_PORT = r"([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"

NON_EMPTY: dict[str, Any] = {"minLength": 1, "pattern": r"\S"}
FQDN: dict[str, Any] = {"pattern": f"^{_NAME}$", "maxLength": 253}
WILDCARD_FQDN: dict[str, Any] = {"pattern": rf"^(\*\.)?{_NAME}$", "maxLength": 255}
HOSTPORT: dict[str, Any] = {"pattern": f"^({_NAME}|{_IPV4}):{_PORT}$"}
_HEX = r"[0-9a-f]{1,4}"
CIDR: dict[str, Any] = {  # (network-aligned too: not a pattern's to say)
    "pattern": rf"^({_IPV4}/(3[0-2]|[12]?[0-9])|(({_HEX}:){{7}}{_HEX}|({_HEX}:){{1,6}}:|::)/"
               r"([0-9]|[1-9][0-9]|1[01][0-9]|12[0-8]))$"}
ACL_RULE: dict[str, Any] = {"pattern": rf"^(\*|bind:((\*\.)?{_NAME}(:{_PORT})?|{_IPV4}:{_PORT}"
                                       r"|[A-Za-z0-9][A-Za-z0-9_./-]{0,40}=(\*|[A-Za-z0-9]"
                                       r"[A-Za-z0-9_./-]{0,40})))$"}
HEADER_NAME = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"
PEM_CERTIFICATE: dict[str, Any] = {"pattern": "-----BEGIN CERTIFICATE-----",
                                   "x-edgeway-rule": "PEM certificate blocks"}
SSH_PUBLIC_KEY: dict[str, Any] = {
    "pattern": r"^(ssh-(ed25519|rsa)|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/]+=* ?",
    "x-edgeway-rule": "an OpenSSH public key (authorized-keys line), checked by parsing it"}


def id_pattern(kinds: tuple[str, ...]) -> str:
    prefixes = sorted({catalog.BY_COLLECTION[k].prefix for k in kinds})
    return f"^({'|'.join(prefixes)})_[0-9A-Za-z]{{27}}$"


def items(schema: dict[str, Any], *, unique: bool = False, at_least: int = 0
          ) -> dict[str, Any]:
    """The schema of a list whose strings each follow ``schema``."""
    out: dict[str, Any] = {"items": {"type": "string", **schema}}
    if unique:
        out["uniqueItems"] = True
    if at_least:
        out["minItems"] = at_least
    return out


_HOSTPORTS = items(HOSTPORT)
_DOMAIN_HOSTPORTS = items({"pattern": f"^{_NAME}:{_PORT}$"})
_SAFE_TEXT = {"pattern": r"^[^\r\n\x00]*$"}
_LABELS = {"propertyNames": {"pattern": r"^[A-Za-z0-9][A-Za-z0-9_./-]{0,252}$"},
           "additionalProperties": {"type": "string", "minLength": 1, "maxLength": 253,
                                    **_SAFE_TEXT}}

# (collection, member) -> the JSON Schema of its rules
BY_MEMBER: dict[tuple[str, str], dict[str, Any]] = {
    ("reserved_domains", "domain"): WILDCARD_FQDN,
    ("agent_ingresses", "domain"): FQDN,
    ("bot_users", "name"): {**NON_EMPTY, "maxLength": 255},
    ("service_users", "name"): {**NON_EMPTY, "maxLength": 255},
    ("vaults", "name"): {"pattern": "^[A-Za-z0-9_.-]{1,64}$"},
    ("vault_secrets", "name"): {"pattern": "^[A-Za-z0-9_.-]{1,64}$"},
    ("vault_secrets", "value"): {"minLength": 1, "maxLength": 16384},
    ("ip_policy_rules", "cidr"): CIDR,
    ("ip_restrictions", "ip_policy_ids"): {"minItems": 1, "uniqueItems": True},
    ("credentials", "acl"): items(ACL_RULE),
    ("ssh_credentials", "acl"): items(ACL_RULE),
    ("ssh_credentials", "public_key"): SSH_PUBLIC_KEY,
    ("ssh_certificate_authorities", "public_key"): SSH_PUBLIC_KEY,
    ("ssh_host_certificates", "public_key"): SSH_PUBLIC_KEY,
    ("ssh_user_certificates", "public_key"): SSH_PUBLIC_KEY,
    ("ssh_certificate_authorities", "private_key_type"): {
        "enum": ["", "rsa", "ecdsa", "ed25519"]},
    ("tls_certificates", "certificate_pem"): PEM_CERTIFICATE,
    ("certificate_authorities", "ca_pem"): PEM_CERTIFICATE,
    ("backends/static", "address"): HOSTPORT,
    ("backends/failover", "backends"): {"minItems": 1},
    ("backends/weighted", "backends"): {"minProperties": 1, "propertyNames": {
        "pattern": r"^(bkdfo|bkdhr|bkdsc|bkdtg|bkdwd)_[0-9A-Za-z]{27}$"}},
    ("backends/tunnel_group", "labels"): _LABELS,
    ("event_subscriptions", "sources"): {"uniqueItems": True},
    ("ssh_certificate_authorities", "elliptic_curve"): {
        "enum": ["", "p256", "p384", "p521", "secp256r1", "secp384r1", "secp521r1"]},
    ("ssh_certificate_authorities", "key_size"): {"enum": [0, 2048, 4096]},
    ("backends/http_response", "headers"): {
        "propertyNames": {"pattern": HEADER_NAME},
        "additionalProperties": {"type": "string", **_SAFE_TEXT}},
    ("edges/tcp", "hostports"): _HOSTPORTS,
    ("edges/https", "hostports"): _DOMAIN_HOSTPORTS,
    ("edges/tls", "hostports"): _DOMAIN_HOSTPORTS,
}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _one_of(*members: str) -> dict[str, Any]:
    """Exactly one of ``members`` is an object (the others absent or null): true of a request
    and of its rendering, which shows the others as null."""
    return {"oneOf": [{"required": [m], "properties": {m: {"type": "object"}}}
                      for m in members]}


def _arn(service: str, resource: str) -> dict[str, Any]:
    return {"pattern": checks.arn_pattern(service, resource)}


def components() -> dict[str, dict[str, Any]]:
    """Rules of the shared request shapes (modules, event targets), merged into their
    component schemas: ``properties`` member by member, the rest replaced."""
    from edgeway.catalog.event_types import EVENT_TYPES
    from edgeway.catalog.modules.auth import OAuthProvider
    from edgeway.catalog.modules.tls import VERSIONS
    from edgeway.catalog.modules.webhook import PROVIDERS

    backends = ("backends/failover", "backends/http_response", "backends/static",
                "backends/tunnel_group", "backends/weighted")
    http_url = {"pattern": r"^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[^\s]*)?$"}
    versions: list[Any] = [*VERSIONS, None]
    return {
        "TrafficPolicy": {"required": ["value"], "properties": {"value": NON_EMPTY}},
        "BackendMutate": {"required": ["backend_id"],
                          "properties": {"backend_id": {"pattern": id_pattern(backends)}}},
        "IPPolicyMutate": {"required": ["ip_policy_ids"], "properties": {"ip_policy_ids": {
            "minItems": 1, "uniqueItems": True, "items": {
                "type": "string", "pattern": id_pattern(("ip_policies",))}}}},
        "MutualTLSMutate": {"required": ["certificate_authority_ids"], "properties": {
            "certificate_authority_ids": {
            "minItems": 1, "uniqueItems": True, "items": {
                "type": "string", "pattern": id_pattern(("certificate_authorities",))}}}},
        "WebhookVerification": {"required": ["provider"],
                                "properties": {"provider": {"enum": sorted(PROVIDERS)}}},
        "SAMLMutate": {"required": ["idp_metadata"],
                       "properties": {"idp_metadata": {"pattern": "<"}}},
        "OIDC": {"required": ["issuer", "client_id", "client_secret"], "properties": {
            "issuer": http_url, "client_id": NON_EMPTY, "client_secret": NON_EMPTY}},
        "Monitoring": {"properties": {"api_key": NON_EMPTY}},
        "EventTarget": _one_of("delivery_stream", "data_stream", "log_group", "monitoring",
                               "cloud_logs_ingestion"),
        "CloudAuth": _one_of("role", "creds"),
        "OAuth": {"required": ["provider"], "properties": {"provider": _ref("OAuthProvider")}},
        "OAuthProvider": _one_of(*OAuthProvider.__struct_fields__),
        "Headers": {"properties": {
            "remove": {"type": "array", "items": {"type": "string", "pattern": HEADER_NAME}},
            "add": {"type": "object", "propertyNames": {"pattern": HEADER_NAME},
                    "additionalProperties": {"type": "string", **_SAFE_TEXT}}}},
        "TLSTermination": {"properties": {"min_version": {"enum": versions}}},
        "TLSTerminationAtEdge": {"properties": {"min_version": {"enum": versions}}},
        "SourceIn": {"properties": {"type": {"enum": list(EVENT_TYPES)}}},
        "CertPolicy": {"properties": {"authority": {"enum": ["letsencrypt"]},
                                      "private_key_type": {"enum": ["rsa", "ecdsa"]}}},
        "CloudCreds": {"properties": {"access_key_id": NON_EMPTY,
                                      "secret_access_key": NON_EMPTY}},
        "CloudRole": {"properties": {"role_arn": _arn("iam", "role/")}},
        "DataStream": {"properties": {"stream_arn": _arn("kinesis", "stream/")}},
        "DeliveryStream": {"properties": {
            "delivery_stream_arn": _arn("firehose", "deliverystream/")}},
        "LogGroup": {"properties": {"log_group_arn": _arn("logs", "log-group:")}},
        "CloudLogsIngestion": {"properties": {
            name: NON_EMPTY for name in ("tenant_id", "client_id", "client_secret",
                                         "data_collection_rule_id",
                                         "data_collection_stream_name")}
            | {"logs_ingestion_uri": {"pattern": r"^https://[A-Za-z0-9.-]+(/[^\s]*)?$"}}},
    }


def merge(schemas: dict[str, Any]) -> None:
    """Apply ``components()`` to the document's component schemas."""
    for name, patch in components().items():
        target = schemas.get(name)
        if target is None:
            continue
        for key, value in patch.items():
            if key == "properties":
                for member, rule in value.items():
                    old = target["properties"].get(member, {})
                    if {"$ref", "enum"} & set(rule):  # a new type: the old one goes
                        old = {k: v for k, v in old.items() if k == "description"}
                    target["properties"][member] = {**old, **rule}
            elif key == "required":
                target["required"] = sorted({*target.get("required", []), *value})
            else:
                target[key] = value
