# The two commands: `make demo` (set up, generate, run the pipeline, start 3 nodes;
# `make demo-elastic` with a coordinator) and `make test`. `make bench` runs the reference
# benchmark.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python

CODEGEN := .venv-codegen

.PHONY: setup browser coordinator network kafka s3 collector demo demo-elastic demo-across test lint bench schema clients client-python client-typescript

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e '.[dev]'
	touch $@

# The project's own packages, installed in place: their bytecode is written here, not by
# the interpreter, which a machine may tell not to (PYTHONDONTWRITEBYTECODE). Without it
# every process compiles them again: 0.2 of a node's ~2 CPU-s to start, in each of the
# suite's hundreds of processes. Only what changed since is compiled again.
PACKAGES := contracts topics snapshot_store gateway resolvers spark_pipeline stategate
setup: $(VENV)/.installed
	@$(PY) -m compileall -q -j0 $(PACKAGES) bench tests > /dev/null

# The dashboard's test drives Debian's Chromium (installed as root when missing).
browser:
	@command -v chromium >/dev/null || (apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null)

# The elastic cluster's tests run a real etcd (Debian's etcd-server, installed as root when
# missing); its packaged service is not started: the tests start their own.
coordinator:
	@command -v etcd >/dev/null || (apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null)

# The network-partition tests put each process in a network namespace of its own and cut
# links with nftables (Debian's nftables, installed as root when missing; README: Tests).
network:
	@(command -v nft && command -v ip && command -v tcpdump) >/dev/null || (apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nftables iproute2 tcpdump >/dev/null)

# Apache Kafka's broker, from Maven Central (Java 17 and Maven are on the machine): fetched
# once into ~/.cache/stategate, then found there (stategate/broker.py).
kafka: setup
	$(PY) -m stategate.broker fetch > /dev/null

# A real trace collector for the traces' tests: Jaeger v2 (an OpenTelemetry Collector
# distribution), built once from the Go module proxy into the cache (tests/jaeger.py). Its
# module must be built as a tool of a module of its own (its go.mod has replace directives).
STATEGATE_CACHE ?= $(HOME)/.cache/stategate
JAEGER_VERSION := v1.76.0
JAEGER := $(STATEGATE_CACHE)/jaeger-$(JAEGER_VERSION)/jaeger
collector: $(JAEGER)
# The modules and the build cache (some GB) are dropped once the binary is made.
JAEGER_BUILD := $(dir $(JAEGER))build
$(JAEGER):
	rm -rf $(JAEGER_BUILD) && mkdir -p $(JAEGER_BUILD)/module
	cd $(JAEGER_BUILD)/module && export GOMODCACHE=$(JAEGER_BUILD)/mod GOCACHE=$(JAEGER_BUILD)/cache && \
	  go mod init jaeger-build >/dev/null 2>&1 && \
	  (go get -tool github.com/jaegertracing/jaeger/cmd/jaeger@$(JAEGER_VERSION) \
	    > ../get.log 2>&1 || (tail -5 ../get.log; false)) && \
	  go build -o $@.part github.com/jaegertracing/jaeger/cmd/jaeger && \
	  go clean -modcache
	mv $@.part $@ && rm -rf $(JAEGER_BUILD)

# An S3 API server, S3Proxy from Maven Central, for the snapshot store's tests: fetched once
# into ~/.cache/stategate, then found there (stategate/s3server.py).
s3: setup
	$(PY) -m stategate.s3server fetch > /dev/null

demo: setup kafka
	$(PY) -m stategate.cli demo

# The demo's cluster made elastic: an etcd of its own, and the command that adds a node.
demo-elastic: setup coordinator kafka
	$(PY) -m stategate.cli demo --elastic

# The demo laid out as across machines: its snapshots in a bucket on S3Proxy, TLS everywhere.
demo-across: setup kafka s3
	$(PY) -m stategate.cli demo --across

lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy $(PACKAGES) bench

# npm writes node_modules/.package-lock.json last: installed, and from the current lock file.
TS_MODULES := clients/typescript/node_modules/.package-lock.json
# Apollo's gateway and a second subgraph, for the supergraph test (tests/test_federation.py).
FEDERATION_MODULES := tests/federation/node_modules/.package-lock.json
# The typed clients' generators are installed before the tests run them (README: Typed clients).
test: lint browser coordinator network kafka s3 collector $(CODEGEN)/.installed $(TS_MODULES) $(FEDERATION_MODULES)
	$(PY) -m pytest

bench: setup
	$(PY) -m bench.run $(ARGS)

schema: setup
	$(PY) -m stategate.cli schema > schema.graphql

# The typed clients of clients/operations.graphql (README: Typed clients). ariadne-codegen runs
# in a venv of its own (it needs graphql-core < 3.3, Strawberry 3.3); the stamp holds the
# requirements it was made from, as tests/test_clients.py checks.
$(CODEGEN)/.installed: clients/python/requirements.txt
	$(PYTHON) -m venv --clear $(CODEGEN)
	$(CODEGEN)/bin/python -m pip install -q -r clients/python/requirements.txt
	cp clients/python/requirements.txt $@

client-python: $(CODEGEN)/.installed
	$(CODEGEN)/bin/ariadne-codegen --config clients/python/ariadne-codegen.toml client

$(TS_MODULES): clients/typescript/package-lock.json
	cd clients/typescript && npm ci --no-audit --no-fund

$(FEDERATION_MODULES): tests/federation/package-lock.json
	cd tests/federation && npm ci --no-audit --no-fund

client-typescript: $(TS_MODULES)
	cd clients/typescript && npm run codegen && npm run check

clients: client-python client-typescript
