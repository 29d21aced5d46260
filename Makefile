# The README names these targets; keep them in sync.
GO ?= go

.PHONY: test vet fuzz-short build demo demo-check bench bench-lib

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

## demo: 5 local Redis masters, the demo upstream and two Caddy instances running
## Caddyfile.example; prints what to try, Ctrl-C stops everything.
demo:
	bash demo/run.sh

## demo-check: the same demo, run non-interactively: it checks what it shows and exits.
demo-check:
	bash demo/run.sh --check

## bench: everything side by side (floor, lock cost, Caddy overhead, hot key, waiters,
## redsync) in one run; tables in the terminal, bench/results.json and bench/results.md.
bench:
	$(GO) -C bench run .

## bench-lib: the redlock package's own go test benchmarks.
bench-lib:
	$(GO) test -run='^$$' -bench=. -benchtime=2s ./redlock/
