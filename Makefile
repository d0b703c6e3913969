# corpus — build, test and run targets. `make help` lists them.
GO        ?= go
BIN       ?= bin/corpus
TOOLS     ?= $(shell $(GO) env GOPATH)/bin
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_CONNECT_VERSION := v1.21.1
STATICCHECK_VERSION        := v0.8.2
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X corpus/internal/version.Version=$(VERSION)

.PHONY: help build test test-unit lint proto proto-check demo demo-stop demo-clean bench bench-summary tools clean

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: ## build bin/corpus
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/corpus

test: ## run every test (root: real LXC, namespaces); what CI runs
	./test/run

test-unit: ## run the tests that need no root
	$(GO) test ./...

lint: ## go vet, gofmt, staticcheck
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "not gofmt'ed:"; echo "$$out"; exit 1; fi
	$(TOOLS)/staticcheck ./...

tools: ## install the code generators and linters into $(TOOLS)
	GOBIN=$(TOOLS) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(TOOLS) $(GO) install connectrpc.com/connect/cmd/protoc-gen-connect-go@$(PROTOC_GEN_CONNECT_VERSION)
	GOBIN=$(TOOLS) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

proto: ## regenerate Go code from proto/
	PATH="$(TOOLS):$$PATH" protoc -I proto -I /usr/include \
	  --go_out=. --go_opt=module=corpus \
	  --connect-go_out=. --connect-go_opt=module=corpus \
	  $$(find proto -name '*.proto')

proto-check: proto ## fail when the committed generated code is stale
	@git diff --exit-code -- proto || (echo "generated code in proto/ is stale: run make proto and commit"; exit 1)

demo: ## set up this host and run a one-machine cluster with a guest
	./scripts/demo

demo-stop: ## stop the cluster started by make demo (guests keep running)
	./scripts/demo stop

demo-clean: ## stop it and remove its guests, network and state
	./scripts/demo clean

bench: ## guest start vs raw LXC, agent memory, NAT, proxy vs nginx, DNS vs bind9, volumes, push-to-serving, placement, VM start, kubernetes
	./scripts/setup --bench
	./test/bench/run
	./test/bench/nat/run
	./test/bench/proxy/run
	./test/bench/dns/run
	./test/bench/volume/run
	./test/bench/deploy/run
	./test/bench/k8s/run
	./test/bench/placement/run
	./test/bench/libvirt/run
	./test/bench/summary

bench-summary: ## one table of the figures the bench scripts last wrote (test/bench/results/summary.md)
	./test/bench/summary

clean:
	rm -rf bin
