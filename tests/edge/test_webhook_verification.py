"""Webhook signatures as providers send them: each scheme accepts its own signature over the
exact body, and refuses a wrong secret, a changed body, a missing header and a stale
timestamp."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from datetime import UTC, datetime

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from edgeway.catalog.modules import webhook
from edgeway.edge.modules import webhook_verification as wv
from tests.edge.agents import EdgeClient, raw_connection, read_all
from tests.edge.test_edges import made, route
from tests.server import Server

SECRET = "s3cret"
BODY = b'{"event":"push","n":1}'
NOW = 1_800_000_000


def signed(provider: str, body: bytes = BODY, now: int = NOW, secret: str = SECRET
           ) -> list[tuple[bytes, bytes]]:
    """The headers ``provider`` sends with ``body`` (written from its documentation)."""
    key, t = secret.encode(), str(now).encode()
    hexsig = hmac.new(key, body, "sha256").hexdigest().encode()
    b64 = base64.b64encode(hmac.new(key, body, "sha256").digest())
    stamped = hmac.new(key, t + b"." + body, "sha256").hexdigest().encode()
    return {
        "github": [(b"X-Hub-Signature-256", b"sha256=" + hexsig)],
        "whatsapp": [(b"X-Hub-Signature-256", b"sha256=" + hexsig)],
        "bitbucket": [(b"X-Hub-Signature", b"sha256=" + hexsig)],
        "intercom": [(b"X-Hub-Signature",
                      b"sha1=" + hmac.new(key, body, "sha1").hexdigest().encode())],
        "shopify": [(b"X-Shopify-Hmac-Sha256", b64)],
        "sentry": [(b"Sentry-Hook-Signature", hexsig)],
        "typeform": [(b"Typeform-Signature", b"sha256=" + b64)],
        "launch_darkly": [(b"X-LD-Signature", hexsig)],
        "sonatype": [(b"X-Nexus-Webhook-Signature",
                      hmac.new(key, body, "sha1").hexdigest().encode())],
        "aftership": [(b"aftership-hmac-sha256", b64)],
        "terraform": [(b"X-TFE-Notification-Signature",
                       hmac.new(key, body, "sha512").hexdigest().encode())],
        "pagerduty": [(b"X-PagerDuty-Signature", b"v1=deadbeef,v1=" + hexsig)],
        "circleci": [(b"circleci-signature", b"v1=" + hexsig)],
        "gitlab": [(b"X-Gitlab-Token", key)],
        "stripe": [(b"Stripe-Signature", b"t=" + t + b",v1=" + stamped + b",v0=abc")],
        "mux": [(b"Mux-Signature", b"t=" + t + b",v1=" + stamped)],
        "calendly": [(b"Calendly-Webhook-Signature", b"t=" + t + b",v1=" + stamped)],
        "buildkite": [(b"X-Buildkite-Signature", b"timestamp=" + t + b",signature=" + stamped)],
        "slack": [(b"X-Slack-Request-Timestamp", t), (b"X-Slack-Signature", b"v0=" + hmac.new(
            key, b"v0:" + t + b":" + body, "sha256").hexdigest().encode())],
        "zendesk": [(b"X-Zendesk-Webhook-Signature-Timestamp", b"2027-01-15T08:00:00Z"),
                    (b"X-Zendesk-Webhook-Signature", base64.b64encode(hmac.new(
                        key, b"2027-01-15T08:00:00Z" + body, "sha256").digest()))],
        "xero": [(b"x-xero-signature", b64)],
        "heroku": [(b"Heroku-Webhook-Hmac-SHA256", b64)],
        "mongodb": [(b"X-MMS-Signature", base64.b64encode(hmac.new(key, body, "sha1").digest()))],
        "docusign": [(b"X-DocuSign-Signature-1", b64)],
        "webex": [(b"X-Spark-Signature", hmac.new(key, body, "sha1").hexdigest().encode())],
        "alchemy": [(b"X-Alchemy-Signature", hexsig)],
        "chargify": [(b"X-Chargify-Webhook-Signature-Hmac-Sha-256", hexsig)],
        "coinbase": [(b"X-CC-Webhook-Signature", hexsig)],
        "modern_treasury": [(b"X-Signature", hexsig)],
        "pusher": [(b"X-Pusher-Key", b"app-key"), (b"X-Pusher-Signature", hexsig)],
        "clearbit": [(b"X-Request-Signature",
                      b"sha1=" + hmac.new(key, body, "sha1").hexdigest().encode())],
        "castle": [(b"X-Castle-Signature", b64)],
        "bolt": [(b"X-Bolt-Hmac-Sha256", b64)],
        "worldline": [(b"X-GCS-KeyId", b"key-1"), (b"X-GCS-Signature", b64)],
        "autodesk": [(b"x-adsk-signature",
                      b"sha1hash=" + hmac.new(key, body, "sha1").hexdigest().encode())],
        "zoom": [(b"x-zm-request-timestamp", t), (b"x-zm-signature", b"v0=" + hmac.new(
            key, b"v0:" + t + b":" + body, "sha256").hexdigest().encode())],
        "frameio": [(b"X-Frameio-Request-Timestamp", t), (b"X-Frameio-Signature", b"v0=" + hmac.new(
            key, b"v0:" + t + b":" + body, "sha256").hexdigest().encode())],
        "orb": [(b"X-Orb-Timestamp", t), (b"X-Orb-Signature", b"v1=" + hmac.new(
            key, b"v1:" + t + b":" + body, "sha256").hexdigest().encode())],
        "tiktok": [(b"TikTok-Signature", b"t=" + t + b",s=" + stamped)],
        "box": [(b"BOX-DELIVERY-TIMESTAMP", box_time(now)),
                (b"BOX-SIGNATURE-PRIMARY", b"bm90IGl0"),  # a rotated key's, then ours
                (b"BOX-SIGNATURE-SECONDARY", base64.b64encode(hmac.new(
                    key, body + box_time(now), "sha256").digest()))],
        "mailgun": [],  # signed in the body: see mailgun_body
    }[provider]


def box_time(now: int) -> bytes:
    return datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%S+00:00").encode()


def svix_headers(secret: bytes, body: bytes, now: int) -> list[tuple[bytes, bytes]]:
    t = str(now).encode()
    sig = base64.b64encode(hmac.new(secret, b"msg_1." + t + b"." + body, "sha256").digest())
    return [(b"svix-id", b"msg_1"), (b"svix-timestamp", t),
            (b"svix-signature", b"v1,bm90IGl0 v1," + sig)]


PROVIDERS = ["github", "whatsapp", "bitbucket", "intercom", "shopify", "sentry", "typeform",
             "launch_darkly", "sonatype", "aftership", "terraform", "pagerduty", "circleci",
             "gitlab", "stripe", "mux", "calendly", "buildkite", "slack", "zendesk", "xero",
             "heroku", "mongodb", "docusign", "webex", "alchemy", "chargify", "coinbase",
             "modern_treasury", "pusher", "clearbit", "castle", "bolt", "worldline", "autodesk",
             "zoom", "frameio", "orb", "tiktok", "box"]
STAMPED = ["stripe", "mux", "calendly", "buildkite", "slack", "zoom", "frameio", "orb",
           "tiktok"]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_each_provider_accepts_its_signature_and_nothing_else(provider: str) -> None:
    verifier = wv.verifier({"provider": provider.upper(), "secret": SECRET})
    assert verifier is not None and verifier.provider == provider
    assert verifier.verify(signed(provider), BODY, NOW)
    if provider != "gitlab":  # a shared token, not a signature of the body
        assert not verifier.verify(signed(provider), BODY + b" ", NOW)
    assert not verifier.verify(signed(provider, secret="other"), BODY, NOW)
    assert not verifier.verify([], BODY, NOW)


@pytest.mark.parametrize("provider", STAMPED)
def test_timestamps_must_be_recent(provider: str) -> None:
    verifier = wv.verifier({"provider": provider, "secret": SECRET})
    assert verifier is not None
    assert verifier.verify(signed(provider, now=NOW - 170), BODY, NOW)
    assert not verifier.verify(signed(provider, now=NOW - 200), BODY, NOW)
    assert not verifier.verify(signed(provider, now=NOW + 200), BODY, NOW)


def test_svix_signatures_with_a_whsec_secret() -> None:
    raw = b"0123456789abcdef0123456789abcdef"
    secret = "whsec_" + base64.b64encode(raw).decode()
    for provider in ("svix", "clerk"):
        verifier = wv.verifier({"provider": provider, "secret": secret})
        assert verifier is not None
        assert verifier.verify(svix_headers(raw, BODY, NOW), BODY, NOW)
        assert not verifier.verify(svix_headers(raw, BODY, NOW - 600), BODY, NOW)
        assert not verifier.verify(svix_headers(b"x" * 32, BODY, NOW), BODY, NOW)
    broken = wv.verifier({"provider": "svix", "secret": "whsec_not base64!"})
    assert broken is not None and not broken.verify(svix_headers(raw, BODY, NOW), BODY, NOW)


def test_box_allows_ten_minutes() -> None:
    verifier = wv.verifier({"provider": "box", "secret": SECRET})
    assert verifier is not None
    assert verifier.verify(signed("box", now=NOW - 590), BODY, NOW)
    assert not verifier.verify(signed("box", now=NOW - 610), BODY, NOW)


def test_standard_webhooks_for_brex() -> None:
    raw = b"0123456789abcdef0123456789abcdef"
    verifier = wv.verifier({"provider": "brex", "secret": base64.b64encode(raw).decode()})
    assert verifier is not None
    headers = [(k.replace(b"svix-", b"Webhook-"), v) for k, v in svix_headers(raw, BODY, NOW)]
    assert verifier.verify(headers, BODY, NOW)
    assert not verifier.verify(headers, BODY + b" ", NOW)
    assert not verifier.verify(svix_headers(raw, BODY, NOW), BODY, NOW)  # svix- names: no


def test_microsoft_teams_keys_with_the_decoded_token() -> None:
    token = base64.b64encode(b"teams security token").decode()
    verifier = wv.verifier({"provider": "microsoft_teams", "secret": token})
    assert verifier is not None
    sig = base64.b64encode(hmac.new(b"teams security token", BODY, "sha256").digest())
    assert verifier.verify([(b"Authorization", b"HMAC " + sig)], BODY, NOW)
    assert not verifier.verify([(b"Authorization", b"HMAC " + sig)], BODY + b" ", NOW)
    assert not verifier.verify([(b"Authorization", sig)], BODY, NOW)


def test_mailgun_signs_in_the_body() -> None:
    verifier = wv.verifier({"provider": "mailgun", "secret": SECRET})
    assert verifier is not None

    def body(stamp: int, key: str = SECRET) -> bytes:
        sig = hmac.new(key.encode(), f"{stamp}tok123".encode(), "sha256").hexdigest()
        return json.dumps({"signature": {"timestamp": str(stamp), "token": "tok123",
                                         "signature": sig}, "event-data": {}}).encode()
    assert verifier.verify([], body(NOW), NOW)
    assert not verifier.verify([], body(NOW, "other"), NOW)
    assert not verifier.verify([], body(NOW - 600), NOW)
    assert not verifier.verify([], b"not json", NOW)


def test_sendgrid_verifies_an_ecdsa_signature_with_its_public_key() -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    public = base64.b64encode(key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)).decode()
    verifier = wv.verifier({"provider": "sendgrid", "secret": public})
    assert verifier is not None
    t = str(NOW).encode()
    sig = base64.b64encode(key.sign(t + BODY, ec.ECDSA(hashes.SHA256())))
    headers = [(b"X-Twilio-Email-Event-Webhook-Signature", sig),
               (b"X-Twilio-Email-Event-Webhook-Timestamp", t)]
    assert verifier.verify(headers, BODY, NOW)
    assert not verifier.verify(headers, BODY + b" ", NOW)
    assert not verifier.verify(headers, BODY, NOW + 600)
    other = ec.generate_private_key(ec.SECP256R1())
    forged = base64.b64encode(other.sign(t + BODY, ec.ECDSA(hashes.SHA256())))
    assert not verifier.verify([(headers[0][0], forged), headers[1]], BODY, NOW)


def test_the_api_accepts_exactly_the_providers_the_edge_verifies() -> None:
    assert set(wv.NAMES) == set(webhook.PROVIDERS)


def test_providers_without_a_scheme_here_compile_to_none() -> None:
    assert wv.verifier({"provider": "airship", "secret": SECRET}) is None
    assert wv.verifier({"provider": "plivo", "secret": SECRET}) is None


# -- schemes that sign the URL the sender called, and the set-up challenges -----------------

URL = b"https://hooks.example.com/sms?x=1"
FORM = b"To=%2B15551234567&Body=hello+there&From=%2B15557654321&AccountSid=AC1"
FORM_HEADERS = [(b"Content-Type", b"application/x-www-form-urlencoded")]


def form_signed(key: bytes, url: bytes, algo: str) -> bytes:
    """Twilio's and Mandrill's documented recipe: the URL, then each POST parameter sorted
    by name, its name and value appended."""
    params = sorted([("To", "+15551234567"), ("Body", "hello there"),
                     ("From", "+15557654321"), ("AccountSid", "AC1")])
    data = url + "".join(k + v for k, v in params).encode()
    return base64.b64encode(hmac.new(key, data, algo).digest())


def test_twilio_signs_the_url_and_the_sorted_form() -> None:
    verifier = wv.verifier({"provider": "twilio", "secret": SECRET})
    assert verifier is not None
    sig = [(b"X-Twilio-Signature", form_signed(SECRET.encode(), URL, "sha1"))]
    assert verifier.verify(FORM_HEADERS + sig, FORM, NOW, b"POST", URL)
    assert not verifier.verify(FORM_HEADERS + sig, FORM + b"&x=2", NOW, b"POST", URL)
    assert not verifier.verify(FORM_HEADERS + sig, FORM, NOW, b"POST", URL + b"&y")
    # a JSON body: the URL carries its SHA-256
    body = b'{"a":1}'
    url = b"https://hooks.example.com/j?bodySHA256=" + hashlib.sha256(body).hexdigest().encode()
    sig = [(b"X-Twilio-Signature", base64.b64encode(hmac.new(SECRET.encode(), url,
                                                              "sha1").digest()))]
    assert verifier.verify(sig, body, NOW, b"POST", url)
    assert not verifier.verify(sig, body + b" ", NOW, b"POST", url)


def test_mailchimp_square_and_hubspot_sign_the_url() -> None:
    key = SECRET.encode()
    mandrill = wv.verifier({"provider": "mailchimp", "secret": SECRET})
    assert mandrill is not None
    sig = [(b"X-Mandrill-Signature", form_signed(key, URL, "sha1"))]
    assert mandrill.verify(FORM_HEADERS + sig, FORM, NOW, b"POST", URL)
    assert not mandrill.verify(FORM_HEADERS + sig, FORM, NOW, b"POST", b"https://other/sms?x=1")
    sq = wv.verifier({"provider": "square", "secret": SECRET})
    assert sq is not None
    sig = [(b"x-square-hmacsha256-signature",
            base64.b64encode(hmac.new(key, URL + BODY, "sha256").digest()))]
    assert sq.verify(sig, BODY, NOW, b"POST", URL)
    assert not sq.verify(sig, BODY, NOW, b"POST", URL + b"2")
    hub = wv.verifier({"provider": "hubspot", "secret": SECRET})
    assert hub is not None
    ms = str(NOW * 1000).encode()
    sig = [(b"X-HubSpot-Request-Timestamp", ms), (b"X-HubSpot-Signature-v3", base64.b64encode(
        hmac.new(key, b"POST" + URL + BODY + ms, "sha256").digest()))]
    assert hub.verify(sig, BODY, NOW, b"POST", URL)
    assert not hub.verify(sig, BODY, NOW, b"PUT", URL)
    assert not hub.verify(sig, BODY, NOW + 400, b"POST", URL)


def test_twitter_and_dropbox_challenges_are_answered_by_the_edge() -> None:
    tw = wv.verifier({"provider": "twitter", "secret": SECRET})
    assert tw is not None
    status, headers, body = tw.answer(b"GET", b"/tw?crc_token=abc123") or (0, (), b"")
    assert dict(headers)["Content-Type"] == "application/json"
    want = "sha256=" + base64.b64encode(hmac.new(SECRET.encode(), b"abc123",
                                                 "sha256").digest()).decode()
    assert status == 200 and json.loads(body) == {"response_token": want}
    assert tw.answer(b"POST", b"/tw?crc_token=abc123") is None and tw.answer(b"GET", b"/tw") \
        is None
    sig = [(b"X-Twitter-Webhooks-Signature", b"sha256=" + base64.b64encode(
        hmac.new(SECRET.encode(), BODY, "sha256").digest()))]
    assert tw.verify(sig, BODY, NOW) and not tw.verify(sig, BODY + b" ", NOW)
    db = wv.verifier({"provider": "dropbox", "secret": SECRET})
    assert db is not None
    assert db.answer(b"GET", b"/d?challenge=xyz%20") == (200, (
        ("Content-Type", "text/plain"), ("X-Content-Type-Options", "nosniff")), b"xyz ")
    sig = [(b"X-Dropbox-Signature", hmac.new(SECRET.encode(), BODY, "sha256").hexdigest()
            .encode())]
    assert db.verify(sig, BODY, NOW) and not db.verify(sig, BODY + b" ", NOW)


# -- end to end: an HTTPS edge route with the module, in front of the upstream service --------

HOOKS = "hooks.example.com"


@pytest.fixture(scope="module")
def hooks(srv: Server, service: int) -> str:
    with srv.client() as api:
        made(api, "/reserved_domains", {"domain": HOOKS})
        edge = made(api, "/edges/https", {"hostports": [f"{HOOKS}:443"]})
        svc = made(api, "/backends/static", {"address": f"127.0.0.1:{service}"})
        route(api, edge["id"], "path_prefix", "/", svc["id"],
              webhook_verification={"provider": "GitHub", "secret": SECRET})
        route(api, edge["id"], "path_prefix", "/sms", svc["id"],
              webhook_verification={"provider": "twilio", "secret": SECRET})
        route(api, edge["id"], "path_prefix", "/tw", svc["id"],
              webhook_verification={"provider": "twitter", "secret": SECRET})
    return f"https://{HOOKS}"


def as_dict(headers: list[tuple[bytes, bytes]]) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in headers}


def test_signed_webhooks_reach_the_upstream_whole(srv: Server, hooks: str) -> None:
    body = bytes(range(256)) * 400
    with EdgeClient(srv) as web:
        r = web.request("POST", f"{hooks}/headers", headers=as_dict(signed("github", body)),
                        content=iter([body[:60000], body[60000:]]))  # sent chunked
        assert r.status_code == 200, r.text
        seen = r.json()
        assert seen["body"] == len(body)
        assert seen["sha256"] == hashlib.sha256(body).hexdigest()
        names = dict(seen["headers"])
        assert names["content-length"] == str(len(body)) and "transfer-encoding" not in names
        for headers in (signed("github", body, secret="wrong"), []):
            r = web.request("POST", f"{hooks}/headers", headers=as_dict(headers), content=body)
            assert r.status_code == 403
            assert r.headers["edgeway-error-code"] == "ERR_EDGEWAY_3204"
            assert "github webhook signature" in r.text


def test_url_signatures_and_challenges_through_the_edge(srv: Server, hooks: str) -> None:
    """Twilio signs the public URL it called (https, the Host, the path and query); the edge
    rebuilds it from the request. Twitter's CRC is answered by the edge itself."""
    url = f"{hooks}/sms?x=1".encode()
    with EdgeClient(srv) as web:
        headers = {"Content-Type": "application/x-www-form-urlencoded",
                   "X-Twilio-Signature": form_signed(SECRET.encode(), url, "sha1").decode()}
        r = web.request("POST", url.decode(), headers=headers, content=FORM)
        assert r.status_code == 200 and r.text == "svc /sms", r.text
        r = web.request("POST", f"{hooks}/sms?x=2", headers=headers, content=FORM)
        assert r.status_code == 403 and "twilio webhook signature" in r.text
        r = web.get(f"{hooks}/tw?crc_token=t0k")
        want = "sha256=" + base64.b64encode(hmac.new(SECRET.encode(), b"t0k",
                                                     "sha256").digest()).decode()
        assert r.status_code == 200 and r.json() == {"response_token": want}
        assert web.get(f"{hooks}/tw").status_code == 403  # not a CRC: a signature is due


def test_expect_continue_and_the_size_limit(srv: Server, hooks: str) -> None:
    head = (f"POST /headers HTTP/1.1\r\nHost: {HOOKS}\r\nContent-Length: {len(BODY)}\r\n"
            "Expect: 100-continue\r\n")
    with raw_connection(srv, hooks) as s:
        sig = signed("github")[0]
        s.sendall(head.encode() + sig[0] + b": " + sig[1] + b"\r\nConnection: close\r\n\r\n")
        assert s.recv(65536).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        s.sendall(BODY)
        answer = read_all(s)
    assert answer.startswith(b"HTTP/1.1 200 ") and b'"body": 22' in answer
    with raw_connection(srv, hooks) as s:
        s.sendall(f"POST /headers HTTP/1.1\r\nHost: {HOOKS}\r\n"
                  f"Content-Length: {wv.MAX_BODY + 1}\r\n\r\n".encode())
        answer = read_all(s)  # at once, without the body being read
    assert answer.startswith(b"HTTP/1.1 413 ") and b"ERR_EDGEWAY_4013" in answer
