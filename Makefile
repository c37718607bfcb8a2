GO       ?= go
BIN      := bin/coordrun
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X main.version=$(VERSION)
FUZZTIME ?= 3s

.PHONY: build build-failpoint test unit fuzz demo bench bench-compare bench-scale bench-web screenshots chaos difftest vet clean

# A static binary: no cgo, so it runs on any Linux host.
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/coordrun

# Everything CI runs: unit, ensemble, interop and process tests under the
# race detector, then every fuzz target briefly.
test: build vet unit fuzz

vet:
	$(GO) vet ./...

unit: build-failpoint
	COORDRUN_BIN=$(CURDIR)/$(BIN) COORDRUN_FAILPOINT_BIN=$(CURDIR)/$(FAILPOINT_BIN) $(GO) test -race -count=1 -timeout 20m ./...
	$(GO) test -race -count=1 -tags failpoint ./internal/failpoint

# The binary with storage failpoints (internal/failpoint) that the disk
# fault tests arm; never shipped.
FAILPOINT_BIN := bin/coordrun-failpoint
build-failpoint:
	CGO_ENABLED=0 $(GO) build -tags failpoint -o $(FAILPOINT_BIN) ./cmd/coordrun

# Each decoder's fuzz target, for FUZZTIME each (longer: make fuzz FUZZTIME=5m).
fuzz:
	@set -e; for pkg in ./ensemble/wire ./ensemble/tree ./ensemble ./ensemble/statuspage; do \
	  for t in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "fuzz $$pkg $$t"; \
	    $(GO) test -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME) $$pkg >/dev/null; \
	  done; \
	done

# A throwaway 3-member ensemble on loopback, exercised and torn down.
demo: build
	./examples/demo.sh

# Throughput and latency of a 3-member loopback ensemble, with Apache
# ZooKeeper alongside when installed.
bench: build
	$(GO) run ./internal/bench -bin $(BIN)

# The same workloads against coordrun, Apache ZooKeeper (Debian: zookeeper),
# etcd (Debian: etcd-server) and bare hashicorp/raft in one run; a table,
# JSON and a plot land in BENCH_OUT. Systems not installed are skipped.
# A quick run: make bench-compare BENCH_FLAGS='-workloads write,read,pred
# -duration 1s -warmup 200ms -write-clients 1,32 -waiters 10'
BENCH_OUT   ?= bench-out
BENCH_FLAGS ?=
bench-compare: build
	$(GO) run ./internal/bench -bin $(BIN) -compare -out $(BENCH_OUT) $(BENCH_FLAGS)

# Sessions at scale, coordrun and ZooKeeper side by side in one table:
# SCALE_SESSIONS idle sessions held SCALE_HOLD, then the storm (as many
# closed, reopened with ephemerals, a tenth killed), each on a quiet host
# and with 4 and 12 busy loops. Takes the whole machine for minutes.
SCALE_SESSIONS ?= 20000
SCALE_HOLD     ?= 60s
SCALE_HOGS     ?= 0,4,12
bench-scale: build
	$(GO) run ./internal/bench -bin $(BIN) -compare -systems coordrun,zookeeper -workloads sessions,storm \
	  -sessions $(SCALE_SESSIONS) -sessions-hold $(SCALE_HOLD) -hog $(SCALE_HOGS) -plot - -out $(BENCH_OUT)-scale $(BENCH_FLAGS)

# What open status pages cost a member: CPU of one member of a 3-member
# ensemble (real binary, 20 writes/s) with no page open and with 20 event
# streams, over BENCH_WEB_WINDOW, BENCH_WEB_COUNT runs.
BENCH_WEB_WINDOW ?= 20s
BENCH_WEB_COUNT  ?= 3
bench-web: build
	COORDRUN_BIN=$(CURDIR)/$(BIN) COORDRUN_BENCH_WINDOW=$(BENCH_WEB_WINDOW) \
	  $(GO) test -run '^$$' -bench '^BenchmarkStatusPageStreams$$' -benchtime 1x -count $(BENCH_WEB_COUNT) ./ensemble/statuspage/

# The status page's screenshots in docs/screenshots, taken by the browser
# test (headless Chromium, 1280x900).
screenshots: build
	COORDRUN_BIN=$(CURDIR)/$(BIN) COORDRUN_SCREENSHOTS=$(CURDIR)/docs/screenshots \
	  $(GO) test -count=1 -run '^TestBrowserStatusPage$$' ./ensemble/statuspage/

# Fault injection with history checks, longer than the short runs inside
# `make test`: CHAOS_DURATION per test, CHAOS_MEMBERS members; a failing
# run keeps its history and names the directory.
CHAOS_DURATION ?= 3m
CHAOS_MEMBERS  ?= 3
chaos: build
	COORDRUN_BIN=$(CURDIR)/$(BIN) COORDRUN_CHAOS_DURATION=$(CHAOS_DURATION) COORDRUN_CHAOS_MEMBERS=$(CHAOS_MEMBERS) \
	  $(GO) test -race -count=1 -v -timeout 60m -run 'Chaos' ./internal/chaos ./supervisor

