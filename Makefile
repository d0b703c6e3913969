# corpus — build, test and run targets. `make help` lists them.
GO        ?= go
BIN       ?= bin/corpus
TOOLS     ?= $(shell $(GO) env GOPATH)/bin
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_CONNECT_VERSION := v1.21.1
STATICCHECK_VERSION        := v0.8.2
PEBBLE_VERSION             := v2.10.1
NFPM_VERSION               := v2.45.2
BENCHSTAT_VERSION          := v0.0.0-20260908200009-22c9c6c9d4da
# The release this tree is or follows (packaging/releases): v0.1.0, v0.1.0+3.
VERSION   ?= $(shell packaging/release-version 2>/dev/null || echo dev)
# GOFLAGS may hold -buildvcs=false, so the commit comes by -X as well.
COMMIT    ?= $(shell git rev-parse --short HEAD 2>/dev/null)
LDFLAGS   := -X corpus/internal/version.Version=$(VERSION) -X corpus/internal/version.Commit=$(COMMIT)

.PHONY: help build deb test test-loaded test-unit lint vet fmt-check staticcheck proto proto-check ui ui-check docs docs-check screenshots demo demo-stop demo-clean bench bench-quick bench-compare bench-summary robustness tools test-tools clean

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: ## build bin/corpus and bin/corpus-supervisor (static: it runs inside guests)
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/corpus
	CGO_ENABLED=0 $(GO) build -ldflags "-s -w $(LDFLAGS)" -o $(dir $(BIN))corpus-supervisor ./cmd/corpus-supervisor

