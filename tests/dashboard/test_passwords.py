"""Signing in to the dashboard with a name and a password that ``edgeway users set-password``
set: scrypt hashes (never the password) in the database, the role the operator gave, the
same refusal for a wrong name as for a wrong password, and a new password ending the
sessions of the old one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from edgeway import passwords
from tests.dashboard.visitor import csrf_of, post, visitor
from tests.server import Server

SECRET = "correct horse battery staple"


def set_password(srv: Server, name: str, password: str, *extra: str
                 ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "edgeway", "users", "set-password", name,
                           "--data-dir", str(srv.data_dir), *extra], input=password + "\n",
                          capture_output=True, text=True, timeout=60)


def sign_in(browser: httpx.Client, name: str, password: str) -> httpx.Response:
    form = browser.get("/dashboard/signin")
    return browser.post("/dashboard/signin", data={"csrf": csrf_of(form), "name": name,
                                                   "password": password})


def test_a_password_hash_is_scrypt_and_verifies() -> None:
    stored = passwords.hash_password(SECRET)
    assert stored.startswith("scrypt$32768$8$1$") and SECRET not in stored
    assert passwords.verify(SECRET, stored) and not passwords.verify(SECRET + "!", stored)
    assert stored != passwords.hash_password(SECRET)  # (a salt of its own)
    assert not passwords.verify(SECRET, passwords.DECOY)
    assert not passwords.verify(SECRET, "plain") and not passwords.verify(SECRET, "")
    with pytest.raises(ValueError, match="at least 12"):
        passwords.hash_password("short")


def test_sign_in_with_a_name_and_password(own_server: Server) -> None:
    srv = own_server
    done = set_password(srv, "alice", SECRET, "--role", "operator")
    assert done.returncode == 0 and "alice" in done.stdout, done.stderr
    for file in srv.data_dir.glob("edgeway.db*"):
        assert SECRET.encode() not in file.read_bytes(), file
    with visitor(srv) as browser:
        for name, password in (("alice", SECRET + "x"), ("mallory", SECRET)):
            r = sign_in(browser, name, password)
            assert r.status_code == 403 and 'id="password-error"' in r.text, r.text
            assert "The name or the password is wrong." in r.text
        r = sign_in(browser, "alice", SECRET)
        assert r.status_code == 303 and r.headers["location"] == "/dashboard/", r.text
        page = browser.get("/dashboard/ip_policies")
        assert 'id="role">operator' in page.text and 'id="create"' in page.text
        assert 'id="create"' not in browser.get("/dashboard/api_keys").text
        r = post(browser, "/dashboard/ip_policies", "/dashboard/ip_policies",
                 {"description": "by alice"})
        assert r.status_code == 303, r.text
        r = post(browser, "/dashboard/api_keys", "/dashboard/api_keys", {"role": "admin"})
        assert r.status_code == 403 and "ERR_EDGEWAY_260" in r.text  # (the operation says)
        assert "usr_" in browser.get("/dashboard/sessions").text
        again = set_password(srv, "alice", SECRET + " again")  # (a new password)
        assert again.returncode == 0, again.stderr
        r = browser.get("/dashboard/")
        assert r.status_code == 303 and "/dashboard/signin" in r.headers["location"]
        assert sign_in(browser, "alice", SECRET).status_code == 403
        assert sign_in(browser, "alice", SECRET + " again").status_code == 303
        assert 'id="role">operator' in browser.get("/dashboard/").text  # (role kept)
    with srv.client() as api:
        policies = api.get("/ip_policies").json()["ip_policies"]
        assert any(p["description"] == "by alice" for p in policies)


def test_set_password_refuses_what_it_cannot_honour(own_server: Server, tmp_path: Path
                                                    ) -> None:
    short = set_password(own_server, "bob", "short")
    assert short.returncode == 2 and "at least 12 characters" in short.stderr
    nowhere = subprocess.run([sys.executable, "-m", "edgeway", "users", "set-password", "bob",
                              "--data-dir", str(tmp_path / "typo")], input=SECRET + "\n",
                             capture_output=True, text=True, timeout=60)
    assert nowhere.returncode == 2 and "not a data directory" in nowhere.stderr
    assert not (tmp_path / "typo").exists()
    with visitor(own_server) as browser:
        assert sign_in(browser, "bob", "short").status_code == 403
