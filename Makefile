# pulsar-proxy: build, test and run targets. CI runs `make test` (.ci/run).
#
#   make test       test-unit, then test-e2e, with the time of each phase
#   make test-unit  the tracked-files check, the function-length check, go vet of every module,
#                   go test -race of the product's packages and the benchmark's (no Java
#                   needed), including the chart tests (helm, and tools/chartcheck's strict
#                   decoding), the image tool's (tools/image) and the operator pages' checks
#                   (tools/docscheck)
#   make test-e2e   warm the rig cache (and the Python client's virtualenv), then go test of the
#                   test module (test/...) against real brokers and Consul
#   make test-fault the fault, storm and stuck-client tests alone (test/e2efault; test-fault-long:
#                   the kills at 2,000 msg/s with a minute of load after recovery)
#   make soak       30 minutes of mixed load through one proxy, its resources sampled (test/soak)
#   make rig-up     start the test rig in .rigs/rig and print its addresses (rig-down stops it)
#
# The end-to-end tests start their own rig; to run them against one started by `make rig-up`,
# export PULSAR_PROXY_RIG=$(pwd)/.rigs/rig/rig.env (the tests then leave it running).

SHELL := /bin/bash
GO ?= go
RIG := test/rig/rig.sh
E2E_TIMEOUT ?= 40m

# Eight Go modules, so that the product's go.mod holds only what the binary and its unit tests
# import: the product (.); test/ (the rig, the end-to-end tests, the demo: pulsar-client-go);
# bench/ (the benchmark: golang.org/x/image for its chart); tools/image (the image builder);
# tools/release (make release: the SBOM generator, cyclonedx-gomod, as a pinned tool);
# tools/observability (the dashboard and alert checks: Prometheus's parser and engine);
# tools/chartcheck (the chart's objects decoded strictly: k8s.io/api, the Prometheus
# operator's API types); tools/docscheck (the operator pages' checks: a Markdown parser).
# test/ and bench/ take the product (and bench the rig) from this checkout by replace
# directives; a module's packages are vetted and tested from its own directory (go -C DIR).

# $(call timed,NAME,COMMAND): runs COMMAND and prints how long it took, keeping its exit code.
define timed
	@t0=$$(date +%s.%N); rc=0; $(2) || rc=$$?; \
	echo "== $(1): $$(awk -v a=$$t0 -v b=$$(date +%s.%N) 'BEGIN { printf "%.1fs", b - a }') (exit $$rc)"; \
	exit $$rc
endef

.PHONY: test test-unit test-e2e e2e-prepare e2e-python e2e-run rig-up rig-down rig-status

test:
	$(call timed,test-unit,$(MAKE) --no-print-directory test-unit)
	$(call timed,test-e2e,$(MAKE) --no-print-directory test-e2e)

# The unit tests in two groups side by side (the Go packages' vet and race tests, and the fuzz
# targets and the tools' checks): the race tests leave a core idle for long stretches. Each
# group's output is printed whole when it ends.
test-unit:
	$(call timed,tracked files (no executables; binary or large files only when allowed),$(MAKE) --no-print-directory check-files)
	$(call timed,function length (at most 60 lines; tools/funclen),$(MAKE) --no-print-directory check-funclen)
	$(call timed,helm (pinned; built once into .cache),$(MAKE) --no-print-directory helm-prepare)
	$(MAKE) --no-print-directory -j2 --output-sync=target unit-go unit-tools

.PHONY: unit-go unit-tools
unit-go:
	$(GO) vet ./...
	$(GO) vet -C test ./...
	$(GO) vet -C test -tags soak ./soak
	$(GO) vet -C bench ./...
	$(GO) test -race ./...
	$(GO) test -run 'AllocsPerRun|SteadyStateAllocs' -count=1 ./frame ./mux # pools keep only without -race
	$(GO) test -C bench -race ./...

