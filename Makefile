GO       ?= go
BIN      := bin/coordrun
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X main.version=$(VERSION)
FUZZTIME ?= 3s

.PHONY: build test unit fuzz demo bench vet clean

# A static binary: no cgo, so it runs on any Linux host.
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/coordrun

# Everything CI runs: unit, ensemble, interop and process tests under the
# race detector, then every fuzz target briefly.
test: build vet unit fuzz

vet:
	$(GO) vet ./...

unit:
	COORDRUN_BIN=$(CURDIR)/$(BIN) $(GO) test -race -count=1 -timeout 20m ./...

# Each decoder's fuzz target, for FUZZTIME each (longer: make fuzz FUZZTIME=5m).
fuzz:
	@set -e; for pkg in ./ensemble/wire ./ensemble/tree ./ensemble; do \
	  for t in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "fuzz $$pkg $$t"; \
	    $(GO) test -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME) $$pkg >/dev/null; \
	  done; \
	done

# A throwaway 3-member ensemble on loopback, exercised and torn down.
demo: build
	./examples/demo.sh

# Throughput and latency of a 3-member loopback ensemble.
bench: build
	$(GO) run ./ensemble/bench -bin $(BIN)

clean:
	rm -rf bin