# Differential testing against Apache ZooKeeper 3.8 (Debian: zookeeper):
# DIFFTEST_SEQS seeded sequences from DIFFTEST_SEED on one coordrun member
# against a standalone ZooKeeper, then DIFFTEST_QUORUM_SEQS on three
# coordrun members against a 3-member ZooKeeper, sessions on different
# members (0 skips either). Every difference the known table does not
# explain is shrunk, printed, and written with both traces under
# DIFFTEST_OUT (relative to this directory unless absolute).
DIFFTEST_SEQS ?= 1000
DIFFTEST_QUORUM_SEQS ?= 200
DIFFTEST_SEED ?= 1
DIFFTEST_OUT  ?= difftest-out
DIFFTEST_RUN = $(GO) test -count=1 -v -timeout 120m -run '^TestDifferential$$' ./internal/difftest -args -difftest.seed=$(DIFFTEST_SEED)
difftest:
	@out=$(DIFFTEST_OUT); case $$out in /*) ;; *) out=$(CURDIR)/$$out;; esac; \
	if [ $(DIFFTEST_SEQS) -gt 0 ]; then $(DIFFTEST_RUN) -difftest.members=1 -difftest.seqs=$(DIFFTEST_SEQS) -difftest.out=$$out/single || exit 1; fi; \
	if [ $(DIFFTEST_QUORUM_SEQS) -gt 0 ]; then $(DIFFTEST_RUN) -difftest.members=3 -difftest.seqs=$(DIFFTEST_QUORUM_SEQS) -difftest.out=$$out/quorum || exit 1; fi

clean:
	rm -rf bin

# Packaging (packaging/): man pages and shell completions generated from the
# binary's own command tree, then a .deb and an .rpm built with nfpm, all in
# DIST. nfpm runs from the Go module proxy, pinned (not a requirement in
# go.mod); v2.46.0 and later need go.digitalxero.dev modules the proxy
# refuses. SOURCE_DATE_EPOCH (default: the last commit's time) dates the man
# pages and the packaged files, so rebuilds are identical.
DIST        ?= dist
NFPM        ?= $(GO) run github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.2
# deb and rpm versions: git describe without the v, "-" made "+"/"." (1.2.3,
# 1.2.3+4.gabcdef0.dirty); an untagged tree gives 0.0.0+git.<commit>.
PKG_VERSION ?= $(shell echo '$(VERSION)' | sed -E 's/^v([0-9])/\1/; /^[0-9]+\./{s/-/+/;s/-/./g;b;}; s/-/./g; s/^/0.0.0+git./')
PKG_ARCH    ?= $(shell $(GO) env GOARCH)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)

.PHONY: man completions package

man: build
	rm -rf $(DIST)/man
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(abspath $(BIN)) __docs --man $(DIST)/man
	gzip -9nf $(DIST)/man/*.1

completions: build
	rm -rf $(DIST)/completions
	$(abspath $(BIN)) __docs --completions $(DIST)/completions

package: build man completions
	@set -e; for p in deb rpm; do \
	  echo "nfpm $$p $(PKG_VERSION) $(PKG_ARCH)"; \
	  SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) VERSION=$(PKG_VERSION) ARCH=$(PKG_ARCH) \
	  BIN=$(BIN) MANDIR=$(DIST)/man COMPDIR=$(DIST)/completions \
	    $(NFPM) package --config packaging/nfpm.yaml --packager $$p --target $(DIST)/; \
	done
	@ls -l $(DIST)/*.deb $(DIST)/*.rpm

# The .deb under a real systemd: a Debian root (debootstrap from apt's own
# source, cached under ~/.cache/coordrun) booted with systemd-nspawn, the
# package installed in it and its units driven (packaging/systemd-test).
# Needs root; where nspawn cannot boot a container it reports "skipped:
# <reason>" and succeeds, unless SYSTEMD_TEST_REQUIRED is set.
.PHONY: systemd-test
systemd-test:
	@skip=$$(mktemp); rc=0; \
	SYSTEMD_TEST_SKIP_FILE=$$skip ./packaging/systemd-test/run.sh $(SYSTEMD_TEST_SCENARIOS) || rc=$$?; \
	if [ $$rc -eq 77 ]; then \
	  echo "systemd-test skipped: $$(cat $$skip)"; rm -f $$skip; \
	  [ -z "$$SYSTEMD_TEST_REQUIRED" ] || exit 1; exit 0; \
	fi; rm -f $$skip; exit $$rc
