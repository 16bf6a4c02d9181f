"""The official Python API client ``ngrok-api`` 0.19.0, unchanged, drives Edgeway in the
vendor dialect (``Ngrok-Version: 2``): every service of it that Edgeway implements (list with
paging, create, get, update, delete), every edge module's replace/get/delete, OAuth and event
targets with the vendor's names read back intact (and stored in Edgeway's), errors as the
client reads them. One client process per group of calls (``peers.drive_api``)."""

from __future__ import annotations

from typing import Any

from tests.certs import make_cert
from tests.pki.material import ssh_public_key, tls_chain
from tests.server import Server
from tests.vendor.peers import drive_api

# (service path from the client, create kwargs, update kwargs); {ca} is a CA certificate
PLAIN = r'''
import uuid
u = lambda p: p + uuid.uuid4().hex[:10]
vault = c.vaults.create(name=u("v"))
tg = c.backends.tunnel_group.create(labels={"for": "weights"})
table = [
    ("ip_policies", dict(description="office"), dict(metadata="m")),
    ("bot_users", dict(name=u("bot")), dict(name="renamed")),
    ("service_users", dict(name=u("svc")), dict(active=False)),
    ("api_keys", dict(description="ci"), dict(description="ci2")),
    ("credentials", dict(description="agent", acl=["bind:*.example.com"]), dict(acl=[])),
    ("agent_ingresses", dict(domain=u("connect.") + ".example.com"), dict(description="x")),
    ("reserved_domains", dict(domain=u("app.") + ".example.com"), dict(description="x")),
    ("reserved_addrs", dict(description="db"), dict(metadata="{}")),
    ("vaults", dict(name=u("v")), dict(description="kept")),
    ("secrets", dict(name=u("s"), value="hunter2", vault_id=vault.id), dict(value="new")),
    ("secrets", dict(name=u("s"), value="hunter3", vault_name=vault.name), dict(name="n")),
    ("certificate_authorities", dict(ca_pem=args[0]), dict(description="x")),
    ("ssh_certificate_authorities", dict(private_key_type="ed25519"), dict(description="x")),
    ("tls_certificates", None, None),
    ("event_destinations", dict(format="json", target=None), dict(description="x")),
    ("backends.tunnel_group", dict(labels={"app": "web"}), dict(description="x")),
    ("backends.http_response", dict(body="hi", status_code=200, headers={}), dict(body="yo")),
    ("backends.static_address", dict(address="127.0.0.1:9"), dict(description="x")),
    ("backends.weighted", dict(backends={tg.id: 10}), dict(description="x")),
    ("backends.failover", dict(backends=[tg.id]), dict(description="x")),
    ("edges.tcp", dict(hostports=[]), dict(description="x")),
    ("edges.tls", dict(hostports=[]), dict(description="x")),
    ("edges.https", dict(hostports=[]), dict(description="x")),
]
from ngrok.datatypes import EventTarget
def raw(cls, props):  # the client's own type, sent as given
    obj = cls(c, {})
    obj._props = props
    return obj
seen = []
for path, create, update in table:
    if create is None:
        continue
    svc = c
    for part in path.split("."):
        svc = getattr(svc, part)
    if path == "event_destinations":
        create["target"] = raw(EventTarget, {"datadog": {"api_key": "k", "ddtags": "a:b"}})
    made = svc.create(**create)
    assert svc.get(made.id).id == made.id
    changed = svc.update(made.id, **update)
    assert changed.id == made.id
    listed = svc.list(limit="1")
    assert listed.next_page_uri is None or "before_id=" in listed.next_page_uri
    ids = [x.id for x in svc.list(limit="1")]  # iterated across every page
    assert made.id in ids and len(ids) == len(set(ids)), (path, ids)
    seen.append((path, made.id))
    if path == "secrets":
        assert "value" not in made._props and made.vault.id == vault.id
        assert made.vault_name == vault.name
        assert [s.id for s in c.vaults.get_secrets_by_vault(vault.id).secrets].count(made.id)
    if path == "event_destinations":
        assert made.target.datadog.ddtags == "a:b" and made.target.datadog.api_key == "********"
    svc.delete(made.id)
    try:
        svc.get(made.id)
        raise AssertionError(f"{path} {made.id} still there")
    except ngrok.NotFoundError:
        pass
return seen
'''

