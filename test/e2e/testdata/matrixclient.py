#!/usr/bin/env python3
"""The Python column of the client feature matrix (test/e2e/clientmatrix_test.go).

One process runs every feature it is given, each on its own topics, and prints one line per
feature: "MATRIX <feature> pass|fail|unsupported <detail>". Arguments are key=value: url,
tlsUrl, caFile, mtlsUrl, certFile, keyFile, authUrl, tokenFile, prefix (topic name prefix),
partitioned, terminated (topics the harness prepared), features (comma list).
"""

import contextlib
import re
import sys
import time

import _pulsar
import pulsar
from pulsar.schema import AvroSchema, Integer, JsonSchema, Record, String

CFG = {}


class Failed(Exception):
    """A feature failed; the message says what was wrong."""


class Unsupported(Exception):
    """The Python client has no API for the feature; the message says what is missing."""


def check(ok, what):
    if not ok:
        raise Failed(what)


def topic(name):
    return CFG["prefix"] + "-" + name


def payload(i):
    return ("m-%d" % i).encode()


def new_client(url, **opts):
    opts.setdefault("operation_timeout_seconds", 30)
    # The C++ client's own file logger: its log does not mix with the verdict lines.
    opts.setdefault("logger", pulsar.FileLogger(pulsar.LoggerLevel.Warn, "/dev/stderr"))
    return pulsar.Client(url, **opts)


