"""The rules the API enforces that JSON Schema cannot state (references that must exist,
uniqueness, cross-member rules, contents checked by parsing), published in the OpenAPI
document as ``x-edgeway-rules``: each names the error code it answers with and the members it
concerns (glob patterns of the member paths errors name: ``[*]`` any index, ``*`` anything;
"" for an error that names no member), and ``says`` when only errors saying that match. A
client or fuzzer that sends schema-valid requests
can be refused only by these."""

from __future__ import annotations

from typing import Any

from edgeway import catalog
from edgeway.catalog.modules import REGISTRY

# (code, members, rule)
_STATED: tuple[tuple[int, tuple[str, ...], str], ...] = (
    (215, ("type",), "the type of an IP restriction cannot be changed after creation"),
    (215, ("ip_policy_ids", "*ip_policy_ids"), "an IP policy is named once"),
    (215, ("*traffic_policy.value",), "a traffic policy document, JSON or YAML, whose keys are "
                                      "the phases of its attachment point"),
    (215, ("*.min_version",), "null when TLS is terminated upstream"),
    (215, ("*user_agent_filter.allow[*]", "*user_agent_filter.deny[*]"),
     "regular expressions that compile"),
    (215, ("certificate_pem",), "a parsable PEM certificate chain, the leaf first, whose key "
                                "matches private_key_pem"),
    (215, ("private_key_pem",), "a parsable PEM private key"),
    (215, ("*saml.idp_metadata",), "well-formed XML: an EntityDescriptor"),
    (7091, ("*saml.idp_metadata",), "the IdP's EntityDescriptor XML, with a single sign-on "
                                    "service of the HTTP-Redirect binding and a signing "
                                    "certificate"),
    (7035, ("*oauth.provider.*.client_id",), "without client_id and client_secret, the "
                                             "provider needs a managed application on this "
                                             "server (--oauth-apps)"),
    (215, ("resolves_to[*].value",), "a region of this platform (--regions)"),
    (215, ("certificate_id",), "a TLS certificate covering the reserved domain, not expired"),
    (434, ("certificate_id",), "an uploaded certificate and a certificate management policy "
                               "exclude each other"),
    (436, ("certificate_id",), "a certificate the policy manages is not replaced or detached "
                               "while the policy stays"),
    (500, ("region",), "a region of this platform (--regions)"),
    (228, ("ca_pem",), "exactly one parsable PEM certificate of a CA"),
    (611, ("public_key",), "an OpenSSH public key"),
    (612, ("public_key",), "an OpenSSH public key whose key part is valid base64 of its type"),
    (1409, ("cidr",), "network-aligned: no host bits set"),
    (1406, ("cidr",), "an IPv6 network written validly"),
    (420, ("description", "metadata", "name"), "maxLength counts bytes of UTF-8: a character "
                                               "outside ASCII takes 2 to 4"),
    (448, ("domain", "hostports[*]"), "labels of at most 63 characters, at most 253 in all"),
    (215, ("mutual_tls",), "TLS edges: an enabled mutual_tls needs tls_termination.terminate_at "
                           "'edge' (client certificates are checked in the edge's handshake)"),
    (7121, ("hostports[*]",), "HTTPS and TLS edges: the host is a reserved domain, or covered "
                              "by a reserved wildcard domain one label up"),
    (7105, ("hostports[*]",), "TCP edges: a reserved address, or a port outside the agent TCP "
                              "range that is none of this server's listeners nor privileged"),
    (7122, ("",), "a hostport (for TCP edges: a port) is served by one edge only; a reserved "
                  "address by an edge, a cloud endpoint or a tunnel, one at a time"),
    (215, ("url",), "cloud endpoints: an http://, https:// or tls:// URL of a host name only "
                    "(no port, path or query), or tcp:// and a reserved address"),
    (7105, ("url",), "TCP cloud endpoints: the address is a reserved address"),
    (215, ("bindings",), "cloud endpoints: ['internal'] for a URL ending in .internal, "
                         "['public'] for any other"),
    (448, ("url",), "a host name: labels of at most 63 characters, at most 253 in all"),
    (7121, ("url",), "cloud endpoints: the host is a reserved domain, or covered by a reserved "
                     "wildcard domain one label up"),
    (215, ("traffic_policy", "traffic_policy.*"), "a traffic policy document, JSON or YAML, "
                                                  "whose keys are on_http_request, "
                                                  "on_http_response and "
                                                  "on_event_stream_message (on_tcp_connect "
                                                  "for TCP and TLS endpoints)"),
    (7027, ("*webhook_verification.secret",), "required (the provider's signing secret or "
                                              "verification key), but for sns"),
    (7026, ("*webhook_verification.secret",), "empty for sns, whose messages are verified "
                                              "with its signing certificate"),
    (7036, ("*oauth.provider",), "exactly one identity provider"),
    (7037, ("*oauth.provider",), "exactly one identity provider"),
    (383, ("*oauth.provider.*.client_secret",), "client_id and client_secret go together"),
    (384, ("*oauth.provider.*.client_id",), "client_id and client_secret go together"),
    (390, ("*oauth.provider.*.scopes",), "scopes only with your own OAuth application"),
    (7033, ("*oauth.provider.*.teams[*]",), "teams are '<org>/<team>' or numeric ids"),
    (236, ("target.*",), "event destination targets: ARNs of the target's service; values "
                         "that are not empty; a secret given as ******** (the mask) only where "
                         "the destination already has one"),
    (240, ("target.*",), "event destination targets: exactly one target and one kind of "
                         "authentication; credentials that are not empty"),
    (215, ("sources[*].type",), "an event type is listed once"),
    (215, ("sources[*].filter", "filter"), "a CEL expression that parses and names only what "
                                          "events of its type carry"),
    (215, ("sources[*].fields", "sources[*].fields[*]", "fields", "fields[*]"),
     "fields of traffic event types only, each one of the type's fields or a prefix of them"),
    (236, ("target",), "exactly one target"),
    (215, ("elliptic_curve", "key_size"), "elliptic_curve with ecdsa keys only, key_size with "
                                          "rsa keys only"),
    (7131, ("match",), "a route matching a host names a domain name"),
    (215, ("hostports[*]",), "a host name of at most 253 characters"),
    (250, ("filter",), "a CEL expression over obj (the listed resource) and time.now that "
                       "parses, names members the resource has, and is true or false"),
    (446, ("",), "a resource still referenced by another cannot be deleted"),
    (1405, ("vault_id",), "a secret's vault: vault_id or vault_name"),
    (380, ("vault_name",), "the name of an existing vault (and of vault_id's when both are "
                           "given)"),
    (215, ("vault_name",), "the name of an existing vault (and of vault_id's when both are "
                           "given)"),
    (509, ("",), "a reserved address needs a free port of the agent TCP range"),
    (215, ("urls", "urls[*]"), "abuse reports: 1 to 100 URLs, each with a scheme of http, "
                               "https, tls or tcp and a host (tcp: and a port), at most 2048 "
                               "bytes"),
    (420, ("urls[*]",), "abuse reports: at most 2048 bytes of UTF-8"),
    (448, ("urls[*]",), "abuse reports: a host name of labels of at most 63 characters, at "
                        "most 253 in all"),
    (215, ("hostnames[*].hostname",), "abuse reports: a hostname of the report's URLs"),
    (261, ("",), "at least one working admin API key remains"),
    (262, ("force", ""), "a write that would make an enforced api IP restriction refuse the "
                         "caller's address needs force: true"),
)