MODULES = r'''
from ngrok.datatypes import (EndpointOAuth, EndpointCircuitBreaker, EndpointCompression,
    EndpointBackendMutate, EndpointIPPolicyMutate, EndpointRequestHeaders,
    EndpointResponseHeaders, EndpointWebhookValidation, EndpointSAMLMutate, EndpointOIDC,
    EndpointWebsocketTCPConverter, EndpointUserAgentFilter, EndpointTrafficPolicy,
    EndpointMutualTLSMutate, EndpointTLSTerminationAtEdge, EndpointTLSTermination)
def raw(cls, props):
    obj = cls(c, {})
    obj._props = props
    return obj
policy = c.ip_policies.create(description="m")
backend = c.backends.tunnel_group.create(labels={"x": "y"})
ca = c.certificate_authorities.create(ca_pem=args[0])
https = c.edges.https.create(hostports=[])
route = c.edges.https_routes.create(https.id, match_type="path_prefix", match="/")
tcp = c.edges.tcp.create(hostports=[])
tls = c.edges.tls.create(hostports=[])
tp = '{"on_http_request": [{"actions": [{"type": "deny"}]}]}'
tcp_tp = '{"on_tcp_connect": [{"actions": [{"type": "deny"}]}]}'
github = {"github": {"client_id": "id", "client_secret": "s", "teams": ["org/team"],
                     "organizations": ["org"], "email_domains": ["example.com"]}}
route_modules = {
    "backend": (EndpointBackendMutate, {"backend_id": backend.id}),
    "ip_restriction": (EndpointIPPolicyMutate, {"ip_policy_ids": [policy.id]}),
    "circuit_breaker": (EndpointCircuitBreaker, {"error_threshold_percentage": 0.5}),
    "compression": (EndpointCompression, {}),
    "request_headers": (EndpointRequestHeaders, {"add": {"x-a": "1"}}),
    "response_headers": (EndpointResponseHeaders, {"remove": ["server"]}),
    "webhook_verification": (EndpointWebhookValidation, {"provider": "GITHUB", "secret": "s"}),
    "saml": (EndpointSAMLMutate, {"idp_metadata": args[1]}),
    "oidc": (EndpointOIDC, {"issuer": "https://idp.example.com", "client_id": "a",
                            "client_secret": "b"}),
    "websocket_tcp_converter": (EndpointWebsocketTCPConverter, {}),
    "user_agent_filter": (EndpointUserAgentFilter, {"deny": ["(?i)bot"]}),
    "traffic_policy": (EndpointTrafficPolicy, {"value": tp}),
    "oauth": (EndpointOAuth, {"provider": github}),  # (last: one login module per route)
}
done = []
m = c.edge_modules
for name, (cls, props) in route_modules.items():
    svc = getattr(m, "https_edge_route_" + name)
    svc.replace(https.id, route.id, module=raw(cls, props))
    got = svc.get(https.id, route.id)
    if name == "oauth":
        gh = got.provider.github
        assert (gh.teams, gh.organizations, gh.client_id) == (["org/team"], ["org"], "id")
        assert got.provider.google is None
    if name == "backend":
        assert got.backend.id == backend.id
    if name != "oauth":  # kept, read back through the native dialect by the test
        svc.delete(https.id, route.id)
    done.append("route." + name)
for prefix, edge, mods in (
        ("https_edge_", https, {"mutual_tls": (EndpointMutualTLSMutate,
                                               {"certificate_authority_ids": [ca.id]}),
                                "tls_termination": (EndpointTLSTerminationAtEdge,
                                                    {"min_version": "1.2"})}),
        ("tcp_edge_", tcp, {"backend": (EndpointBackendMutate, {"backend_id": backend.id}),
                            "ip_restriction": (EndpointIPPolicyMutate,
                                               {"ip_policy_ids": [policy.id]}),
                            "traffic_policy": (EndpointTrafficPolicy, {"value": tcp_tp})}),
        ("tls_edge_", tls, {"backend": (EndpointBackendMutate, {"backend_id": backend.id}),
                            "ip_restriction": (EndpointIPPolicyMutate,
                                               {"ip_policy_ids": [policy.id]}),
                            "tls_termination": (EndpointTLSTermination,
                                                {"terminate_at": "edge"}),
                            "mutual_tls": (EndpointMutualTLSMutate,
                                           {"certificate_authority_ids": [ca.id]}),
                            "traffic_policy": (EndpointTrafficPolicy, {"value": tcp_tp})})):
    for name, (cls, props) in mods.items():
        svc = getattr(m, prefix + name)
        svc.replace(edge.id, module=raw(cls, props))
        assert svc.get(edge.id).enabled is True
        done.append(prefix + name)
    for name in reversed(list(mods)):
        getattr(m, prefix + name).delete(edge.id)
        try:
            getattr(m, prefix + name).get(edge.id)
            raise AssertionError(name)
        except ngrok.NotFoundError:
            pass
c.edges.https_routes.update(https.id, route.id, description="r2")
assert c.edges.https.get(https.id).routes[0].description == "r2"
return {"done": done, "edge": https.id, "route": route.id}
'''

