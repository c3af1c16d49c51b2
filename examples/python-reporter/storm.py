"""A nats-py application in a drop storm, reporting with DeliveryReporter.

Three subscriptions of one subject, each with a slow callback: "by_messages"
holds at most 100 pending messages, "by_bytes" at most 100 payloads' worth of
bytes, and one made with nc.subscribe directly (reported as "storm.data")
at most 100 messages. A second connection publishes the messages. Once
every message has arrived and left the pending queues, the application
stops its periodic reports, publishes a last one and prints one JSON line of
its own counts: messages published, the subscriptions in the order they
were made, messages each callback received, reports sent, the nats-py
version. Then it waits for its standard input to close.

    python storm.py nats://127.0.0.1:4222 --messages 20000
"""

import argparse
import asyncio
import json
import sys
import time

import nats
from nats.aio.client import __version__ as nats_py_version

from nats_delivery_reporter import DeliveryReporter

PAYLOAD = b"x" * 100
# nats-py gives up connecting after 2 s by default, which a loaded machine can pass.
CONNECT_TIMEOUT = 30
LIMITS = {
    "by_messages": {"pending_msgs_limit": 100, "pending_bytes_limit": 0},
    # A queue without a message limit, so only bytes can overflow it.
    "by_bytes": {"pending_msgs_limit": 0, "pending_bytes_limit": 100 * len(PAYLOAD)},
}


async def storm(args):
    reporter = DeliveryReporter(args.client, args.instance, args.subject, args.interval)
    nc = await nats.connect(
        args.server, name="storm-subscriber", connect_timeout=CONNECT_TIMEOUT, **reporter.callbacks()
    )
    reporter.start(nc)
    received = {}
    subs = {}

    def slow(name):
        received[name] = 0

        async def handle(msg):
            received[name] += 1
            # Blocks the event loop: the socket's messages pile up meanwhile
            # and arrive in a burst larger than the limits.
            time.sleep(0.0002)
        return handle

    for name, limits in LIMITS.items():
        subs[name] = await reporter.subscribe(nc, "storm.data", name=name, cb=slow(name), **limits)
    # One the reporter is not told of: reported under its subject pattern
    # from its first drop on.
    subs["storm.data"] = await nc.subscribe("storm.data", cb=slow("storm.data"),
                                            **LIMITS["by_messages"])
    await nc.flush()

    publisher = await nats.connect(args.server, name="storm-publisher", connect_timeout=CONNECT_TIMEOUT)
    for i in range(args.messages):
        await publisher.publish("storm.data", PAYLOAD)
        if i % 1000 == 999:
            await publisher.flush()
    await publisher.flush()

    deadline = time.monotonic() + args.timeout
    while any(s.delivered < args.messages or s.pending_msgs > 0 for s in subs.values()):
        if time.monotonic() > deadline:
            counts = {n: [s.delivered, s.pending_msgs] for n, s in subs.items()}
            sys.exit(f"not every message arrived and left the queues: {counts}")
        await asyncio.sleep(0.05)

    await reporter.stop()
    reports = await reporter.publish_now(nc)
    await nc.flush()
    counts = {"published": args.messages, "subscriptions": list(subs), "received": received,
              "reports": reports, "library": f"nats-py {nats_py_version}"}
    print(json.dumps(counts), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await publisher.close()
    await nc.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("server")
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--client", default="python-storm")
    parser.add_argument("--instance", default=None)
    parser.add_argument("--subject", default="nats_delivery.reports")
    parser.add_argument("--interval", type=float, default=0.2)
    parser.add_argument("--timeout", type=float, default=60.0)
    asyncio.run(storm(parser.parse_args()))


if __name__ == "__main__":
    main()