def _link_rules() -> list[dict[str, Any]]:
    """References must name existing resources of the right kinds (the pattern of an id does
    not say which exist)."""
    out: list[dict[str, Any]] = []
    for kind in catalog.ALL:
        for f in kind.fields:
            if f.link is None:
                continue
            members = (f.name, f"{f.name}[*]", f"{f.name}.*", f"{f.name}.*[*]")
            names = " or ".join(catalog.BY_COLLECTION[k].title for k in f.link.kinds)
            for code in (f.link.code, 223, 227):
                out.append({"code": f"ERR_EDGEWAY_{code}", "members": list(members),
                            "rule": f"names an existing {names}"})
    for m in REGISTRY.values():
        if m.link is not None:
            out.append({"code": f"ERR_EDGEWAY_{m.link.code}", "members": [f"*{m.name}.*"],
                        "rule": "names existing resources"})
    return out


def _unique_rules() -> list[dict[str, Any]]:
    return [{"code": f"ERR_EDGEWAY_{kind.unique_code}", "members": ["", *members],
             "rule": f"{kind.title}: {', '.join(members)} unique"}
            for kind in catalog.ALL for members in kind.unique]


def document_rules() -> list[dict[str, Any]]:
    stated = [{"code": f"ERR_EDGEWAY_{code}", "members": list(members), "rule": rule}
              for code, members, rule in _STATED]
    whole = {"code": "ERR_EDGEWAY_215", "members": ["*"], "says": "expected `int`, got `float`",
             "rule": "whole numbers are sent without a fraction or exponent (1, not 1.0)"}
    return [whole, *stated, *_link_rules(), *_unique_rules()]