REFERRING = r'''
from ngrok.datatypes import EventSourceReplace, EventTarget
def raw(cls, props):
    obj = cls(c, {})
    obj._props = props
    return obj
public_key, cert_pem, key_pem = args
done = []
policy = c.ip_policies.create(description="for rules")
rule = c.ip_policy_rules.create(cidr="10.1.0.0/16", ip_policy_id=policy.id, action="allow")
assert c.ip_policy_rules.update(rule.id, cidr="10.2.0.0/16").cidr == "10.2.0.0/16"
restriction = c.ip_restrictions.create(type="dashboard", ip_policy_ids=[policy.id])
assert c.ip_restrictions.update(restriction.id, enforced=True).enforced is True
assert [p.id for p in c.ip_restrictions.get(restriction.id).ip_policies] == [policy.id]
target = raw(EventTarget, {"firehose": {
    "auth": {"creds": {"aws_access_key_id": "AKID", "aws_secret_access_key": "SECRET"}},
    "delivery_stream_arn": "arn:aws:firehose:us-east-1:123456789012:deliverystream/x"}})
dest = c.event_destinations.create(format="json", target=target)
creds = dest.target.firehose.auth.creds
assert (creds.aws_access_key_id, creds.aws_secret_access_key) == ("AKID", "********")
sub = c.event_subscriptions.create(
    destination_ids=[dest.id], sources=[raw(EventSourceReplace, {"type": "ip_policy_created.v0"})])
assert [d.id for d in sub.destinations] == [dest.id]
c.event_sources.create(sub.id, type="ip_policy_deleted.v0")
assert {s.type for s in c.event_sources.list(sub.id).sources} == {
    "ip_policy_created.v0", "ip_policy_deleted.v0"}
assert c.event_sources.get(sub.id, "ip_policy_deleted.v0").type == "ip_policy_deleted.v0"
c.event_sources.delete(sub.id, "ip_policy_deleted.v0")
ssh = c.ssh_credentials.create(public_key=public_key, acl=["bind:x.example.com"])
assert c.ssh_credentials.update(ssh.id, acl=[]).acl == []
ca = c.ssh_certificate_authorities.create(private_key_type="ed25519")
window = dict(valid_after="2030-01-01T00:00:00Z", valid_until="2031-01-01T00:00:00Z")
host = c.ssh_host_certificates.create(ssh_certificate_authority_id=ca.id,
                                      public_key=public_key, principals=["h"], **window)
user = c.ssh_user_certificates.create(ssh_certificate_authority_id=ca.id,
                                      public_key=public_key, principals=["u"], **window)
assert host.certificate.startswith("ssh-ed25519-cert") and user.principals == ["u"]
tls = c.tls_certificates.create(certificate_pem=cert_pem, private_key_pem=key_pem)
assert tls.subject_common_name and "private_key_pem" not in tls._props
for svc, id_ in ((c.tls_certificates, tls.id), (c.ssh_user_certificates, user.id),
                 (c.ssh_host_certificates, host.id), (c.ssh_credentials, ssh.id),
                 (c.event_subscriptions, sub.id), (c.event_destinations, dest.id),
                 (c.ip_restrictions, restriction.id), (c.ip_policy_rules, rule.id)):
    assert svc.update(id_, description="d").description == "d"
    assert id_ in [x.id for x in svc.list()]
    svc.delete(id_)
    done.append(id_.split("_")[0])
return done
'''

