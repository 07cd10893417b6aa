# stockade: `make demo` runs the main job, `make check` runs every test this
# machine can run (host tests as root, then the cgroup v2 VM).
SHELL := bash
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# urfave_cli_no_docs drops the CLI library's man/markdown generator, whose
# package init costs every run (and every jail's init) half a millisecond.
export GOFLAGS := -tags=urfave_cli_no_docs
GO ?= go
BIN := bin/stockade
# staticcheck by its module version (the release 2026.2.2 is module
# v0.8.2, the form the module proxy serves), installed into build/tools under
# a versioned name: a fresh machine with an empty GOPATH gets exactly this
# one, and a staticcheck installed by hand is never picked up instead.
STATICCHECK_VERSION := v0.8.2
STATICCHECK := build/tools/staticcheck-$(STATICCHECK_VERSION)
FUZZTIME ?= 5s

.PHONY: all build demo check test lint fuzz vmtest bench soak clean deps-%

all: build

deps-%:
	@scripts/deps $*

# The jail's init is built first, as a small static binary, and embedded:
# stockade runs it from a sealed memfd (see jail/initexe_linux.go).
INIT := jail/initexe/stockade-init
build: deps-build
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w" -o $(INIT) ./jail/internal/initproc/stockade-init
	$(GO) build -tags urfave_cli_no_docs,stockade_embed_init -ldflags "-X main.version=$(VERSION)" -o $(BIN) ./cmd/stockade

demo: deps-demo build
	@scripts/demo $(BIN)

check: deps-check lint test fuzz vmtest
	@echo "make check: all passed"

lint: build $(STATICCHECK)
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: the files above need formatting"; exit 1; }
	$(GO) vet ./...
	GOOS=darwin $(GO) vet ./...
	$(STATICCHECK) ./...

$(STATICCHECK):
	@mkdir -p build/tools
	GOBIN=$(CURDIR)/build/tools $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	mv build/tools/staticcheck $@

# Host tests: real jails, as root; tests that need root or the VM skip
# cleanly elsewhere. One package at a time (-p 1): the timing bounds of the
# limit tests assume the two cores are not shared with another package's
# jails.
test: build
	STOCKADE_BIN=$(CURDIR)/$(BIN) STOCKADE_ROOTFS_CACHE=$(CURDIR)/build/rootfs-cache $(GO) test -p 1 -count=1 -timeout 20m ./...

fuzz:
	$(GO) test -run='^$$' -fuzz='^FuzzParseSize$$' -fuzztime=$(FUZZTIME) ./profiles/
	$(GO) test -run='^$$' -fuzz='^FuzzParseDuration$$' -fuzztime=$(FUZZTIME) ./profiles/
	$(GO) test -run='^$$' -fuzz='^FuzzProfile$$' -fuzztime=$(FUZZTIME) ./profiles/
	$(GO) test -run='^$$' -fuzz='^FuzzFlags$$' -fuzztime=$(FUZZTIME) ./cmd/stockade/

# cgroup v2 for real: Debian's kernel in qemu, the test binaries inside.
vmtest: deps-vmtest build
	@mkdir -p build/vm
	$(GO) test -c -o build/vm/jail.test ./jail
	$(GO) test -c -o build/vm/cgroup.test ./cgroup
	$(GO) test -c -o build/vm/selfcheck.test ./vmtest/selfcheck
	vmtest/run $(BIN) build/vm/*.test

bench: deps-bench build
	@scripts/bench $(BIN)

soak: build
	STOCKADE_SOAK=$${STOCKADE_SOAK:-2000} $(GO) test -count=1 -run '^TestSoak$$' -timeout 60m -v ./jail/
	STOCKADE_BIN=$(CURDIR)/$(BIN) STOCKADE_SERVE_SOAK=$${STOCKADE_SERVE_SOAK:-500} $(GO) test -count=1 -run '^TestServeSoak$$' -timeout 30m -v ./server/
	STOCKADE_SOAK=$${STOCKADE_SIBLING_SOAK:-500} $(GO) test -count=1 -run '^TestSoakSiblingCgroups$$' -timeout 60m -v ./cmd/stockade/

clean:
	rm -rf bin build $(INIT)
