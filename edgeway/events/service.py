"""The events of one node, put together for ``edgeway serve``: the delivery worker of the
outbox, the traffic sink, the change log the tunnel listener writes sessions with, and
``verify`` for the API."""

from __future__ import annotations

from typing import Any

from edgeway.config import EventsConfig
from edgeway.events.changes import ChangeLog, Render
from edgeway.events.targets import Clients, Targets, verify
from edgeway.events.traffic import TrafficSink
from edgeway.events.worker import Worker
from edgeway.platform import Platform


class Events:
    def __init__(self, platform: Platform, node: str, options: EventsConfig,
                 render: Render) -> None:
        self.platform, self.render = platform, render
        self.targets = Targets(platform.sealer, Clients(options, node))
        self.worker = Worker(platform.db, self.targets, node, options)
        self.traffic = TrafficSink(platform.db, self.targets, options)

    async def start(self) -> None:
        await self.traffic.start()
        self.worker.start()
        self.platform.watchers += [self.worker.changed, self.traffic.changed]
        self.platform.events = self

    async def stop(self) -> None:
        await self.traffic.stop()
        await self.worker.stop()
        await self.targets.clients.close()

    def changes(self) -> ChangeLog:
        """For a write the server makes itself (agent sessions): its events, by no actor."""
        return ChangeLog(self.platform.settings.public_url, self.render)

    async def verify(self, destination_id: str, doc: dict[str, Any]) -> dict[str, Any]:
        return await verify(self.targets, destination_id, doc)
