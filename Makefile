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
# goimports the same way, from golang.org/x/tools by its module version: it
# checks the import blocks (standard library apart, sorted, none unused).
GOIMPORTS_VERSION := v0.52.0
GOIMPORTS := build/tools/goimports-$(GOIMPORTS_VERSION)
# nats-server for the cluster's tests (real servers, real TLS), by its
# module version, cached under build/nats: make test passes it to the
# tests, which fail without it there (and skip without it elsewhere).
NATS_SERVER_VERSION := v2.15.3
NATS_SERVER := build/nats/nats-server-$(NATS_SERVER_VERSION)
# A count, not a duration: a -fuzztime of seconds races the fuzzing
# coordinator's deadline on a loaded machine and fails with "context deadline
# exceeded" having found nothing (golang/go#51484); a count only runs slower.
FUZZTIME ?= 10000x
# make install's prefix; the built binary and stockade(1) name DOCDIR, where
# the documentation is installed, in --help.
PREFIX ?= /usr/local
DOCDIR := $(PREFIX)/share/doc/stockade

.PHONY: all binary build demo check test test-host test-vm vmtest-only test-python test-mcp-inspector test-mcp-sdk lint fuzz vmtest bench soak mutate clean install uninstall install-check deps-%

all: build

deps-%:
	@scripts/deps $*

# The jail's init is built first, as a small static binary, and embedded:
# stockade runs it from a sealed memfd (see jail/jailinit_linux.go).
INIT := jail/jailinit.bin
# binary is the jail's init and stockade alone, without the man page and
# completions: what scripts/mutate rebuilds for every mutant.
binary: deps-build
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w" -o $(INIT) ./jail/internal/jailinit/jailinit
	$(GO) build -tags urfave_cli_no_docs,embed_jailinit -ldflags "-X main.version=$(VERSION) -X main.docDir=$(DOCDIR)" -o $(BIN) ./cmd/stockade

build: binary
	@# stockade(1) and the completions come from the same command tables. The
	@# man page needs the CLI library's document generator, which the shipped
	@# binary leaves out, so a separate build makes it (tag stockade_genman).
	@mkdir -p build/man build/completions
	GOFLAGS= $(GO) run -tags stockade_genman -ldflags "-X main.docDir=$(DOCDIR)" ./cmd/stockade __man > build/man/stockade.1
	$(BIN) completion bash > build/completions/stockade.bash
	$(BIN) completion zsh > build/completions/_stockade
	$(BIN) completion fish > build/completions/stockade.fish

demo: deps-demo build
	@scripts/demo $(BIN)

# The tests that boot guests under emulation (the VM tier's, make vmtest's
# VMs) take a core each for minutes and little else: make check runs them,
# one after the other, beside the host's tests, with a copy of the binary
# (install-check rebuilds bin/stockade while they run), and prints their
# log at the end. Both halves always run to their end.
VM_TESTS := ^(TestVM|TestAttackVM|TestAttackGuest)
VM_BIN := build/check-vm/stockade
check: deps-check deps-vmtest lint build $(NATS_SERVER)
	@mkdir -p build/check-vm && cp $(BIN) $(VM_BIN)
	@{ $(MAKE) --no-print-directory test-vm BIN=$(VM_BIN) && $(MAKE) --no-print-directory vmtest-only BIN=$(VM_BIN); } \
		>build/check-vm/log 2>&1 & vm=$$!; \
	$(MAKE) --no-print-directory test-host test-python test-mcp-inspector test-mcp-sdk install-check fuzz; rc=$$?; \
	echo "make check: waiting for its VM half (build/check-vm/log)"; wait $$vm; vmrc=$$?; \
	echo "== make check's VM half (make test-vm, then make vmtest), run beside the rest:"; cat build/check-vm/log; \
	[ $$rc -eq 0 ] || { echo "make check: the host's tests failed"; exit 1; }; \
	[ $$vmrc -eq 0 ] || { echo "make check: the VM half failed"; exit 1; }; \
	echo "make check: all passed"

lint: build $(STATICCHECK) $(GOIMPORTS)
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: the files above need formatting"; exit 1; }
	@test -z "$$($(GOIMPORTS) -l $$(git ls-files '*.go'))" || { $(GOIMPORTS) -l $$(git ls-files '*.go'); echo "goimports: the files above need their imports fixed ($(GOIMPORTS) -w FILE)"; exit 1; }
	$(GO) vet ./...
	GOOS=darwin $(GO) vet ./...
	$(STATICCHECK) ./...

