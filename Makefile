# Crown build, run and test targets. `make run` and `make test` are the two
# set-up commands of the README; everything else is optional.
GO        ?= go
BIN       := bin
VERSION   ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X main.version=$(VERSION)
GOFLAGS_BUILD := -trimpath -ldflags "$(LDFLAGS)"
# Tests run with the race detector; CI machines have 2 cores.
TEST_FLAGS ?= -race -count=1 -timeout 25m

.PHONY: all build run test test-short fuzz bench bench-nats bench-nats-phases bench-partitions bench-targets lint fmt cluster cluster-stop docker-image docker-cluster docker-cluster-stop chaos-short chaos chaos-docker clean

all: build

build:
	CGO_ENABLED=0 $(GO) build $(GOFLAGS_BUILD) -o $(BIN)/crownd ./cmd/crownd
	CGO_ENABLED=0 $(GO) build $(GOFLAGS_BUILD) -o $(BIN)/crownctl ./cmd/crownctl

# One node: HTTP on :6632, Raft on 127.0.0.1:7632, data under ./data.
run: build
	./$(BIN)/crownd --node-id node1 --data-dir ./data --http-addr :6632 --raft-addr 127.0.0.1:7632 --log-format text

test: build
	$(GO) vet ./...
	CROWN_BIN=$(CURDIR)/$(BIN) $(GO) test $(TEST_FLAGS) ./...

test-short:
	$(GO) test -short -count=1 ./...

# Every fuzz test in turn, FUZZTIME each (default 30s); see scripts/fuzz.sh --help.
fuzz:
	./scripts/fuzz.sh

# Go benchmarks of the hot paths (codec, ApplyBatch, the pop check, JSON, one
# Raft metrics sample), then end-to-end push and pop+ack throughput of one node.
bench: build
	$(GO) test -run '^$$' -bench . -benchmem ./fsm/ ./segments/ ./httpapi/... ./cmd/crownd/
	$(GO) test -run '^$$' -bench CommitPath -benchmem ./raftnode/
	./scripts/bench-node.sh

# Crown against NATS JetStream, three local nodes each, same workload; extra
# workload flags in BENCH_FLAGS (e.g. BENCH_FLAGS="--count 100000"); see
# scripts/bench-vs-nats.sh --help.
bench-nats:
	./scripts/bench-vs-nats.sh $(BENCH_FLAGS)

# The same two clusters, but a produce-only run and then a consume-only run
# of its messages against each, one table per phase (--phases).
bench-nats-phases:
	./scripts/bench-vs-nats.sh --phases $(BENCH_FLAGS)

# Crown over 8 partitions and over 10,000, fresh clusters, produce-only then
# consume-only, in alternating rounds: the README's "10,000 partitions"
# figures; see scripts/bench-partitions.sh --help.
bench-partitions:
	./scripts/bench-partitions.sh $(BENCH_FLAGS)

# Resident memory with 1,000,000 messages stored, push p99 at half the
# maximum push rate and single-message push p50 on each node, fresh cluster
# per round: the README's rows for them; see scripts/bench-targets.sh --help.
bench-targets:
	./scripts/bench-targets.sh $(BENCH_FLAGS)

lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

# Three local nodes: HTTP on 127.0.0.1:6632-6634, Raft on 127.0.0.1:7632-7634,
# data and logs under ./data/cluster (see scripts/cluster.sh --help).
cluster: build
	./scripts/cluster.sh start

cluster-stop:
	./scripts/cluster.sh stop

# Docker: a FROM scratch image holding the static crownd built above, and a
# three-node compose cluster (HTTP published on 127.0.0.1:6632-6634).
DOCKER        ?= docker
DOCKER_IMAGE  ?= crown:latest
COMPOSE_FILE  := scripts/docker/docker-compose.yml
COMPOSE_PROJECT ?= crown
# `docker compose` (v2 plugin) when present, else `docker-compose` (v1).
COMPOSE ?= $(shell if $(DOCKER) compose version >/dev/null 2>&1; then echo "$(DOCKER) compose"; \
	elif command -v docker-compose >/dev/null 2>&1; then echo docker-compose; fi)
COMPOSE_CMD = $(if $(COMPOSE),CROWN_IMAGE=$(DOCKER_IMAGE) $(COMPOSE) -p $(COMPOSE_PROJECT) -f $(COMPOSE_FILE),\
	$(error neither "docker compose" nor "docker-compose" is installed))
# Seconds docker-cluster waits for the three nodes to report healthy.
DOCKER_WAIT ?= 60

docker-image: build
	rm -rf $(BIN)/docker-context
	mkdir -p $(BIN)/docker-context/data
	cp $(BIN)/crownd $(BIN)/docker-context/crownd
	$(DOCKER) build -f scripts/docker/Dockerfile -t $(DOCKER_IMAGE) $(BIN)/docker-context

docker-cluster: docker-image
	$(COMPOSE_CMD) up -d
	@echo "waiting up to $(DOCKER_WAIT)s for node1..node3 to be healthy"; \
	ids=$$($(COMPOSE_CMD) ps -q); \
	for i in $$(seq $$(( $(DOCKER_WAIT) * 2 ))); do \
		states=$$($(DOCKER) inspect -f '{{.State.Health.Status}}' $$ids | sort -u | tr '\n' ' '); \
		if [ "$$states" = "healthy " ]; then break; fi; sleep 0.5; \
	done; \
	$(COMPOSE_CMD) ps; \
	if [ "$$states" != "healthy " ]; then echo "not all nodes healthy: $$states"; exit 1; fi; \
	./$(BIN)/crownctl --url "http://127.0.0.1:$${CROWN_HTTP_PORT_1:-6632},http://127.0.0.1:$${CROWN_HTTP_PORT_2:-6633},http://127.0.0.1:$${CROWN_HTTP_PORT_3:-6634}" cluster status

# Stops and removes the containers; the named data volumes are kept
# (add `down -v` by hand to delete them, see docs/deployments.md).
docker-cluster-stop:
	$(COMPOSE_CMD) down

# Chaos testing (docs/chaos.md, cmd/crown-chaos/DESIGN.md): a three-node
# cluster in network namespaces (root needed), a recorded workload, faults,
# a history checker; the report goes to $(CHAOS_REPORT)/. chaos-short is the
# CI suite (seven scenarios, under 5 minutes); chaos plays a random schedule
# of DURATION from SEED (default: the clock; printed, and kept in the
# report); chaos-docker breaks the Compose cluster instead (docker
# network disconnect/connect, docker kill/start/pause).
CHAOS_REPORT ?= chaos-report
DURATION     ?= 30m
SEED         ?=

chaos-short: build
	CHAOS_REPORT=$(CHAOS_REPORT) ./scripts/chaos/chaos.sh short

chaos: build
	CHAOS_REPORT=$(CHAOS_REPORT) ./scripts/chaos/chaos.sh random $(DURATION) $(SEED)

chaos-docker: docker-image
	CHAOS_REPORT=$(CHAOS_REPORT) DOCKER_IMAGE=$(DOCKER_IMAGE) ./scripts/chaos/chaos.sh docker

clean:
	rm -rf $(BIN)