# The package's binary, man pages and .deb go under bin/deb, apart from
# bin/corpus (which tests may be using).
deb: ## build bin/deb/corpus_VERSION_amd64.deb: binary, systemd units, configs, man pages
	@[ -x $(TOOLS)/nfpm ] || GOBIN=$(TOOLS) $(GO) install github.com/goreleaser/nfpm/v2/cmd/nfpm@$(NFPM_VERSION)
	@set -e; v=$$(packaging/deb/version "$(VERSION)"); \
	rm -rf bin/deb; mkdir -p bin/deb/build/man; \
	$(GO) build -ldflags "-s -w $(LDFLAGS)" -o bin/deb/build/corpus ./cmd/corpus; \
	CGO_ENABLED=0 $(GO) build -ldflags "-s -w $(LDFLAGS)" -o bin/deb/build/corpus-supervisor ./cmd/corpus-supervisor; \
	SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct 2>/dev/null || date +%s) bin/deb/build/corpus docs man bin/deb/build/man 2>/dev/null; gzip -9n bin/deb/build/man/*.1; \
	DEB_VERSION=$$v $(TOOLS)/nfpm package --config packaging/nfpm.yaml --packager deb --target bin/deb/corpus_$${v}_amd64.deb; \
	rm -rf bin/deb/build

test: ## run every test (root: real LXC, namespaces); what CI runs
	./test/run

# The suite must pass on a loaded machine too: its waits are for
# conditions, its fixed deadlines scaled by the load test/run finds
# (CORPUS_TEST_SCALE). The hog starts a minute early so that the load
# average shows it.
test-loaded: ## make test with a CPU hog beside it (stress-ng --cpu 2), as CI runs it on a schedule
	./scripts/setup --test
	@stress-ng --cpu 2 --quiet & hog=$$!; trap 'kill $$hog' EXIT; sleep 60; ./test/run

test-unit: ## run the tests that need no root
	$(GO) test ./...

lint: vet fmt-check staticcheck ## go vet, gofmt, staticcheck

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "not gofmt'ed:"; echo "$$out"; exit 1; fi

staticcheck:
	$(TOOLS)/staticcheck ./...

tools: test-tools ## install the code generators, linters and the packager into $(TOOLS)
	GOBIN=$(TOOLS) $(GO) install github.com/goreleaser/nfpm/v2/cmd/nfpm@$(NFPM_VERSION)

# What lint and proto need (scripts/setup --test); make deb installs nfpm
# itself when it is missing.
test-tools:
	GOBIN=$(TOOLS) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(TOOLS) $(GO) install connectrpc.com/connect/cmd/protoc-gen-connect-go@$(PROTOC_GEN_CONNECT_VERSION)
	GOBIN=$(TOOLS) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	GOBIN=$(TOOLS) $(GO) install github.com/letsencrypt/pebble/v2/cmd/pebble@$(PEBBLE_VERSION)

proto: ## regenerate Go code from proto/
	PATH="$(TOOLS):$$PATH" protoc -I proto -I /usr/include \
	  --go_out=. --go_opt=module=corpus \
	  --connect-go_out=. --connect-go_opt=module=corpus \
	  $$(find proto -name '*.proto')

# Like ui-check, it generates into a folder of its own and compares:
# protoc rewriting the tree's files in place could hand a Go build
# running meanwhile a file half written.
proto-check: ## fail when the committed generated code is stale
	@out=$$(mktemp -d) && trap 'rm -rf "$$out"' EXIT && \
	  PATH="$(TOOLS):$$PATH" protoc -I proto -I /usr/include \
	    --go_out="$$out" --go_opt=module=corpus \
	    --connect-go_out="$$out" --connect-go_opt=module=corpus \
	    $$(find proto -name '*.proto') && \
	  (cd "$$out" && find . -type f) | while read -r f; do cmp -s "$$out/$$f" "$$f" || { echo "differs: $$f"; exit 1; }; done && \
	  [ -z "$$(git status --porcelain -- proto)" ] || \
	  (echo "generated code in proto/ is stale: run make proto and commit"; exit 1)

# The command reference: a Markdown page per command, from the command
# tree itself (corpus docs markdown), committed so the docs site links it.
docs: ## regenerate the command reference (docs/reference) from the commands
	rm -rf docs/reference
	$(GO) run ./cmd/corpus docs markdown docs/reference

docs-check: docs ## fail when the committed command reference is stale
	@git diff --exit-code -- docs/reference && [ -z "$$(git status --porcelain -- docs/reference)" ] || \
	  (echo "the command reference in docs/reference is stale: run make docs and commit"; exit 1)

# The dashboard's app: web/ built by the pinned esbuild (package-lock.json)
# into coordinator/ui/dist, which is committed and embedded in the binary,
# so building corpus needs no Node.js.
ui: ## rebuild the web dashboard (web/ -> coordinator/ui/dist)
	cd web && npm ci --no-audit --no-fund --loglevel=error && node build.mjs

# The check builds into a folder of its own and compares: rebuilding dist
# in place would leave it empty for a moment, and a Go build embedding it
# meanwhile (test/run's groups start before it) fails.
ui-check: ## fail when the committed dashboard build is stale
	@out=$$(mktemp -d) && trap 'rm -rf "$$out"' EXIT && \
	  (cd web && npm ci --no-audit --no-fund --loglevel=error && UI_OUT="$$out" node build.mjs) && \
	  diff -r "$$out" coordinator/ui/dist && [ -z "$$(git status --porcelain -- coordinator/ui/dist)" ] || \
	  (echo "the dashboard build in coordinator/ui/dist is stale: run make ui and commit"; exit 1)

# The pictures of docs/dashboard.md, taken by the dashboard's browser
# test (as root, with LXC and Chromium: scripts/setup --test).
screenshots: ## retake docs/ui/*.png from the dashboard's browser test
	mkdir -p docs/ui
	cd test/e2e && CORPUS_UI_SCREENSHOTS=$(CURDIR)/docs/ui $(GO) test -count=1 -run '^TestDashboard$$' -v .

demo: ## set up this host and run a one-machine cluster with a guest
	./scripts/demo

demo-stop: ## stop the cluster started by make demo (guests keep running)
	./scripts/demo stop

demo-clean: ## stop it and remove its guests, network and state
	./scripts/demo clean

bench: ## guest start vs raw LXC, agent memory, NAT, proxy vs nginx, DNS vs bind9, volumes, OCI pull and unpack vs skopeo and umoci, push-to-serving, placement, VM start, kubernetes, services, scaling, replicated writes vs etcd, rolling upgrade, control-plane snapshot and restore; the table, and its changes since the last one
	./scripts/setup --bench
	@# One run at one commit: no row of an earlier run stays.
	cp test/bench/results/summary.md test/bench/results/previous.md
	rm -rf test/bench/results/rows
	./test/bench/run
	./test/bench/nat/run
	@# Throughput against a peer: medians of rounds that alternate the two.
	ROUNDS=5 ./test/bench/proxy/run
	ROUNDS=5 ./test/bench/dns/run
	./test/bench/volume/run
	./test/bench/oci/run
	./test/bench/deploy/run
	./test/bench/k8s/run
	./test/bench/placement/run
	./test/bench/libvirt/run
	./test/bench/shell/run
	./test/bench/services/run
	./test/bench/scale/run
	ROUNDS=3 ./test/bench/raft/run
	./test/bench/upgrade/run
	./test/bench/snapshot/run
	./test/bench/summary
	./test/bench/changes test/bench/results/previous.md test/bench/results/rows "Changes since the last table" >test/bench/results/changes.md || true
	cat test/bench/results/changes.md

QUICK_ROWS = test/bench/results/quick-rows
bench-quick: ## the hot paths of make bench (replicated writes vs etcd, proxy vs nginx, DNS vs bind9, guest start and agent memory, push to serving), beside the committed table; fails when a row got worse by more than a quarter
	./scripts/setup --bench
	rm -rf $(QUICK_ROWS)
	BENCH_ROWS_DIR=$(QUICK_ROWS) ./test/bench/raft/run
	BENCH_ROWS_DIR=$(QUICK_ROWS) ./test/bench/proxy/run
	BENCH_ROWS_DIR=$(QUICK_ROWS) ./test/bench/dns/run
	BENCH_ROWS_DIR=$(QUICK_ROWS) ./test/bench/run
	BENCH_ROWS_DIR=$(QUICK_ROWS) ./test/bench/deploy/run
	./test/bench/changes test/bench/results/summary.md $(QUICK_ROWS) "make bench-quick at $$(git describe --always --dirty) against the committed table"

RUNS ?= 50
FAULTS ?= 4
robustness: ## RUNS randomised fault runs against a 3-replica group (SEED=N replays; results in test/robustness/results/latest.md)
	./scripts/setup --test
	cd test/robustness && CORPUS_ROBUSTNESS_RUNS=$(RUNS) CORPUS_ROBUSTNESS_FAULTS=$(FAULTS) CORPUS_ROBUSTNESS_SEED=$(SEED) \
		CORPUS_ROBUSTNESS_OUT=$(CURDIR)/test/robustness/results/latest.md \
		go test -count=1 -timeout 0 -run 'TestRobustness$$' -v .

bench-compare: ## the hot paths' Go benchmarks at this tree and at BASE (default: where the branch left main), compared with benchstat
	./test/bench/compare $(BASE)

bench-summary: ## one table of the figures the bench scripts last wrote (test/bench/results/summary.md)
	./test/bench/summary

clean:
	rm -rf bin