$(STATICCHECK):
	@mkdir -p build/tools
	GOBIN=$(CURDIR)/build/tools $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	mv build/tools/staticcheck $@

$(NATS_SERVER):
	@mkdir -p build/nats
	GOFLAGS= GOBIN=$(CURDIR)/build/nats $(GO) install github.com/nats-io/nats-server/v2@$(NATS_SERVER_VERSION)
	mv build/nats/nats-server $@

$(GOIMPORTS):
	@mkdir -p build/tools
	GOBIN=$(CURDIR)/build/tools $(GO) install golang.org/x/tools/cmd/goimports@$(GOIMPORTS_VERSION)
	mv build/tools/goimports $@

# Host tests: real jails, as root; tests that need root or the VM skip
# cleanly elsewhere. One package at a time (-p 1): the timing bounds of the
# limit tests assume the two cores are not shared with another package's
# jails.
# The VM tier's tests (vmtier/) boot Debian's kernel, the one vmtest boots:
# fetched here first (cached in build/vm-cache); without it they skip. The
# cluster's (cluster/) start real nats-servers, installed into build/nats.
TEST_ENV = STOCKADE_BIN=$(CURDIR)/$(BIN) STOCKADE_NATS_SERVER=$(CURDIR)/$(NATS_SERVER) STOCKADE_ROOTFS_CACHE=$(CURDIR)/build/rootfs-cache
test: build $(NATS_SERVER)
	STOCKADE_VM_KERNEL=$$(vmtest/run --fetch-kernel 2>/dev/null || true) \
	$(TEST_ENV) $(GO) test -p 1 -count=1 -timeout 20m ./...

# make test in two halves, for make check (no build: check builds first):
# every test but the VM tier's, and the VM tier's (guests under emulation).
test-host:
	$(TEST_ENV) $(GO) test -p 1 -count=1 -timeout 20m -skip '$(VM_TESTS)' ./...
test-vm:
	STOCKADE_VM_KERNEL=$$(vmtest/run --fetch-kernel) \
	$(TEST_ENV) $(GO) test -p 1 -count=1 -timeout 20m -run '$(VM_TESTS)' ./vmtier/ ./server/

# The Python client (clients/python) against a real stockade serve, with
# Debian's pytest. Every exit but 0 fails, pytest's 5 (no test ran) too.
test-python: build
	cd clients/python && STOCKADE_BIN=$(CURDIR)/$(BIN) /usr/bin/python3 -m pytest -p no:cacheprovider -q tests

# The MCP Inspector's CLI, a client nobody here wrote, drives stockade mcp
# over stdio and HTTP; npm ci installs it from the lockfile (once).
test-mcp-inspector: build
	tests/mcp-inspector/run $(BIN)

# The official MCP TypeScript SDK's client (its Node range, >=18, takes
# Debian 12's nodejs) drives stockade mcp over stdio and HTTP: the tools,
# run_python, a session made, used and closed; npm ci from its lockfile.
# Then the same client through stockade gateway's /v1/mcp over HTTPS with
# a token, in front of a real nats-server and node (TestGatewayMCPSDKClient,
# which skips in make test: it needs the node_modules run installs).
test-mcp-sdk: build $(NATS_SERVER)
	tests/mcp-sdk/run $(BIN)
	STOCKADE_MCP_SDK=$(CURDIR)/tests/mcp-sdk STOCKADE_BIN=$(CURDIR)/$(BIN) STOCKADE_NATS_SERVER=$(CURDIR)/$(NATS_SERVER) \
	  $(GO) test -count=1 -timeout 10m -run '^TestGatewayMCPSDKClient$$' ./gateway/

