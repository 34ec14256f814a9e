# Crown build, run and test targets. `make run` and `make test` are the two
# set-up commands of the README; everything else is optional.
GO        ?= go
BIN       := bin
VERSION   ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X main.version=$(VERSION)
GOFLAGS_BUILD := -trimpath -ldflags "$(LDFLAGS)"
# Tests run with the race detector; CI machines have 2 cores.
TEST_FLAGS ?= -race -count=1 -timeout 25m

.PHONY: all build run test test-short bench lint fmt cluster cluster-stop docker-cluster docker-image clean

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

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./fsm/ ./segments/ ./httpapi/...

lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf $(BIN)
