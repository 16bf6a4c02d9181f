"""The certificate manager every node runs: one job row per certificate management policy
(a reserved domain's name, or an agent ingress's region domains), kept in step with the
resources; due jobs are claimed (one node issues, the others serve the result from the
store) and run: the order (``issue.py``), then the certificate stored as a ``tls_certificates``
resource (key sealed) that the resource points at, and ``certificate_management_status``
saying what happened, when it renews or when it is retried.

With ``--acme-directory off`` no manager runs (new policies say so in their status).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from edgeway import catalog
from edgeway.acme import issue, status
from edgeway.acme.client import Acme, AcmeFailure, call, new_account_key
from edgeway.acme.store_results import Results
from edgeway.config import DomainsConfig
from edgeway.dns import check
from edgeway.platform import Platform
from edgeway.store.acme import AcmeStore
from edgeway.store.repo import Repo

log = structlog.get_logger()
KINDS = ("reserved_domains", "agent_ingresses")
LEASE = 600  # seconds a node holds a job it claimed (an order takes far less)
TICK = 10.0


def _wanted(collection: str, doc: dict[str, Any]) -> dict[str, Any]:
    names = [doc["domain"]] if collection == "reserved_domains" else \
        list(doc.get("region_domains") or [])
    return {"kind": collection, "names": names,
            "key_type": doc["certificate_management_policy"]["private_key_type"]}


class CertificateManager:
    def __init__(self, platform: Platform, cfg: DomainsConfig, node: str) -> None:
        self.platform, self.cfg, self.node = platform, cfg, node
        self.store = AcmeStore(platform.db)
        self.results = Results(platform)
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._first = True
        # brings this node's built-in DNS up to the committed records (set by ``edgeway
        # serve`` when it runs one): an order's DNS check must not race its reload
        self.dns_fresh: Callable[[], Awaitable[None]] | None = None

    def changed(self, collection: str) -> None:
        if collection in (*KINDS, "managed_certificates"):
            self._changed.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _loop(self) -> None:
        while True:
            try:
                await self.sync()
                for id_ in await self.store.claim(self.node, LEASE):
                    await self._run(id_)
            except Exception:  # the next round tries again
                log.exception("acme_round_failed")
            with contextlib.suppress(TimeoutError):  # (asyncio.timeout: wait_for may swallow
                async with asyncio.timeout(TICK):  # the cancel that stops us)
                    await self._changed.wait()
            self._changed.clear()

    async def sync(self) -> None:
        """A job per policy (added, changed or dropped); on the first round, renewal times
        from this node's ``--acme-renew-before``."""
        repo = Repo(self.platform.db.reader())
        wanted: dict[str, dict[str, Any]] = {}
        for collection in KINDS:
            for id_, doc in await repo.all_docs(catalog.BY_COLLECTION[collection]):
                if doc.get("certificate_management_policy"):
                    wanted[id_] = _wanted(collection, doc)
        jobs = await self.store.jobs()
        for id_ in set(jobs) - set(wanted):
            await self.store.drop_job(id_)
            if jobs[id_].get("certificate_id"):  # (its resource is gone: so is its cert)
                await self.results.forget(str(jobs[id_]["certificate_id"]))
        for id_, want in wanted.items():
            job = jobs.get(id_)
            if job is None:
                await self.store.add_job(id_, want)
            elif any(job.get(k) != v for k, v in want.items()):
                await self.store.reschedule(id_, int(status.now()), {**job, **want})
            elif self._first and job.get("not_after"):
                await self.store.reschedule(id_, int(self._due(job)))
        self._first = False

    def _due(self, job: dict[str, Any]) -> float:
        if job.get("not_after"):
            return status.renewal(job["not_after"], job["issued"], self.cfg.acme_renew_before)
        return status.now()

    async def _run(self, id_: str) -> None:
        job = (await self.store.jobs()).get(id_)
        if job is None:
            return
        kind = catalog.BY_COLLECTION[job["kind"]]
        doc = await Repo(self.platform.db.reader()).get(kind, id_)
        policy = (doc or {}).get("certificate_management_policy")
        if doc is None or not policy:
            await self.store.drop_job(id_)
            return
        started = status.now()
        renews = status.renewal(job["not_after"], job["issued"], self.cfg.acme_renew_before) \
            if job.get("not_after") else None
        await self.results.status(kind, id_, policy, status.status(renews, status.job(
            f"Requesting a certificate for {', '.join(job['names'])} from "
            f"{policy['authority']}.", started)))
        try:
            if self.dns_fresh is not None:  # (the NS and CNAME targets it serves itself)
                await self.dns_fresh()
            chain, key = await issue.run(await self._order(id_, job, doc), self._acme,
                                         self.store, self.platform.settings,
                                         lambda: self.platform.changed("acme_challenges"))
        except Exception as exc:
            failure = exc if isinstance(exc, AcmeFailure) else \
                AcmeFailure("INTERNAL_ERROR", f"the ACME exchange failed: {exc}")
            attempts = int(job.get("attempts", 0)) + 1
            retries = started + status.retry_after(attempts)
            log.warning("acme_order_failed", id=id_, code=failure.code, error=failure.msg)
            if failure.account_gone:
                await self.store.forget_account(self._slot())
            await self.results.status(kind, id_, policy, status.status(renews, status.job(
                failure.msg, started, failure.code, retries)))
            await self.store.finish(id_, self.node, {**job, "attempts": attempts,
                                                     "error_code": failure.code}, int(retries))
            return
        issued = await self.results.certificate(kind, id_, policy, job, chain, key,
                                                self.cfg.acme_renew_before, self.node)
        if issued is not None:  # (stored with the job, released: an ingress's is found there)
            log.info("acme_certificate_issued", id=id_, names=job["names"])

    async def _order(self, id_: str, job: dict[str, Any],
                     doc: dict[str, Any]) -> issue.Order:
        settings = self.platform.settings
        zones = [str(d["domain"]) for _i, d in await Repo(self.platform.db.reader())
                 .all_docs(catalog.BY_COLLECTION["agent_ingresses"])]
        if job["kind"] == "agent_ingresses":
            records = check.ingress_records(doc)
        else:
            records = [r for r in check.reserved_records(doc, settings, zones)
                       if not r.name.startswith("*.")]  # (what validation needs)

        def dns_name(name: str) -> str | None:
            if check.in_zones(name, settings, zones):
                return "_acme-challenge." + name.removeprefix("*.")
            return str(doc.get("acme_challenge_cname_target") or "") or None \
                if name.startswith("*.") else None

        return issue.Order(id_, job["names"], job["key_type"], records, dns_name)

    def _slot(self) -> str:
        """The settings row of the account at this directory."""
        digest = hashlib.sha256(self.cfg.acme_directory.encode()).hexdigest()[:16]
        return f"acme_account:{digest}"

    async def _acme(self) -> Acme:
        """The client with the platform's account for this directory (registered once)."""
        directory, slot = self.cfg.acme_directory, self._slot()
        sealer = self.platform.sealer
        sealed = await self.store.account(slot)
        if sealed is not None:
            account = json.loads(sealer.open(sealed, "acme_account"))
            acme = Acme(directory, account["key"], self.cfg.acme_ca_bundle)
            await call(acme.connect, account["uri"], self.cfg.acme_email)
            return acme
        key = new_account_key()
        acme = Acme(directory, key, self.cfg.acme_ca_bundle)
        uri = await call(acme.connect, None, self.cfg.acme_email)
        kept = await self.store.save_account(slot, sealer.seal(
            json.dumps({"key": key, "uri": uri}).encode(), "acme_account"))
        account = json.loads(sealer.open(kept, "acme_account"))
        if account["uri"] != uri:  # another node registered first: use that one
            acme = Acme(directory, account["key"], self.cfg.acme_ca_bundle)
            await call(acme.connect, account["uri"], self.cfg.acme_email)
        log.info("acme_account", directory=directory, uri=account["uri"])
        return acme