fuzz:
	$(GO) test -run='^$$' -fuzz='^FuzzParseSize$$' -fuzztime=$(FUZZTIME) ./profiles/
	$(GO) test -run='^$$' -fuzz='^FuzzParseDuration$$' -fuzztime=$(FUZZTIME) ./profiles/
	$(GO) test -run='^$$' -fuzz='^FuzzProfile$$' -fuzztime=$(FUZZTIME) ./profiles/
	$(GO) test -run='^$$' -fuzz='^FuzzNormalizeName$$' -fuzztime=$(FUZZTIME) ./netproxy/
	$(GO) test -run='^$$' -fuzz='^FuzzFlags$$' -fuzztime=$(FUZZTIME) ./cmd/stockade/
	$(GO) test -run='^$$' -fuzz='^FuzzDecodeRequestMatchesUnmarshal$$' -fuzztime=$(FUZZTIME) ./server/
	$(GO) test -run='^$$' -fuzz='^FuzzFSNameIsJSON$$' -fuzztime=$(FUZZTIME) ./server/

# cgroup v2 for real: Debian's kernel in qemu, the test binaries inside.
vmtest: deps-vmtest build
	@$(MAKE) --no-print-directory vmtest-only
vmtest-only:
	@mkdir -p build/vm
	$(GO) test -c -o build/vm/jail.test ./jail
	$(GO) test -c -o build/vm/cgroup.test ./cgroup
	$(GO) test -c -o build/vm/selfcheck.test ./vmtest/selfcheck
	@# The systemd root's debootstrap (minutes, once) overlaps the v2 VM.
	@vmtest/systemd/run --root-only >build/vm/systemd-root.log 2>&1 & root=$$!; \
	vmtest/run $(BIN) build/vm/*.test; rc=$$?; \
	wait $$root || { echo "vmtest-systemd: building the root failed:"; tail -20 build/vm/systemd-root.log; exit 1; }; \
	exit $$rc
	vmtest/systemd/run $(BIN)

bench: deps-bench build $(NATS_SERVER)
	@STOCKADE_NATS_SERVER=$(CURDIR)/$(NATS_SERVER) scripts/bench $(BIN)

soak: build
	STOCKADE_SOAK=$${STOCKADE_SOAK:-2000} $(GO) test -count=1 -run '^TestSoak$$' -timeout 60m -v ./jail/
	STOCKADE_BIN=$(CURDIR)/$(BIN) STOCKADE_SERVE_SOAK=$${STOCKADE_SERVE_SOAK:-500} $(GO) test -count=1 -run '^TestServeSoak$$' -timeout 30m -v ./server/
	STOCKADE_SOAK=$${STOCKADE_SIBLING_SOAK:-500} $(GO) test -count=1 -run '^TestSoakSiblingCgroups$$' -timeout 60m -v ./cmd/stockade/

# Each defence broken on purpose, one at a time, in a copy of the tree: the
# tests named for it and `stockade selftest --door` must notice (KILLED);
# a SURVIVED defence has no test. Not in make check: 14-27 minutes here.
mutate: deps-build
	scripts/mutate $(MUTANTS)

# make install PREFIX=/usr/local (DESTDIR for staging): the binary, stockade(1),
# bash/zsh/fish completions, the examples and the documentation (README.md,
# ARCHITECTURE.md, docs/*.md in DOCDIR). make uninstall removes exactly those.
DOCS := README.md ARCHITECTURE.md $(wildcard docs/*.md)
INSTALLED := bin/stockade share/man/man1/stockade.1 share/bash-completion/completions/stockade \
	share/zsh/site-functions/_stockade share/fish/vendor_completions.d/stockade.fish
# The directories install makes (each missing level of these, up to /) are
# recorded in DOCDIR/installed-dirs, kept over a reinstall, so that
# uninstall removes those (when empty) and never one that was there before,
# such as an empty /usr/local/bin.
INSTALL_DIRS := bin share/man/man1 share/bash-completion/completions share/zsh/site-functions \
	share/fish/vendor_completions.d share/doc/stockade/examples/systemd share/doc/stockade/docs
install: build
	@for d in $(INSTALL_DIRS); do p=$(PREFIX)/$$d; \
		while [ "$$p" != / ] && [ ! -d "$(DESTDIR)$$p" ]; do echo "$$p"; p=$$(dirname "$$p"); done; \
	done | cat - $(wildcard $(DESTDIR)$(DOCDIR)/installed-dirs) | sort -u -r >build/installed-dirs
	install -D -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/stockade
	install -D -m 0644 build/man/stockade.1 $(DESTDIR)$(PREFIX)/share/man/man1/stockade.1
	install -D -m 0644 build/completions/stockade.bash $(DESTDIR)$(PREFIX)/share/bash-completion/completions/stockade
	install -D -m 0644 build/completions/_stockade $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_stockade
	install -D -m 0644 build/completions/stockade.fish $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/stockade.fish
	install -d $(DESTDIR)$(DOCDIR)/examples/systemd $(DESTDIR)$(DOCDIR)/docs
	install -m 0644 examples/systemd/* $(DESTDIR)$(DOCDIR)/examples/systemd/
	install -m 0644 README.md ARCHITECTURE.md $(DESTDIR)$(DOCDIR)/
	install -m 0644 docs/*.md $(DESTDIR)$(DOCDIR)/docs/
	install -m 0644 build/installed-dirs $(DESTDIR)$(DOCDIR)/installed-dirs

uninstall:
	@made=$$(cat $(DESTDIR)$(DOCDIR)/installed-dirs 2>/dev/null || true); \
	rm -f $(addprefix $(DESTDIR)$(PREFIX)/,$(INSTALLED)) && rm -rf $(DESTDIR)$(DOCDIR) && \
	for d in $$made; do rmdir "$(DESTDIR)$$d" 2>/dev/null || true; done

# install into a staging directory, check every file, uninstall, check that
# nothing is left.
install-check: build
	@rm -rf build/install-check
	$(MAKE) --no-print-directory install DESTDIR=$(CURDIR)/build/install-check PREFIX=/usr/local >/dev/null
	@d=build/install-check/usr/local; for f in $(INSTALLED) share/doc/stockade/examples/systemd $(addprefix share/doc/stockade/,$(DOCS)); do \
		test -e $$d/$$f || { echo "install-check: $$f not installed"; exit 1; }; done; \
	$$d/bin/stockade --version >/dev/null; \
	grep -q '^.TH stockade 1' $$d/share/man/man1/stockade.1 || { echo "install-check: stockade.1 is not section 1"; exit 1; }; \
	grep -q '/usr/local/share/doc/stockade: README.md' $$d/share/man/man1/stockade.1 || { echo "install-check: stockade(1) does not point at the installed docs"; exit 1; }; \
	$$d/bin/stockade --help | grep -q '/usr/local/share/doc/stockade: README.md' || { echo "install-check: --help does not point at the installed docs"; exit 1; }; \
	for f in $$(grep -o 'docs/[a-z]*\.md' $$d/share/man/man1/stockade.1); do test -e $$d/share/doc/stockade/$$f || { echo "install-check: stockade(1) names $$f, which is not installed"; exit 1; }; done; \
	! command -v man >/dev/null || man -l $$d/share/man/man1/stockade.1 2>/dev/null | grep -q "stockade - run untrusted code" || { echo "install-check: stockade(1) does not render"; exit 1; }; \
	bash -c 'source '$$d'/share/bash-completion/completions/stockade; COMP_WORDS=(stockade ru); COMP_CWORD=1; _stockade; [[ "$${COMPREPLY[*]}" == run ]]' || { echo "install-check: bash completion of \"ru\" is not \"run\""; exit 1; }
	$(MAKE) --no-print-directory uninstall DESTDIR=$(CURDIR)/build/install-check PREFIX=/usr/local >/dev/null
	@test -z "$$(find build/install-check -mindepth 1)" || { echo "install-check: uninstall left:"; find build/install-check -mindepth 1; exit 1; }
	@# uninstall removes only the directories install made: an empty bin/
	@# that was there before stays.
	@mkdir -p build/install-check/usr/local/bin
	$(MAKE) --no-print-directory install DESTDIR=$(CURDIR)/build/install-check PREFIX=/usr/local >/dev/null
	$(MAKE) --no-print-directory uninstall DESTDIR=$(CURDIR)/build/install-check PREFIX=/usr/local >/dev/null
	@test "$$(find build/install-check -mindepth 1 | sort | tr '\n' ' ')" = "build/install-check/usr build/install-check/usr/local build/install-check/usr/local/bin " || { echo "install-check: uninstall removed usr/local/bin, which was there before install, or left:"; find build/install-check -mindepth 1; exit 1; }
	@rm -rf build/install-check
	@echo "install-check: ok"

clean:
	rm -rf bin build $(INIT) tests/mcp-inspector/node_modules tests/mcp-sdk/node_modules
