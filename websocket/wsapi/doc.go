// Package wsapi is the syntax of Pulsar's WebSocket API as Pulsar 4.0.8's WebSocket service
// reads and writes it: the endpoint paths (v1 with a cluster, v2), the query parameters of
// producers, consumers and readers, the JSON messages both ways, message ids (a MessageIdData
// in base64) and times (ISO-8601 with an offset). It only parses and formats: nothing here
// dials, authenticates or decides, so all of it can be fuzzed.
package wsapi
