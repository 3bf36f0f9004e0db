# courier. `make test` runs everything CI runs; `make help` lists the targets.

SHELL := /bin/bash
GO    ?= go
export PATH := $(PATH):/usr/local/go/bin

COURIER_TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/test
export COURIER_TEST_DATABASE_URL

.PHONY: help test services deps migrate vet kubernetes fuzz bench soak demo install docs

## help: list the targets
help:
	@grep -E '^## ' Makefile | sed 's/^## //'

## test: start services, fetch modules, migrate, vet, check the Kubernetes manifests, run every test with -race, then every fuzz target for a bounded time
test: services deps migrate vet kubernetes
	$(GO) test -race -count=1 -timeout 15m ./...
	@$(MAKE) --no-print-directory fuzz

## kubernetes: vet and run the tests of deploy/kubernetes, a module of its own, which courier's ./... leaves out: the manifests decoded strictly into the Kubernetes and KEDA types, and their rules (docs/kubernetes.md)
kubernetes:
	cd deploy/kubernetes && $(GO) vet ./... && $(GO) test -count=1 ./...

## fuzz: run each Go fuzz target for FUZZTIME (default 10s) beyond its committed corpus
fuzz:
	GO=$(GO) bash scripts/fuzz.sh

## demo: run the whole pipeline once on an embedded Kafka broker and count every event (seconds)
demo: services
	$(GO) run ./cmd/courier demo --database-url "$(COURIER_TEST_DATABASE_URL)"

## docs: write what the docs generate from the code: the CLI reference (docs/cli-reference.md), ARCHITECTURE.md's import arrows and the envelope's fields in docs/wire-format.md; `make test` fails when they are stale
docs:
	$(GO) test -count=1 -run '^TestCLIReferenceIsTheHelp$$' ./cmd/courier/ -update
	$(GO) test -count=1 -run '^(TestArchitectureImportArrows|TestWireFormatListsTheEnvelopeFields)$$' ./docs/ -update

## install: build the courier CLI into $(go env GOBIN), or $(go env GOPATH)/bin (courier has no release yet, so `go install …@latest` cannot fetch it)
install:
	$(GO) install ./cmd/courier
	@bin=$$($(GO) env GOBIN); echo "installed: $${bin:-$$($(GO) env GOPATH)/bin}/courier"

## services: bring PostgreSQL and Redis up on 127.0.0.1 (installing them if missing)
services:
	@bash scripts/services.sh

## deps: download Go modules, courier's and those of deploy/kubernetes
deps:
	$(GO) mod download
	cd deploy/kubernetes && $(GO) mod download

## migrate: apply courier's migrations (outbox and inbox) to the test database (public schema)
migrate:
	$(GO) run ./cmd/courier migrate up --database-url "$(COURIER_TEST_DATABASE_URL)"
	$(GO) run ./cmd/courier migrate up --inbox --database-url "$(COURIER_TEST_DATABASE_URL)"

## vet: go vet and gofmt
vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }

## bench: run the relay, enqueue and consumer benchmarks beside their baselines, then a drain beside 10 million published events, then every benchmark again under the network profile (about 65 minutes), and write the report to BENCHMARKS.md, keeping the headline figures of the runs before
bench: services
	$(GO) run -buildvcs=true ./cmd/courier bench --rounds 5 --previous BENCHMARKS.md --database-url "$(COURIER_TEST_DATABASE_URL)" > BENCHMARKS.md.tmp \
		&& $(GO) run -buildvcs=true ./cmd/courier bench relay --events 50000 --history 10000000 --only relay/defaults \
			--scale-delay -1ms --latency-duration -1s --rounds 3 --output markdown --database-url "$(COURIER_TEST_DATABASE_URL)" > BENCHMARKS-history.tmp \
		&& sed 's/^#/##/; s/^## courier benchmarks/## Relay drain beside a long history/' BENCHMARKS-history.tmp >> BENCHMARKS.md.tmp \
		&& $(GO) run -buildvcs=true ./cmd/courier bench --network --rounds 3 --database-url "$(COURIER_TEST_DATABASE_URL)" > BENCHMARKS-network.tmp \
		&& sed 's/^#/##/; s/^## courier benchmarks/## Under the network profile/' BENCHMARKS-network.tmp >> BENCHMARKS.md.tmp \
		&& mv BENCHMARKS.md.tmp BENCHMARKS.md && rm -f BENCHMARKS-history.tmp BENCHMARKS-network.tmp \
		|| { rm -f BENCHMARKS.md.tmp BENCHMARKS-history.tmp BENCHMARKS-network.tmp; exit 1; }

## soak: run the outbox at 3,000 events/s for 30 minutes and write the queue's sizes over time to SOAK.md
soak: services
	$(GO) run -buildvcs=true ./cmd/courier bench soak --database-url "$(COURIER_TEST_DATABASE_URL)" > SOAK.md.tmp \
		&& mv SOAK.md.tmp SOAK.md || { rm -f SOAK.md.tmp; exit 1; }
