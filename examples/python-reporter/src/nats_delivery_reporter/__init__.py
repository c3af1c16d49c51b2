"""Counts what a nats-py application's subscriptions drop and publishes the
totals as nats-delivery reports (docs/report-protocol.md, version 1), which
``nats-delivery-exporter --client-reports`` re-exports as
``nats_delivery_app_*`` series.

nats-py drops a message when a subscription's pending queue is over its
``pending_msgs_limit`` or ``pending_bytes_limit``, and calls the connection's
error callback with a ``SlowConsumerError`` once per dropped message, before
the next message is read. Counting those calls per subscription is exact.

Needs nats-py (tested with 2.16.0) and the standard library only.
"""

import asyncio
import json
import logging
import os
import socket
import time

from nats.errors import SlowConsumerError

PROTOCOL_VERSION = 1
DEFAULT_SUBJECT = "nats_delivery.reports"
# The exporter rejects a report whose client or instance is longer (bytes).
MAX_LABEL_BYTES = 128

_log = logging.getLogger(__name__)


def default_instance():
    """``<hostname>:<pid>``, as the Rust crate names an instance."""
    host = os.environ.get("HOSTNAME") or socket.gethostname() or "unknown"
    return f"{host.strip()}:{os.getpid()}"


class _Totals:
    """Counters of one subscription name (summed over its subscriptions)."""

    __slots__ = ("delivered", "dropped", "events")

    def __init__(self):
        self.delivered = 0
        self.dropped = 0
        self.events = 0


class _Tracked:
    """A live subscription and the drops its error callbacks reported."""

    __slots__ = ("name", "sub", "dropped")

    def __init__(self, name, sub):
        self.name = name
        self.sub = sub
        self.dropped = 0


