# keyfleet — build, test and demo targets. `make help` lists them.
GO        ?= go
BIN       ?= bin
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X github.com/keyfleet/keyfleet/internal/version.Version=$(VERSION)
TESTFLAGS ?=
# Test packages go test runs at once in make test. The e2e packages (one per
# area under internal/e2e) mostly wait on processes and servers: at go's
# default (GOMAXPROCS, 2 here) make test took 6m00s using a third of 2
# cores, at 4 3m34s (2026-11-27).
TESTP     ?= 4

.PHONY: help build demo test test-reliability fuzz vet bench bench-smoke bench-go clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | sort

build: ## build bin/producer and bin/worker
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/...

DEMOFLAGS ?=

demo: build ## see keyfleet work end to end: its own NATS, Redis and a stand-in API, 3 workers, 300 items, then two more kinds on their own key groups (limits per model), the dashboard on :8080 (DEMOFLAGS=-hold keeps it up)
	@bash scripts/ensure-redis.sh --if-needed
	@$(GO) build -o $(BIN)/keyfleet-demo ./internal/demo
	@$(BIN)/keyfleet-demo --bin $(BIN) $(DEMOFLAGS)

vet: ## gofmt check and go vet (of the root module and of the bench module in bench/)
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) -C bench vet ./...

test: vet ## vet, then every test of the root module with the race detector, TESTP packages at once (needs redis-server, chromium, node: installed when missing; bench/'s tests are make bench-smoke)
	@bash scripts/ensure-redis.sh
	@bash scripts/ensure-chromium.sh
	@bash scripts/ensure-node-packages.sh
	$(GO) test -race -count=1 -timeout 9m -p $(TESTP) $(TESTFLAGS) ./...

FUZZTIME ?= 10s

fuzz: ## every fuzz target for FUZZTIME each (default 10s; their seed corpora also run in make test)
	@bash scripts/fuzz.sh $(FUZZTIME)

BENCHFLAGS ?=

test-reliability: ## the fault scenarios at full size (~15 min); prints the reliability table
	@bash scripts/test-reliability.sh

bench: build ## the benchmark program: own NATS and Redis, real workers; prints a table, writes bench-results.json (BENCHFLAGS: -quick, -runs N, -only a,b, -profile DIR)
	$(GO) build -o $(BIN)/nats-server github.com/nats-io/nats-server/v2
	$(GO) -C bench build -o $(abspath $(BIN))/kfbench ./cmd/kfbench
	$(BIN)/kfbench -bin $(BIN) $(BENCHFLAGS)

bench-smoke: ## the bench module's tests with the race detector: three scenarios at quick size and the arithmetic (CI runs it after make test)
	@bash scripts/ensure-redis.sh
	$(GO) -C bench test -race -count=1 -timeout 9m $(TESTFLAGS) ./...

bench-go: ## the Go benchmarks of pkg/ (pool, rate limiter)
	$(GO) test -run '^$$' -bench . -benchtime 3s ./pkg/...

clean: ## remove build output
	rm -rf $(BIN)