unit-tools:
	$(call timed,fuzz targets (a few seconds' worth of executions each),$(MAKE) --no-print-directory fuzz-short)
	$(call timed,image test (tools/image),$(MAKE) --no-print-directory image-test)
	$(call timed,release test (tools/release: binary, SBOM, checksums; go install @version),$(MAKE) --no-print-directory release-test)
	$(call timed,chart objects decoded strictly (tools/chartcheck),$(MAKE) --no-print-directory chartcheck-test)
	$(call timed,promtool (pinned; built once into .cache),$(MAKE) --no-print-directory promtool-prepare)
	$(call timed,alert rules and dashboard checks (tools/observability),$(MAKE) --no-print-directory observability-test)
	$(call timed,operator pages held to the product (tools/docscheck),$(MAKE) --no-print-directory docs-test)

# Fails when git tracks an executable (ELF, Mach-O, PE), or a file with NUL bytes or larger
# than 1 MiB that .ci/large-files.allow does not name (tools/trackedfiles; its tests run with
# the product's).
.PHONY: check-files
check-files:
	$(GO) run ./tools/trackedfiles -allow .ci/large-files.allow .

# Fails when a function is longer than 60 lines, from its func line to its closing brace
# (tools/funclen; its tests run with the product's): the product's code, its tests aside, and
# the benchmark's and the tools' modules, their tests included.
.PHONY: check-funclen
check-funclen:
	$(GO) run ./tools/funclen .
	$(GO) run ./tools/funclen -tests bench tools/image tools/release tools/observability tools/trackedfiles tools/funclen tools/docscheck

# Every fuzz target, package:name:executions. make test runs each for its count of executions
# (about four seconds' worth here): a count, not a duration, because Go 1.26's fuzzing can fail
# a -fuzztime duration with a bare "context deadline exceeded" when the deadline races a
# worker (golang/go#75804, fixed in Go 1.27). make fuzz runs each for FUZZ_LONG (a campaign:
# run it on an idle machine and report executions and crashes with the change). A crasher is
# written to the package's testdata/fuzz and becomes a seed once committed.
FUZZ_TARGETS = ./frame:FuzzReadFrame:30000 ./frame:FuzzCanonicalCommand:20000 ./frame:FuzzCanonicalMetadata:20000 ./session:FuzzClientRules:3000 \
	./session:FuzzDirectPipe:2000 ./session:FuzzHandshake:3000 ./authz:FuzzParseTopic:15000 \
	./brokers:FuzzAllowTarget:8000 ./authn:FuzzTokenAuthenticate:25000 ./lookup:FuzzLookupAnswer:5000 \
	./internal/config:FuzzLoad:2500 ./internal/listener:FuzzProxyHeader:3000 \
	./adminproxy:FuzzClassify:30000 ./discovery:FuzzZKBroker:15000 ./mux:FuzzMappingRoundTrip:600 \
	./session:FuzzMultiplexedNeighbours:4000 ./sni:FuzzReadHello:40000 \
	./websocket/wsapi:FuzzParse:25000
FUZZTIME ?=
FUZZ_LONG ?= 10m

.PHONY: fuzz fuzz-short
fuzz-short:
	@out=$$(mktemp); trap 'rm -f $$out' EXIT; \
	for t in $(FUZZ_TARGETS); do pkg=$${t%%:*}; rest=$${t#*:}; name=$${rest%%:*}; \
	  budget=$(FUZZTIME); budget=$${budget:-$${rest##*:}x}; \
	  if $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $$budget $$pkg >$$out 2>&1; then \
	    grep -E 'execs:|coverage' $$out | tail -1 | sed "s|^|$$name: |"; \
	  else grep -v '^fuzz: elapsed' $$out | sed "s|^|$$name: |"; exit 1; fi; done

fuzz:
	$(MAKE) --no-print-directory fuzz-short FUZZTIME=$(FUZZ_LONG)

test-e2e:
	$(call timed,rig cache (Pulsar jars + Consul),$(MAKE) --no-print-directory e2e-prepare)
	$(call timed,python client (virtualenv in .cache),$(MAKE) --no-print-directory e2e-python)
	$(call timed,go test ./... in test/ and the peer suite's subset (pulsar-client-go's tests directly and through the proxy),$(MAKE) --no-print-directory e2e-run)

# Warms .cache (downloads the Pulsar jars, builds Consul). Outside CI a missing tool is left for
# TestMain to report as a skip; on CI it fails here.
e2e-prepare:
	@if [[ -n "$$PULSAR_PROXY_RIG" ]]; then echo "using the running rig $$PULSAR_PROXY_RIG"; \
	elif ! $(RIG) prepare; then \
	  if [[ -n "$$CI" && "$$CI" != false ]]; then exit 1; fi; \
	  echo "rig cache not ready; the end-to-end tests will say why they skip or fail"; \
	fi

# Installs the pinned Python client (test/rig/python-client.sh) for the tests that run it;
# a no-op when cached. Outside CI a missing python3 is left for those tests to report as a skip.
e2e-python:
	@if ! test/rig/python-client.sh; then \
	  if [[ -n "$$CI" && "$$CI" != false ]]; then exit 1; fi; \
	  echo "Python client not installed; the Python client tests will say why they skip"; \
	fi

# Runs the end-to-end tests, then checks that they left no rig process behind.
# test/run-e2e.sh runs three lanes side by side: test/e2e's two halves (E2E_HALF: half 1 the
# direct tests, then the peer suite's subset in a network namespace of its own; half 2, with a
# rig of its own in a network namespace of its own, the long direct tests, the direct-session
# tests again with broker.multiplex on, then the tests that stop ZooKeeper or kill brokers), and
# the other packages one at a time (test/e2eauth, test/e2efault and test/firstday each with a
# rig of its own port block). At most three rigs share the cores.
# The peer suite's subset, run by test/run-e2e.sh after half 1. Named through a variable:
# a recipe line that names MAKE itself runs even under make -n, and this one runs the suite.
PEER_QUICK_RUN = $(MAKE) --no-print-directory peer-suite-quick
AUTH_RIG_DIR = $${RIG_AUTH_DIR:-$${RIG_STATE:-$(CURDIR)/.rigs}/rig-auth}
FAULT_RIG_DIR = $${RIG_FAULT_DIR:-$${RIG_STATE:-$(CURDIR)/.rigs}/rig-fault}
FIRSTDAY_RIG_DIR = $${RIG_FIRSTDAY_DIR:-$${RIG_STATE:-$(CURDIR)/.rigs}/rig-firstday}
HALF2_RIG_DIR = $${RIG_STATE:-$(CURDIR)/.rigs}/e2e-half2/rig
e2e-run:
	@rc=0; test/run-e2e.sh "$(GO)" $(E2E_TIMEOUT) $(PEER_QUICK_RUN) || rc=$$?; \
	if [[ -z "$$PULSAR_PROXY_RIG" ]]; then \
	  st=0; $(RIG) status >/dev/null 2>&1 || st=$$?; \
	  if [[ $$st -ne 3 ]]; then echo "test-e2e left rig processes running; stopping them"; $(RIG) down; rc=1; fi; \
	  st=0; RIG_DIR=$(HALF2_RIG_DIR) $(RIG) status >/dev/null 2>&1 || st=$$?; \
	  if [[ $$st -ne 3 ]]; then echo "test-e2e left the rig in $(HALF2_RIG_DIR) running; stopping it"; RIG_DIR=$(HALF2_RIG_DIR) $(RIG) down; rc=1; fi; \
	fi; \
	if [[ -z "$$PULSAR_PROXY_AUTH_RIG" ]]; then \
	  for d in $(AUTH_RIG_DIR) $(AUTH_RIG_DIR)-trusting; do \
	    st=0; RIG_DIR=$$d $(RIG) status >/dev/null 2>&1 || st=$$?; \
	    if [[ $$st -ne 3 ]]; then echo "test-e2e left the rig in $$d running; stopping it"; RIG_DIR=$$d $(RIG) down; rc=1; fi; \
	  done; \
	fi; \
	if [[ -z "$$PULSAR_PROXY_FAULT_RIG" ]]; then \
	  st=0; RIG_DIR=$(FAULT_RIG_DIR) $(RIG) status >/dev/null 2>&1 || st=$$?; \
	  if [[ $$st -ne 3 ]]; then echo "test-e2e left the rig in $(FAULT_RIG_DIR) running; stopping it"; RIG_DIR=$(FAULT_RIG_DIR) $(RIG) down; rc=1; fi; \
	fi; \
	if [[ -z "$$PULSAR_PROXY_FIRSTDAY_RIG" ]]; then \
	  st=0; RIG_DIR=$(FIRSTDAY_RIG_DIR) $(RIG) status >/dev/null 2>&1 || st=$$?; \
	  if [[ $$st -ne 3 ]]; then echo "test-e2e left the rig in $(FIRSTDAY_RIG_DIR) running; stopping it"; RIG_DIR=$(FIRSTDAY_RIG_DIR) $(RIG) down; rc=1; fi; \
	fi; \
	exit $$rc

# The peer suite gate (test/peer/README.md): pulsar-client-go's own tests, from the module cache
# at the version test/go.mod pins, directly and through the proxy, each run in a network
# namespace of its own (unshare -rn; the test process's in the proxy run reaches no broker);
# fails on a test that passes directly and fails through the proxy (a difference is rerun
# PEER_RERUNS times in both modes first: test/peer/README.md). peer-suite runs them all
# (about an hour) and writes docs/peer-suite.md; peer-suite-quick, part of test-e2e, runs
# PEER_QUICK (the tests of HTTP lookups, Basic authentication, schemas and transactions). Both
# then run the Java and the Python client with the proxy's HTTP URL on the same rig
# (peer-clients alone: that check only; the full run writes docs/peer-clients.md).
# Selecting tests: make peer-suite-quick PEER_QUICK='^TestName$$' PEER_COUNT=10.
PEER_QUICK ?= ^(TestHTTPBasicAuth|TestHTTPSBasicAuth|TestServiceUrlTLSWithTLSTransportWithBasicAuth|TestWebServiceUrlTLSWithTLSTransportWithBasicAuth|TestProducerWithSchemaAndConsumerSchemaNotFound|TestHTTPLookupJsonSchema|TestHTTPTopicPartitions|TestRetryWithMultipleHttpHosts|TestHTTPTokenAuth|TestTxn_ConsumeAndProduce|TestTxn_AckAndSend)$$
.PHONY: peer-prepare peer-suite peer-suite-quick peer-clients
peer-prepare:
	test/peer/peer.sh prepare

peer-suite: peer-prepare
	unshare -rn sh -c 'ip link set lo up && PEER_CLIENTS=docs/peer-clients.md exec test/peer/peer.sh run "" docs/peer-suite.md'

peer-suite-quick: peer-prepare
	unshare -rn sh -c 'ip link set lo up && PEER_CLIENTS=bin/peer/peer-clients.md exec test/peer/peer.sh run "$(PEER_QUICK)"'

# The Java and the Python client with the proxy's HTTP URL as service URL, no broker
# reachable, produce and consume over partitions that both brokers own (docs/peer-clients.md).
peer-clients: peer-prepare
	unshare -rn sh -c 'ip link set lo up && exec test/peer/peer.sh clients docs/peer-clients.md'

# The fault, storm and stuck-client tests alone (test/e2efault, its own rig; part of make test).
.PHONY: test-fault test-fault-long
test-fault:
	$(GO) test -C test -count=1 -timeout $(E2E_TIMEOUT) -v ./e2efault

# The broker and proxy kills at the issue's rate: 1,000 msg/s per flow (2,000 in all), a minute
# of load after the clients recovered (about 6 minutes).
test-fault-long:
	E2EFAULT_RATE=1000 E2EFAULT_AFTER_RECOVERY=60 $(GO) test -C test -count=1 -timeout $(E2E_TIMEOUT) -v \
	  -run 'TestBrokerKilledUnderLoad|TestBrokerFrozenUnderLoad|TestProxyKilledUnderLoad' ./e2efault

# The soak (test/soak; not part of make test): SOAK_DURATION of mixed load through one proxy
# against a rig of its own (ports 21xxx, .rigs/rig-soak), the proxy's RSS, heap, goroutines
# and descriptors sampled every 5 s; results in test/soak/results (soak.csv, summary.md,
# soak.png), and the summary in docs/reliability.md (between its soak markers).
SOAK_DURATION ?= 30m
.PHONY: soak
soak:
	$(call timed,rig cache (Pulsar jars + Consul),$(RIG) prepare)
	SOAK_DURATION=$(SOAK_DURATION) $(GO) test -C test -tags soak -count=1 -run TestSoak -timeout 60m -v ./soak

rig-up:
	$(RIG) up
	@echo "for the e2e tests: export PULSAR_PROXY_RIG=$${RIG_DIR:-$${RIG_STATE:-$(CURDIR)/.rigs}/rig}/rig.env"

rig-down:
	$(RIG) down

rig-status:
	$(RIG) status

# --- the product -------------------------------------------------------------------------

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
# The commit's time, so the same commit gives the same image.
CREATED ?= $(shell git log -1 --format=%cI 2>/dev/null)

.PHONY: demo build proto image image-test release release-test helm helm-prepare chart-test chartcheck-test

# The quick start: a real two-broker cluster, the proxy in front, produce and consume through
# it, print what happened. Uses a rig named by PULSAR_PROXY_RIG if one is up, else starts one.
demo:
	$(call timed,rig cache (Pulsar jars + Consul),$(RIG) prepare)
	$(call timed,demo,$(GO) run -C test ./demo)

build:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o bin/pulsar-proxy ./cmd/pulsar-proxy

# The container image without a Docker daemon: bin/image/oci (OCI layout) and
# bin/image/pulsar-proxy.tar (`docker load`). tools/image is its own module, so its
# dependencies stay out of go.mod. The Dockerfile builds the same image with Docker.
image:
	$(GO) run -C tools/image . -repo $(CURDIR) -out $(CURDIR)/bin/image \
	  -version $(VERSION) -revision "$(REVISION)" -created "$(CREATED)"

# The operator's pages (README.md, CONTRIBUTING.md, docs/*.md) held to the product: links and
# anchors resolve, the README's quick start is `make demo` and `make test` (make -n runs both),
# its configuration passes check-config, the metrics, keys and alerts they name exist
# (tools/docscheck: its own module, so its Markdown parser stays out of go.mod).
.PHONY: docs-test
docs-test:
	cd tools/docscheck && $(GO) vet ./... && $(GO) test -race -count=1 ./...

# Builds the image into a temp dir, reads it back, runs its binary; checks the Dockerfile, the
# multi-architecture index, and that the image exposes the chart's container ports.
image-test:
	cd tools/image && $(GO) vet ./... && $(GO) test -race -count=1 ./...

# The release (docs/install.md), in RELEASE_OUT (bin/release): a static binary for each of
# RELEASE_PLATFORMS (-trimpath, the version of git describe stamped in), a CycloneDX SBOM of
# each (cyclonedx-gomod, from the modules the binary records), the multi-architecture image
# (an OCI index of linux/amd64 and linux/arm64 holding those binaries: bin/release/image/oci
# and one tar), and SHA256SUMS over the files. RELEASE_IMAGE=false leaves the image out (the
# first-day test builds the host's binary so). tools/release is its own module.
RELEASE_OUT ?= $(CURDIR)/bin/release
RELEASE_PLATFORMS ?= linux/amd64,linux/arm64,darwin/arm64
RELEASE_IMAGE ?= true
release:
	$(GO) run -C tools/release . -repo $(CURDIR) -out $(RELEASE_OUT) -version $(VERSION) \
	  -revision "$(REVISION)" -created "$(CREATED)" -platforms $(RELEASE_PLATFORMS) -image=$(RELEASE_IMAGE)

# The release tool's tests: the host's release (static, stamped, SBOM, sha256sum -c) and
# `go install .../cmd/pulsar-proxy@VERSION` from a module zip of HEAD, offline.
release-test:
	cd tools/release && $(GO) vet ./... && $(GO) test -race -count=1 ./...

# The pinned helm in .cache (built once from the module proxy).
helm:
	test/rig/build-helm.sh

# As helm, but outside CI a failed build is left for the chart tests to report as a skip.
helm-prepare:
	@if ! test/rig/build-helm.sh; then \
	  if [[ -n "$$CI" && "$$CI" != false ]]; then exit 1; fi; \
	  echo "helm not built; the chart tests will say why they skip"; \
	fi

# helm lint and the rendered chart's checks (also part of test-unit): the product's (helm/:
# the rendered config.yaml loads) and tools/chartcheck's.
chart-test: helm
	$(GO) test -count=1 -v ./helm
	$(MAKE) --no-print-directory chartcheck-test

# Every rendering of the chart (defaults, ci/*.yaml, each feature on and off) decoded strictly
# into the Kubernetes API types of k8s.io/api, the Prometheus operator's and cert-manager's
# Certificate (unknown, mis-cased or doubled fields refused), and the references between the
# objects followed (tools/chartcheck: its own module, so k8s.io/api stays out of go.mod).
chartcheck-test:
	cd tools/chartcheck && $(GO) vet ./... && $(GO) test -race -count=1 ./...

# --- dashboards and alerts (tools/observability, its own module: Prometheus's libraries) ----

.PHONY: promtool promtool-prepare observability-test dashboard-screenshot

# The pinned promtool in .cache (built once from the module proxy, like helm).
promtool:
	test/rig/build-promtool.sh

# As promtool, but outside CI a failed build is left for the alert tests to report as a skip.
promtool-prepare:
	@if ! test/rig/build-promtool.sh >/dev/null; then \
	  if [[ -n "$$CI" && "$$CI" != false ]]; then exit 1; fi; \
	  echo "promtool not built; the alert rule tests will say why they skip"; \
	fi

# promtool check rules and promtool test rules of the alerts; the query checker's own tests.
# (The dashboard and the alerts against a running proxy's /metrics: test/e2e,
# TestDashboardAndAlertsMatchTheProxy, in make test-e2e.)
observability-test:
	cd tools/observability && $(GO) vet ./... && $(GO) test -race -count=1 ./...

# Re-renders docs/dashboard.png from a real run: the e2e test's recording of /metrics, drawn
# with the dashboard's own queries (needs the rig; one test, about two minutes).
dashboard-screenshot:
	PULSAR_PROXY_DASHBOARD_PNG=$(CURDIR)/docs/dashboard.png $(GO) test -C test -count=1 -v -run 'TestDashboardAndAlertsMatchTheProxy' ./e2e

# Regenerates frame/pb/pulsar_api.pb.go (needs Debian's protobuf-compiler).
proto:
	frame/pb/gen.sh

# --- benchmarks (bench/README.md) ----------------------------------------------------------

.PHONY: bench bench-quick bench-micro bench-proxy bench-proxy-quick bench-websocket bench-websocket-quick bench-brokers bench-brokers-quick bench-latency haproxy

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# Side by side on one rig broker: direct, pulsar-proxy, the Java proxy, HAProxy (TCP mode,
# without and with splice).
# Results: bench/results/latest.{json,md,png} and docs/performance.md's table. Attaches to
# PULSAR_PROXY_RIG if set.
bench: haproxy
	$(call timed,rig cache (Pulsar jars + Consul),$(RIG) prepare)
	$(call timed,bench,$(GO) build -C bench -o $(CURDIR)/bin/bench . && bin/bench $(BENCH_FLAGS))

# One short round of the same (a few minutes once the rig's caches are warm).
bench-quick: haproxy
	$(call timed,rig cache (Pulsar jars + Consul),$(RIG) prepare)
	$(call timed,bench-quick,$(GO) build -C bench -o $(CURDIR)/bin/bench . && bin/bench -quick $(BENCH_FLAGS))

# Proxy-bound: the same paths in front of the benchmark's own Pulsar speaker (bench/speaker),
# which answers at once, so the path is the bottleneck; the proxy under test pinned to CPU 0,
# the load generator and the speaker to CPU 1; 1, 100 and up to 10,000 connections (what the
# descriptor limit allows). Results: bench/results/proxy-bound.{json,md,png}, its summary in
# docs/performance.md and the headline figures in README.md (-docs=false leaves the pages; -rerender
# writes them anew from the committed JSON without a run). Needs the rig's jars (the Java
# proxy), not a running rig. Full: about 45 minutes.
bench-proxy: haproxy
	$(call timed,rig cache (Pulsar jars + Consul),$(RIG) prepare)
	$(call timed,bench-proxy,$(GO) build -C bench -o $(CURDIR)/bin/bench . && bin/bench -proxy-bound $(BENCH_FLAGS))

# One short round of the same (1 and 100 connections, three workloads; about 4 minutes).
bench-proxy-quick: haproxy
	$(call timed,rig cache (Pulsar jars + Consul),$(RIG) prepare)
	$(call timed,bench-proxy-quick,$(GO) build -C bench -o $(CURDIR)/bin/bench . && bin/bench -proxy-bound -quick $(BENCH_FLAGS))

# WebSocket producers through pulsar-proxy's WebSocket API and through the broker's own
# WebSocket service, side by side on broker 1 of a rig whose brokers run it (started with
# webSocketServiceEnabled=true; with PULSAR_PROXY_RIG the attached rig must run it).
# Results: bench/results/websocket.{json,md}. Full: three rounds (about 10 minutes).
bench-websocket:
	$(call timed,rig cache (Pulsar jars + Consul),$(RIG) prepare)
	$(call timed,bench-websocket,$(GO) build -C bench -o $(CURDIR)/bin/bench . && bin/bench -websocket $(BENCH_FLAGS))

# One round of the same (about 3 minutes once the rig is up).
bench-websocket-quick:
	$(call timed,rig cache (Pulsar jars + Consul),$(RIG) prepare)
	$(call timed,bench-websocket-quick,$(GO) build -C bench -o $(CURDIR)/bin/bench . && bin/bench -websocket -quick $(BENCH_FLAGS))

# Added latency restated for this machine: one paced producer connection at half the direct
# rate through direct, pulsar-proxy (passthrough, framed, multiplexed) and HAProxy with splice,
# seven paired rounds in front of the speaker, pinned as bench-proxy. Results:
# bench/results/latency.{json,md}. About 5 minutes.
bench-latency: haproxy
	$(call timed,rig cache (Pulsar jars + Consul),$(RIG) prepare)
	$(call timed,bench-latency,$(GO) build -C bench -o $(CURDIR)/bin/bench . && bin/bench -proxy-bound -latency $(BENCH_FLAGS))

# The brokers' side of multiplexing: producer clients (up to 10,000, as the descriptor limit
# allows) at a fixed total rate through pulsar-proxy framed (a broker connection per client)
# and multiplexed, on broker 1 of a rig started for the run (2 GiB heap; or PULSAR_PROXY_RIG):
# broker 1's heap, direct memory, threads and CPU, the proxy's RSS and CPU.
# Results: bench/results/brokers.{json,md,png}. Full: two rounds (about 20 minutes).
bench-brokers:
	$(call timed,rig cache (Pulsar jars + Consul),$(RIG) prepare)
	$(call timed,bench-brokers,$(GO) build -C bench -o $(CURDIR)/bin/bench . && bin/bench -brokers $(BENCH_FLAGS))

# One round of the same with 1,000 clients (about 5 minutes once the rig is up).
bench-brokers-quick:
	$(call timed,rig cache (Pulsar jars + Consul),$(RIG) prepare)
	$(call timed,bench-brokers-quick,$(GO) build -C bench -o $(CURDIR)/bin/bench . && bin/bench -brokers -quick -out $(CURDIR)/bench/results/tmp $(BENCH_FLAGS))

# The forwarding, frame, multiplexed data-path and edge-decision micro-benchmarks, benchstat-friendly (the
# multiplexed ones add system calls per frame).
bench-micro:
	$(GO) test -run '^$$' -bench 'BenchmarkForward|BenchmarkPeekType|BenchmarkReadFrame|BenchmarkMux|BenchmarkMultiplexedSend|BenchmarkDownMapping' -benchtime 0.5s -count 6 ./session ./frame ./mux ./edge | tee bench/results/micro.txt

# HAProxy from the Debian package, installed when missing.
haproxy:
	@command -v haproxy >/dev/null || { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq haproxy; }