class DeliveryReporter:
    """Counts drops of one nats-py connection and publishes reports on it.

    ``client`` names the application (the ``client`` label), ``instance``
    this process among the application's processes (the ``instance`` label).
    """

    def __init__(self, client, instance=None, subject=DEFAULT_SUBJECT, interval=5.0):
        instance = instance or default_instance()
        for what, value in (("client", client), ("instance", instance)):
            if not value or len(value.encode()) > MAX_LABEL_BYTES:
                raise ValueError(f"{what} must be 1 to {MAX_LABEL_BYTES} bytes, got {value!r}")
        self.client = client
        self.instance = instance
        self.subject = subject
        self.interval = interval
        self.sequence = 0
        self.events = {"connected": 0, "disconnected": 0, "lame_duck": 0, "closed": 0}
        # Live subscriptions by the identity of their Subscription object.
        self._live = {}
        # Totals of unsubscribed subscriptions, by name.
        self._retired = {}
        self._stopping = None
        self._task = None

    def callbacks(self, error_cb=None, disconnected_cb=None, reconnected_cb=None,
                  closed_cb=None, lame_duck_mode_cb=None):
        """Keyword arguments for ``nats.connect``: the reporter's callbacks,
        each calling the application's own one (if given) after counting."""

        async def on_error(e):
            if isinstance(e, SlowConsumerError):
                self._slow_consumer(e)
            if error_cb is not None:
                await error_cb(e)
            elif not isinstance(e, SlowConsumerError):
                # As nats-py's default callback does; drops are counted, not
                # logged one by one.
                _log.error("nats: encountered error", exc_info=e)

        def counting(event, app_cb):
            async def on_event():
                self.events[event] += 1
                if app_cb is not None:
                    await app_cb()
            return on_event

        return {
            "error_cb": on_error,
            "disconnected_cb": counting("disconnected", disconnected_cb),
            # A reconnection is a connection again; the first one is counted
            # by start().
            "reconnected_cb": counting("connected", reconnected_cb),
            "closed_cb": counting("closed", closed_cb),
            "lame_duck_mode_cb": counting("lame_duck", lame_duck_mode_cb),
        }

    def _slow_consumer(self, error):
        tracked = self._live.get(id(error.sub))
        if tracked is None:
            # A subscription made with nc.subscribe directly: counted under
            # its subject pattern (a bounded label, never a message subject).
            tracked = self.track(error.sub, error.sub.subject)
        tracked.dropped += 1

    def track(self, sub, name):
        """Reports ``sub`` (a nats-py Subscription) under ``name``; several
        subscriptions may share a name (queue group members): they add up."""
        tracked = _Tracked(name, sub)
        self._live[id(sub)] = tracked
        return tracked

    async def subscribe(self, nc, subject, name=None, **kwargs):
        """``nc.subscribe(subject, **kwargs)``, reported under ``name``
        (default: the subject pattern)."""
        sub = await nc.subscribe(subject, **kwargs)
        self.track(sub, name or subject)
        return sub

    async def unsubscribe(self, sub):
        """Unsubscribes ``sub`` and keeps its totals. nats-py discards the
        messages still pending: they are counted as dropped."""
        tracked = self._live.pop(id(sub), None)
        if tracked is None:
            await sub.unsubscribe()
            return
        pending = sub.pending_msgs
        delivered = sub.delivered - tracked.dropped - pending
        await sub.unsubscribe()
        totals = self._retired.setdefault(tracked.name, _Totals())
        totals.delivered += delivered
        totals.dropped += tracked.dropped + pending
        totals.events += tracked.dropped

    def _subscription_entries(self):
        entries = {}

        def entry(name):
            if name not in entries:
                entries[name] = {
                    "subscription": name, "delivered_messages": 0, "dropped_messages": 0,
                    "slow_consumer_events": 0,
                }
            return entries[name]

        for name, totals in self._retired.items():
            e = entry(name)
            e["delivered_messages"] += totals.delivered
            e["dropped_messages"] += totals.dropped
            e["slow_consumer_events"] += totals.events
        for tracked in self._live.values():
            sub = tracked.sub
            e = entry(tracked.name)
            # nats-py's `delivered` counts every message that arrived for the
            # subscription, dropped ones included.
            e["delivered_messages"] += sub.delivered - tracked.dropped - sub.pending_msgs
            e["dropped_messages"] += tracked.dropped
            e["slow_consumer_events"] += tracked.dropped
            e["pending_messages"] = e.get("pending_messages", 0) + sub.pending_msgs
            e["pending_bytes"] = e.get("pending_bytes", 0) + sub.pending_bytes
        return list(entries.values())

    def report(self):
        """The body of the next report (its sequence is taken)."""
        self.sequence += 1
        body = {
            "version": PROTOCOL_VERSION,
            "client": self.client,
            "instance": self.instance,
            "sequence": self.sequence,
            "timestamp_ms": int(time.time() * 1000),
            "subscriptions": self._subscription_entries(),
            "connection_events": dict(self.events),
            "jetstream_consumers": [],
        }
        return json.dumps(body, separators=(",", ":")).encode()

    async def publish_now(self, nc):
        """Publishes one report on ``nc``; returns its sequence."""
        # <prefix>.<client>: the exporter takes a client's reports from its subject only.
        await nc.publish(f"{self.subject}.{self.client}", self.report())
        return self.sequence

    def start(self, nc):
        """Publishes a report on ``nc`` (connected) every ``interval`` seconds
        until ``stop()``."""
        self.events["connected"] += 1
        self._stopping = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run(nc))

    async def _run(self, nc):
        while True:
            try:
                await asyncio.wait_for(self._stopping.wait(), self.interval)
                return
            except asyncio.TimeoutError:
                pass
            try:
                await self.publish_now(nc)
            except Exception:
                # The next report carries the same totals and more.
                pass

    async def stop(self):
        """Stops the periodic reports; a report being published is finished."""
        if self._task is not None:
            self._stopping.set()
            await self._task
            self._task = None