ERRORS = r'''
out = {}
try:
    c.ip_policies.create(description="x" * 300)
except ngrok.Error as e:
    out["long"] = [e.error_code, e.http_status_code, e.operation_id.startswith("op_")]
try:
    c.edge_modules.https_edge_route_oauth.replace(args[0], args[1], module=None)
except ngrok.Error as e:
    out["oauth"] = [e.error_code, e.args[1], e.details.get("member")]
try:
    c.http_client.get("/no_such_path", {})
except ngrok.NotFoundError as e:
    out["path"] = [e.error_code, e.http_status_code]
out["tunnels"] = len(list(c.tunnels.list()))
out["sessions"] = len(list(c.tunnel_sessions.list()))
out["endpoints"] = len(list(c.endpoints.list()))
return out
'''


def _idp_metadata() -> str:
    cert = "".join(make_cert().splitlines()[1:-1])  # (the IdP's signing certificate)
    return ('<md:EntityDescriptor xmlns:md="urn:oasis:names:tc:SAML:2.0:metadata" '
            'entityID="https://idp.example.com"><md:IDPSSODescriptor '
            'protocolSupportEnumeration="urn:oasis:names:tc:SAML:2.0:protocol">'
            '<md:KeyDescriptor use="signing"><ds:KeyInfo '
            'xmlns:ds="http://www.w3.org/2000/09/xmldsig#"><ds:X509Data><ds:X509Certificate>'
            f'{cert}</ds:X509Certificate></ds:X509Data></ds:KeyInfo></md:KeyDescriptor>'
            '<md:SingleSignOnService Binding="urn:oasis:names:tc:SAML:2.0:bindings:'
            'HTTP-Redirect" Location="https://idp.example.com/sso"/>'
            '</md:IDPSSODescriptor></md:EntityDescriptor>')


def test_every_plain_service(server: Server) -> None:
    seen: Any = drive_api(server, PLAIN, make_cert())
    assert {path for path, _id in seen} >= {"reserved_addrs", "service_users", "vaults",
                                            "secrets", "backends.failover", "edges.https"}


def test_services_with_references(server: Server) -> None:
    chain = tls_chain()
    done: Any = drive_api(server, REFERRING, ssh_public_key(), chain.pem, chain.key)
    assert done == ["cert", "sucrt", "shcrt", "sshcr", "esb", "ed", "ipx", "ipr"]


def test_every_edge_module_and_vendor_names(server: Server) -> None:
    out: Any = drive_api(server, MODULES, make_cert(), _idp_metadata())
    assert len(out["done"]) == 23
    with server.client() as api:  # stored in Edgeway's names
        native = api.get(f"/edges/https/{out['edge']}/routes/{out['route']}/oauth").json()
        assert native["provider"]["code_host_a"]["teams"] == ["org/team"]
        vendor = api.get(f"/edges/https/{out['edge']}/routes/{out['route']}/oauth",
                         headers={"Ngrok-Version": "2"})
        assert vendor.headers["ngrok-operation-id"].startswith("op_")
        assert vendor.json()["provider"]["github"]["organizations"] == ["org"]
        assert "code_host_a" not in vendor.json()["provider"]
    errors: Any = drive_api(server, ERRORS, out["edge"], out["route"])
    assert errors["long"] == ["ERR_NGROK_215", 400, True]
    assert errors["oauth"][0] == "ERR_NGROK_7037"
    assert "github, facebook, microsoft, google, linkedin, gitlab, twitch, amazon" in \
        errors["oauth"][1]
    assert errors["oauth"][2] == "oauth.provider"
    assert errors["path"] == ["ERR_NGROK_254", 404]


