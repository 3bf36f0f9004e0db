# courier — the two commands a user needs are `make test` and (soon) `make demo`.

SHELL := /bin/bash
GO    ?= go
export PATH := $(PATH):/usr/local/go/bin

COURIER_TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/test
export COURIER_TEST_DATABASE_URL

.PHONY: test services deps migrate vet unit fmt

## test: start services, fetch modules, migrate, vet, and run every test with -race
test: services deps migrate vet
	$(GO) test -race -count=1 -timeout 15m ./...

## services: bring PostgreSQL and Redis up on 127.0.0.1 (installing them if missing)
services:
	@bash scripts/services.sh

## deps: download Go modules
deps:
	$(GO) mod download

## migrate: apply the plain SQL migration files with psql to the public schema of the test database
migrate:
	@for f in migrations/sql/*.up.sql; do \
		v=$$(basename $$f | cut -d_ -f1); \
		done_=$$(psql "$(COURIER_TEST_DATABASE_URL)" -Atqc "SELECT to_regclass('public.courier_outbox') IS NOT NULL"); \
		if [ "$$done_" = t ] && [ "$$v" = 0001 ]; then echo "migrate: $$f already applied"; continue; fi; \
		psql "$(COURIER_TEST_DATABASE_URL)" -v ON_ERROR_STOP=1 -q -f $$f && echo "migrate: applied $$f"; \
	done

## vet: go vet and gofmt
vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