def receive(consumer, what, timeout_ms=30000):
    try:
        return consumer.receive(timeout_millis=timeout_ms)
    except pulsar.Timeout:
        raise Failed("no message within %d s: %s" % (timeout_ms // 1000, what))


def subscribe(client, name, sub="s", kind=pulsar.ConsumerType.Exclusive, **opts):
    return client.subscribe(name, sub, consumer_type=kind, initial_position=pulsar.InitialPosition.Earliest, **opts)


def expect_in_order(consumer, start, n):
    for i in range(start, n):
        m = receive(consumer, "message %d" % i)
        check(m.data() == payload(i), "got %r, want m-%d" % (m.data(), i))
        consumer.acknowledge(m)


def roundtrip_with(client, name, n):
    c = subscribe(client, name)
    p = client.create_producer(name)
    for i in range(n):
        p.send(payload(i))
    expect_in_order(c, 0, n)
    p.close()
    c.close()


def produce_n(client, name, n):
    p = client.create_producer(name, batching_enabled=False)
    ids = [p.send(payload(i)) for i in range(n)]
    p.close()
    return ids


def partitioned(client):
    name = CFG["partitioned"]
    c = subscribe(client, name, kind=pulsar.ConsumerType.Shared)
    produce_n(client, name, 20)
    got, parts = set(), set()
    while len(got) < 20:
        m = receive(c, "partitioned, after %d" % len(got))
        got.add(m.data())
        parts.add(m.topic_name())
        c.acknowledge(m)
    c.close()
    check(len(parts) == 2, "messages from partitions %s, want both" % sorted(parts))


def sub_exclusive(client):
    name = topic("excl")
    c = subscribe(client, name)
    try:
        subscribe(client, name).close()
        raise Failed("a second consumer joined an Exclusive subscription")
    except pulsar.ConsumerBusy:
        pass
    produce_n(client, name, 10)
    expect_in_order(c, 0, 10)
    c.close()


def collect(consumers, n):
    """n distinct (payload, key) pairs from the consumers: which consumer got each."""
    by = {}
    deadline = time.monotonic() + 30
    while len(by) < n:
        check(time.monotonic() < deadline, "received %d of %d in 30 s" % (len(by), n))
        for k, c in enumerate(consumers):
            try:
                m = c.receive(timeout_millis=100)
            except pulsar.Timeout:
                continue
            by[(m.data(), m.partition_key())] = k
            c.acknowledge(m)
    for c in consumers:
        c.close()
    return by


def two(client, name, kind):
    return [subscribe(client, name, kind=kind, consumer_name=n) for n in ("a", "b")]


def send_keyed(client, name, n, keys):
    p = client.create_producer(name, batching_enabled=False)
    for i in range(n):
        p.send(payload(i), partition_key="k%d" % (i % keys))
    p.close()


def sub_shared(client):
    cs = two(client, topic("shared"), pulsar.ConsumerType.Shared)
    send_keyed(client, topic("shared"), 40, 40)
    by = collect(cs, 40)
    check(set(by.values()) == {0, 1}, "one consumer got all 40 messages")


def sub_failover(client):
    cs = two(client, topic("failover"), pulsar.ConsumerType.Failover)
    send_keyed(client, topic("failover"), 20, 20)
    by = collect(cs, 20)
    check(len(set(by.values())) == 1, "both consumers of a Failover subscription got messages")


def sub_key_shared(client):
    cs = two(client, topic("keyshared"), pulsar.ConsumerType.KeyShared)
    send_keyed(client, topic("keyshared"), 40, 8)
    owner = {}
    for (_, key), k in collect(cs, 40).items():
        check(owner.setdefault(key, k) == k, "key %s went to both consumers" % key)


def batching(client, on):
    name = topic("batch-on" if on else "batch-off")
    c = subscribe(client, name)
    p = client.create_producer(name, batching_enabled=on, batching_max_publish_delay_ms=200)
    for i in range(50):
        p.send_async(payload(i), None)
    p.flush()
    batched = 0
    for i in range(50):
        m = receive(c, "message %d" % i)
        check(m.data() == payload(i), "got %r, want m-%d" % (m.data(), i))
        batched += m.message_id().batch_index() >= 0
        c.acknowledge(m)
    p.close()
    c.close()
    check(batched > 0 if on else batched == 0, "%d of 50 messages arrived in batches" % batched)


def compression(client, kind):
    name = topic("compress-" + str(kind).split(".")[-1].lower())
    filler = "compressible " * 100
    c = subscribe(client, name)
    p = client.create_producer(name, compression_type=kind, batching_enabled=True)
    for i in range(20):
        p.send_async(("m-%d%s" % (i, filler)).encode(), None)
    p.flush()
    for i in range(20):
        m = receive(c, "message %d" % i)
        check(m.data() == ("m-%d%s" % (i, filler)).encode(), "message %d arrived altered" % i)
    p.close()
    c.close()


class Rec(Record):
    name = String()
    n = Integer()


def schema(client, kind, tag):
    name = topic("schema-" + tag)
    c = subscribe(client, name, schema=kind(Rec))
    # pulsar-client sends the schema with the PRODUCER command (it has no GET_OR_CREATE_SCHEMA).
    p = client.create_producer(name, schema=kind(Rec))
    p.send(Rec(name="alice", n=7))
    m = receive(c, "the typed message")
    v = m.value()
    check(v.name == "alice" and v.n == 7, "decoded %s/%s" % (v.name, v.n))
    p.close()
    c.close()


@contextlib.contextmanager
def discovery_period(seconds):
    """Makes Client.subscribe give a pattern consumer this polling period. pulsar-client takes
    subscribe(pattern_auto_discovery_period=...) and never passes it on (up to 3.13.0 at
    least, apache/pulsar-client-python#171), so the C++ client's default of 60 s applies. The
    consumer configurations subscribe makes while this is in force come with the period set;
    a pulsar-client that passes the argument on sets the same value again."""
    made = _pulsar.ConsumerConfiguration

    def configuration():
        conf = made()
        conf.pattern_auto_discovery_period(seconds)
        return conf

    _pulsar.ConsumerConfiguration = configuration
    try:
        yield
    finally:
        _pulsar.ConsumerConfiguration = made


def subscribe_pattern(client, pattern, period):
    """A pattern consumer (subscription "s", from the earliest message) that polls for the
    namespace's topics every period seconds."""
    with discovery_period(period):
        return client.subscribe(re.compile(pattern), "s", initial_position=pulsar.InitialPosition.Earliest,
                                pattern_auto_discovery_period=period)


def regex(client, tag, period):
    base = topic(tag)
    c = subscribe_pattern(client, base + "-.*", period)
    p = client.create_producer(base + "-late")
    p.send(payload(1))
    sent = time.monotonic()
    m = receive(c, "the topic created after subscribing", 60000)
    took = time.monotonic() - sent
    check(m.data() == payload(1), "got %r" % m.data())
    # Polling each second finds the topic within a few; at the default 60 s the receive above
    # is a coin toss between the first poll and its own timeout.
    check(took < 30, "the topic created after subscribing was consumed only after %.0f s: the consumer did not "
                     "poll every %d s" % (took, period))
    p.close()
    c.close()


def regex_watcher(_client):
    raise Unsupported("the C++ client under pulsar-client has no topic-list watcher (WATCH_TOPIC_LIST); "
                      "pattern consumers only poll")


def reader(client):
    name = topic("reader")
    ids = produce_n(client, name, 10)
    r = client.create_reader(name, pulsar.MessageId.earliest)
    for i in range(10):
        m = r.read_next(30000)
        check(m.data() == payload(i), "reader from earliest: message %d" % i)
    r.close()
    r = client.create_reader(name, ids[4])
    m = r.read_next(30000)
    check(m.data() == payload(5), "reader after message 4 started at %r" % m.data())
    r.close()


def seek_id(client):
    name = topic("seekid")
    c = subscribe(client, name)
    ids = produce_n(client, name, 10)
    expect_in_order(c, 0, 10)
    c.seek(ids[3])  # delivery resumes after the given message
    expect_in_order(c, 4, 10)
    c.close()


def seek_time(client):
    name = topic("seektime")
    c = subscribe(client, name)
    p = client.create_producer(name, batching_enabled=False)
    for i in range(5):
        p.send(payload(i))
    time.sleep(0.05)  # publish times on either side of the seek time
    at = int(time.time() * 1000)
    time.sleep(0.05)
    for i in range(5, 10):
        p.send(payload(i))
    expect_in_order(c, 0, 10)
    c.seek(at)
    expect_in_order(c, 5, 10)
    p.close()
    c.close()


def nack(client):
    name = topic("nack")
    c = subscribe(client, name, kind=pulsar.ConsumerType.Shared, negative_ack_redelivery_delay_ms=500)
    produce_n(client, name, 1)
    c.negative_acknowledge(receive(c, "first delivery"))
    m = receive(c, "redelivery after the negative ack")
    check(m.data() == payload(0) and m.redelivery_count() == 1,
          "redelivered %r with count %d" % (m.data(), m.redelivery_count()))
    c.acknowledge(m)
    c.close()


def dead_letter(client):
    name = topic("dlq")
    dlq = subscribe(client, name + "-dead")
    c = subscribe(client, name, kind=pulsar.ConsumerType.Shared, negative_ack_redelivery_delay_ms=300,
                  dead_letter_policy=pulsar.ConsumerDeadLetterPolicy(1, name + "-dead"))
    produce_n(client, name, 1)
    # Negative acks until the message is moved: how many deliveries that takes is the client's
    # reading of max_redeliver_count.
    deadline, deliveries = time.monotonic() + 30, 0
    try:
        while time.monotonic() < deadline:
            try:
                c.negative_acknowledge(c.receive(timeout_millis=200))
                deliveries += 1
            except pulsar.Timeout:
                pass
            try:
                dead = dlq.receive(timeout_millis=200)
            except pulsar.Timeout:
                continue
            check(dead.data() == payload(0) and deliveries > 0, "dead letter %r after %d deliveries" % (dead.data(), deliveries))
            return
        raise Failed("nothing on the dead-letter topic within 30 s (%d deliveries)" % deliveries)
    finally:
        c.close()
        dlq.close()


def retry_topic(_client):
    raise Unsupported("pulsar-client has no retry letter topic (no reconsume_later)")


def delayed(client):
    """A message delayed by 3 s is sent before an undelayed one, and must arrive after it."""
    from datetime import timedelta
    name = topic("delayed")
    c = subscribe(client, name, kind=pulsar.ConsumerType.Shared)
    p = client.create_producer(name, batching_enabled=False)
    p.send(payload(0), deliver_after=timedelta(seconds=3))
    p.send(payload(1))
    first, second = receive(c, "first"), receive(c, "second")
    check(first.data() == payload(1) and second.data() == payload(0),
          "order %r, %r; want the delayed m-0 last" % (first.data(), second.data()))
    p.close()
    c.close()


def non_persistent(client):
    roundtrip_with(client, topic("np").replace("persistent://", "non-persistent://"), 20)


def exclusive_producer(client):
    name = topic("exclprod")
    mode = pulsar.ProducerAccessMode.Exclusive
    a = client.create_producer(name, access_mode=mode)
    try:
        client.create_producer(name, access_mode=mode).close()
        raise Failed("a second Exclusive producer was created")
    except (pulsar.ProducerFenced, pulsar.ProducerBusy):
        pass
    a.close()
    b = client.create_producer(name, access_mode=mode)
    b.send(payload(0))
    b.close()


def termination(_client):
    raise Unsupported("pulsar-client's Consumer has no has_reached_end_of_topic")


def transactions(_client):
    raise Unsupported("pulsar-client's Client has no transaction API")


def chunking(client):
    """pulsar-client has no chunk size option: the message is over the brokers' 5 MiB limit."""
    name = topic("chunks")
    big = bytes((i * 31 + 7) & 0xFF for i in range(6 << 20))
    c = subscribe(client, name)
    p = client.create_producer(name, chunking_enabled=True, batching_enabled=False, send_timeout_millis=120000)
    p.send(big)
    m = receive(c, "the chunked message", 120000)
    check(m.data() == big, "the 6 MiB message arrived altered (%d bytes)" % len(m.data()))
    p.close()
    c.close()


def token_refresh(_client):
    """Tokens that expire every few seconds, renewed by the harness in tokenFile: the proxy
    challenges the client, which answers with the file's current token."""
    def supplier():
        with open(CFG["tokenFile"]) as f:
            return f.read().strip()
    tc = new_client(CFG["authUrl"], authentication=pulsar.AuthenticationToken(supplier))
    try:
        c = tc.subscribe(topic("refresh"), "s")
        p = tc.create_producer(topic("refresh"))
        end, i = time.monotonic() + 15, 0
        while time.monotonic() < end:
            p.send(payload(i))
            m = receive(c, "message %d" % i)
            check(m.data() == payload(i), "got %r, want m-%d" % (m.data(), i))
            c.acknowledge(m)
            time.sleep(0.2)
            i += 1
    finally:
        tc.close()


def tls(_client):
    tc = new_client(CFG["tlsUrl"], tls_trust_certs_file_path=CFG["caFile"], tls_validate_hostname=True)
    try:
        roundtrip_with(tc, topic("tls"), 10)
    finally:
        tc.close()


def mtls(_client):
    tc = new_client(CFG["mtlsUrl"], tls_trust_certs_file_path=CFG["caFile"], tls_validate_hostname=True,
                    authentication=pulsar.AuthenticationTLS(CFG["certFile"], CFG["keyFile"]))
    try:
        roundtrip_with(tc, topic("mtls"), 10)
    finally:
        tc.close()


FEATURES = {
    "produce-consume": lambda c: roundtrip_with(c, topic("pc"), 20),
    "partitioned": partitioned,
    "sub-exclusive": sub_exclusive,
    "sub-shared": sub_shared,
    "sub-failover": sub_failover,
    "sub-key-shared": sub_key_shared,
    "batching-on": lambda c: batching(c, True),
    "batching-off": lambda c: batching(c, False),
    "compression-lz4": lambda c: compression(c, pulsar.CompressionType.LZ4),
    "compression-zlib": lambda c: compression(c, pulsar.CompressionType.ZLib),
    "compression-zstd": lambda c: compression(c, pulsar.CompressionType.ZSTD),
    "compression-snappy": lambda c: compression(c, pulsar.CompressionType.SNAPPY),
    "schema-json": lambda c: schema(c, JsonSchema, "json"),
    "schema-avro": lambda c: schema(c, AvroSchema, "avro"),
    "regex-polling": lambda c: regex(c, "rp", 1),
    "regex-watcher": regex_watcher,
    "reader": reader,
    "seek-id": seek_id,
    "seek-time": seek_time,
    "nack-redelivery": nack,
    "dead-letter": dead_letter,
    "retry-topic": retry_topic,
    "delayed-delivery": delayed,
    "non-persistent": non_persistent,
    "exclusive-producer": exclusive_producer,
    "termination": termination,
    "transactions": transactions,
    "chunking": chunking,
    "token-refresh": token_refresh,
    "tls": tls,
    "mtls": mtls,
}


def report(name, result, detail=""):
    print("MATRIX %s %s %s" % (name, result, detail.replace("\n", " ")), flush=True)


def main():
    for a in sys.argv[1:]:
        k, _, v = a.partition("=")
        CFG[k] = v
    print("MATRIX-CLIENT", pulsar.__version__, flush=True)
    client = new_client(CFG["url"])
    for name in CFG["features"].split(","):
        fn = FEATURES.get(name)
        if fn is None:
            report(name, "unsupported", "no such feature in matrixclient.py")
            continue
        try:
            fn(client)
            report(name, "pass")
        except Unsupported as e:
            report(name, "unsupported", str(e))
        except Failed as e:
            report(name, "fail", str(e))
        except Exception as e:  # the client's own errors: connect, subscribe, send
            report(name, "fail", "%s: %s" % (type(e).__name__, e))
    client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