ADDR_EDGE = r'''
addr = c.reserved_addrs.create(description="db")
edge = c.edges.tcp.create(hostports=[addr.addr], description="db edge")
out = {"hostports": c.edges.tcp.get(edge.id).hostports, "addr": addr.addr}
try:
    c.reserved_addrs.delete(addr.id)
except ngrok.Error as e:
    out["delete"] = [e.error_code, e.http_status_code]
try:
    c.edges.tcp.create(hostports=[addr.addr])
except ngrok.Error as e:
    out["again"] = [e.error_code, e.http_status_code]
c.edges.tcp.delete(edge.id)
c.reserved_addrs.delete(addr.id)
return out
'''


def test_a_tcp_edge_on_a_reserved_address(server: Server) -> None:
    """ngrok's sequence through its own client: reserve an address, put a TCP edge on it;
    the address then cannot be deleted, nor served by a second edge."""
    out: Any = drive_api(server, ADDR_EDGE)
    assert out["hostports"] == [out["addr"]]
    assert out["delete"] == ["ERR_NGROK_446", 400]
    assert out["again"] == ["ERR_NGROK_7122", 400]


CLOUD = r'''
import uuid
name = "cloud-" + uuid.uuid4().hex[:10] + ".example.com"
c.reserved_domains.create(domain=name)
policy = ('{"on_http_request": [{"actions": [{"type": "custom-response", "config": '
          '{"status_code": 200, "content": "from the cloud"}}]}]}')
ep = c.endpoints.create(url="https://" + name, type="cloud", traffic_policy=policy,
                        description="front", bindings=["public"])
out = {"created": [ep.id, ep.type, ep.url, ep.description, ep.traffic_policy == policy],
       "host": name}
got = c.endpoints.get(ep.id)
out["got"] = [got.url, got.bindings]
upd = c.endpoints.update(ep.id, description="renamed", metadata="m")
out["updated"] = [upd.description, upd.metadata, upd.traffic_policy == policy]
out["listed"] = ep.id in [e.id for e in c.endpoints.list()]
try:
    c.endpoints.create(url="https://" + name, type="cloud", traffic_policy=policy)
except ngrok.Error as e:
    out["again"] = [e.error_code, e.http_status_code]
c.endpoints.delete(ep.id)
try:
    c.endpoints.get(ep.id)
except ngrok.NotFoundError as e:
    out["gone"] = e.http_status_code
return out
'''


def test_cloud_endpoints_through_the_client(server: Server) -> None:
    out: Any = drive_api(server, CLOUD)
    _id, kind, url, description, same = out["created"]
    assert (kind, url, description, same) == ("cloud", f"https://{out['host']}", "front", True)
    assert out["got"] == [url, ["public"]]
    assert out["updated"] == ["renamed", "m", True]
    assert out["listed"]
    assert out["again"] == ["ERR_NGROK_7122", 400]
    assert out["gone"] == 404


TCP_CLOUD = r'''
addr = c.reserved_addrs.create(description="tcp cloud")
policy = ('{"on_tcp_connect": [{"actions": [{"type": "forward-internal", "config": '
          '{"url": "tcp://db.internal:5432"}}]}]}')
ep = c.endpoints.create(url="tcp://" + addr.addr, type="cloud", traffic_policy=policy)
out = {"created": [ep.type, ep.url, ep.proto, ep.port, ep.tcp_addr.id if ep.tcp_addr else None],
       "addr": [addr.id, addr.addr]}
try:
    c.reserved_addrs.delete(addr.id)
except ngrok.Error as e:
    out["delete"] = [e.error_code, e.http_status_code]
try:
    c.edges.tcp.create(hostports=[addr.addr])
except ngrok.Error as e:
    out["edge"] = [e.error_code, e.http_status_code]
c.endpoints.delete(ep.id)
c.reserved_addrs.delete(addr.id)
return out
'''


def test_a_tcp_cloud_endpoint_through_the_client(server: Server) -> None:
    """A TCP cloud endpoint on a reserved address through ngrok's own client: it refers to
    the address, which then cannot be deleted under it nor taken by an edge."""
    out: Any = drive_api(server, TCP_CLOUD)
    addr_id, addr = out["addr"]
    assert out["created"] == ["cloud", f"tcp://{addr}", "tcp", int(addr.rsplit(":", 1)[1]),
                              addr_id]
    assert out["delete"] == ["ERR_NGROK_446", 400]
    assert out["edge"] == ["ERR_NGROK_7122", 400]
