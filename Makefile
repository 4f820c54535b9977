# plateau_exporter build, test and packaging entry points.
# `make test` needs no root; `make integration` needs root (loop devices,
# mounts, cgroups, FUSE) and is run by .ci/run.

GO        ?= go
BINARY    ?= plateau_exporter
PKG       := github.com/plateau-exporter/plateau_exporter
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null | sed 's/^v//' || echo 0.0.0)
REVISION  ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
BRANCH    ?= $(shell git rev-parse --abbrev-ref HEAD 2>/dev/null || echo unknown)
BUILDDATE ?= $(shell date -u +%Y%m%d-%H:%M:%S)
VERSION_PKG := github.com/prometheus/common/version
LDFLAGS   := -X $(VERSION_PKG).Version=$(VERSION) -X $(VERSION_PKG).Revision=$(REVISION) \
             -X $(VERSION_PKG).Branch=$(BRANCH) -X $(VERSION_PKG).BuildUser=$(shell id -un)@$(shell hostname) \
             -X $(VERSION_PKG).BuildDate=$(BUILDDATE)
# v0.6.1 is staticcheck 2025.1.1; the proxy serves it under its semver tag.
STATICCHECK_VERSION ?= v0.6.1
FUZZTIME  ?= 10s

.PHONY: all build test integration lint fuzz bench clean

all: build

# CGO_ENABLED=0 as the RPM builds it: only a pure-Go binary can drop the
# capabilities of all its threads (the SMART helper, internal/privsep), and
# nothing in the daemon needs cgo. plateau_backtest runs
# `plateau_exporter backtest`, which looks for it beside itself: the PromQL
# engine is in that binary only, not in the daemon resident on every node.
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BINARY) ./cmd/plateau_exporter
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o plateau_backtest ./cmd/plateau_backtest

# Unit, fixture, fuzz-seed and end-to-end tests; no root needed.
test: build
	$(GO) test -count=1 ./...

# Root-only tests: loop-mounted file systems, FUSE, cgroups, real Prometheus.
# Only the tests of the `//go:build integration` files: the untagged ones
# are `make test`'s (.ci/integration.sh says how it picks them).
integration: build
	@if [ "$$(id -u)" != 0 ]; then echo "make integration needs root (loop devices, mounts, cgroups)"; exit 1; fi
	GO=$(GO) ./.ci/integration.sh

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go') 2>&1); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags integration ./...
	$(GO) vet -tags benchcluster ./bench/cluster/
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) -tags benchcluster ./bench/cluster/

# Runs every Fuzz target for FUZZTIME each, seeded by its fixtures.
fuzz:
	./.ci/fuzz.sh $(FUZZTIME)

bench: build
	$(GO) test -run '^$$' -bench . -benchmem ./...

clean:
	rm -f $(BINARY) plateau_backtest bench/cluster/cluster.test

-include packaging/packaging.mk
