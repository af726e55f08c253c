"""The Python client of the peer clients check (test/peer/peer.sh clients).

With an HTTP service URL (lookups over HTTP) it produces COUNT messages round robin over the
partitions of TOPIC and consumes them all back, then prints
    result sent=N received=N partitions=P
(P: how many partitions it received from) and exits 0, or says what went wrong and exits 1.
Arguments: SERVICE_URL TOPIC COUNT.
"""
import sys

import pulsar


def main(url, topic, count):
    client = pulsar.Client(url, operation_timeout_seconds=30)
    try:
        consumer = client.subscribe(topic, "python-http-lookup",
                                    initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic, batching_enabled=False,
                                          message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution)
        for i in range(count):
            producer.send(("python-%d" % i).encode())
        got, partitions = set(), set()
        while len(got) < count:
            try:
                m = consumer.receive(timeout_millis=30000)
            except pulsar.Timeout:
                print("timed out after %d of %d messages" % (len(got), count))
                return 1
            got.add(m.data().decode())
            partitions.add(m.topic_name())
            consumer.acknowledge(m)
        print("result sent=%d received=%d partitions=%d" % (count, len(got), len(partitions)))
        return 0
    finally:
        client.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
