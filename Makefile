# The README names these targets; keep them in sync.
GO ?= go

.PHONY: test vet fuzz-short build demo bench

## test: what CI runs: formatting, vet, the race-enabled test suite and short fuzz runs.
test: vet
	$(GO) test -race -count=1 -timeout 20m ./...
	$(MAKE) fuzz-short

vet:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	$(GO) vet ./...

## fuzz-short: a few seconds of each fuzz target (CI); run longer by hand with -fuzztime.
fuzz-short:
	$(GO) test -run='^$$' -fuzz='^FuzzNormalizePath$$' -fuzztime=10s ./keys/
	$(GO) test -run='^$$' -fuzz='^FuzzParseTemplate$$' -fuzztime=10s ./keys/

## build: the local Caddy binary with this plugin (the xcaddy equivalent).
build:
	$(GO) build -o bin/caddy ./cmd/caddy

## bench: library benchmarks side by side (PING floor, acquire+release for N=1,3,5, hot-key handoff).
bench:
	$(GO) test -run='^$$' -bench=. -benchtime=2s ./redlock/
