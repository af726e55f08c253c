#!/usr/bin/env python3
"""Produces and/or consumes messages with the Python Pulsar client (pulsar-client), for the
end-to-end tests: is every message that was sent received, intact?

Modes:
  roundtrip  subscribe, produce COUNT messages, receive them all and ack (the default)
  produce    produce COUNT messages only (another client consumes them)
  consume    subscribe from the earliest position and receive COUNT messages another client
             produced with the same payload scheme

Message i's payload is payload(prefix, i) below; the Go tests build the same bytes. The last
line of stdout is a JSON summary. Exit status: 0 all well, 1 a message lost, altered,
duplicated or out of order, 2 an error (connect, subscribe, send).
"""

import argparse
import hashlib
import json
import sys
import time

import pulsar


SIZE = None  # --size: every payload padded to this many bytes


def payload(prefix, i):
    """Message i: "<prefix>-<i, 8 digits>-" then i % 700 filler bytes derived from the header
    (or as many as make SIZE bytes), so sizes vary and every payload is distinct and checkable
    without shared state."""
    head = "%s-%08d-" % (prefix, i)
    filler = hashlib.sha256(head.encode()).hexdigest().encode()
    n = i % 700 if SIZE is None else max(SIZE - len(head), 0)
    return head.encode() + (filler * (n // len(filler) + 1))[:n]


def index_of(prefix, data):
    """The index encoded in a payload, or None if it is not one of ours."""
    start = prefix.encode() + b"-"
    if not data.startswith(start) or len(data) < len(start) + 9:
        return None
    digits = data[len(start):len(start) + 8]
    return int(digits) if digits.isdigit() else None


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", required=True, help="service URL, pulsar:// or pulsar+ssl://")
    p.add_argument("--topic", required=True)
    p.add_argument("--count", type=int, default=100)
    p.add_argument("--mode", choices=["roundtrip", "produce", "consume"], default="roundtrip")
    p.add_argument("--prefix", default="py", help="payload prefix (both sides must agree)")
    p.add_argument("--subscription", default="pyclient")
    p.add_argument("--timeout", type=float, default=120, help="seconds to wait for all messages")
    p.add_argument("--operation-timeout", type=int, default=60, help="the client's operation timeout, seconds")
    p.add_argument("--trust-file", help="CA certificates (PEM) that sign the server's certificate")
    p.add_argument("--no-hostname-check", action="store_true", help="do not check the server's hostname")
    p.add_argument("--cert-file", help="client certificate (PEM) for mutual TLS")
    p.add_argument("--key-file", help="client key (PEM) for mutual TLS")
    p.add_argument("--log-file", default="/dev/stderr", help="where the client logs (default stderr)")
    p.add_argument("--token-file", help="file holding a token for AuthenticationToken (not argv: "
                                        "a token on the command line shows in process lists)")
    p.add_argument("--size", type=int, help="pad every payload to this many bytes")
    p.add_argument("--chunking", action="store_true",
                   help="produce with chunking (batching off): messages over the broker's limit are split")
    return p.parse_args()


def new_client(args):
    # The C++ client's own file logger, not a Python logging.Logger: that one is called back
    # from the client's threads and is gone during interpreter shutdown.
    opts = {"operation_timeout_seconds": args.operation_timeout, "connection_timeout_ms": 10000,
            "logger": pulsar.FileLogger(pulsar.LoggerLevel.Info, args.log_file)}
    if args.url.startswith("pulsar+ssl://"):
        opts["tls_validate_hostname"] = not args.no_hostname_check
        if args.trust_file:
            opts["tls_trust_certs_file_path"] = args.trust_file
    if args.cert_file:
        opts["tls_certificate_file_path"] = args.cert_file
        opts["tls_private_key_file_path"] = args.key_file
    if args.token_file:
        with open(args.token_file) as f:
            opts["authentication"] = pulsar.AuthenticationToken(f.read().strip())
    return pulsar.Client(args.url, **opts)


def subscribe(client, args):
    return client.subscribe(args.topic, args.subscription, consumer_type=pulsar.ConsumerType.Exclusive,
                            initial_position=pulsar.InitialPosition.Earliest)


def produce(client, args):
    """Sends COUNT messages asynchronously, then waits for every receipt. Returns the number
    the broker confirmed and the first error, if any."""
    opts = {"block_if_queue_full": True}
    if args.chunking:
        opts.update(chunking_enabled=True, batching_enabled=False, send_timeout_millis=120000)
    producer = client.create_producer(args.topic, **opts)
    done = {"ok": 0, "err": None}

    def receipt(res, _msg_id):
        if res == pulsar.Result.Ok:
            done["ok"] += 1
        elif done["err"] is None:
            done["err"] = str(res)

    for i in range(args.count):
        producer.send_async(payload(args.prefix, i), receipt, properties={"i": str(i)})
    producer.flush()
    producer.close()
    return done["ok"], done["err"]


class Tally:
    """What a consumer saw: which indexes, from which partitions, and what went wrong."""

    def __init__(self, prefix, count):
        self.prefix, self.count = prefix, count
        self.seen = set()
        self.partitions = {}
        self.last = {}
        self.duplicates = self.mismatched = self.out_of_order = 0

    def add(self, msg):
        data, topic = msg.data(), msg.topic_name()
        i = index_of(self.prefix, data)
        self.partitions[topic] = self.partitions.get(topic, 0) + 1
        if i is None or i >= self.count or data != payload(self.prefix, i):
            self.mismatched += 1
            return
        if i in self.seen:
            self.duplicates += 1
            return
        if i <= self.last.get(topic, -1):
            self.out_of_order += 1  # a producer's messages keep their order within a partition
        self.last[topic] = i
        self.seen.add(i)

    def missing(self):
        return [i for i in range(self.count) if i not in self.seen]


def receive_all(consumer, args):
    tally = Tally(args.prefix, args.count)
    deadline = time.monotonic() + args.timeout
    while len(tally.seen) < args.count and time.monotonic() < deadline:
        try:
            msg = consumer.receive(timeout_millis=1000)
        except pulsar.Timeout:
            continue
        tally.add(msg)
        consumer.acknowledge(msg)
    return tally


def run(args, summary):
    client = new_client(args)
    try:
        consumer = subscribe(client, args) if args.mode != "produce" else None
        if args.mode != "consume":
            summary["sent"], err = produce(client, args)
            if err:
                summary["error"] = "send: " + err
                return 2
        if consumer is not None:
            tally = receive_all(consumer, args)
            consumer.close()
            missing = tally.missing()
            summary.update(received=len(tally.seen), duplicates=tally.duplicates, mismatched=tally.mismatched,
                           out_of_order=tally.out_of_order, missing=len(missing), first_missing=missing[:10],
                           partitions=tally.partitions)
            if missing or tally.duplicates or tally.mismatched or tally.out_of_order:
                return 1
        return 0
    finally:
        client.close()


def main():
    global SIZE
    args = parse_args()
    SIZE = args.size
    summary = {"mode": args.mode, "topic": args.topic, "count": args.count, "client": pulsar.__version__}
    began = time.monotonic()
    try:
        code = run(args, summary)
    except Exception as e:  # connect, lookup, subscribe: report it in the summary too
        summary["error"] = "%s: %s" % (type(e).__name__, e)
        code = 2
    summary["seconds"] = round(time.monotonic() - began, 2)
    print(json.dumps(summary, sort_keys=True), flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
