# Weir: the two commands on a fresh machine are `make demo` and `make test`.
# Everything builds in release into the one target/ directory, so wasmtime is compiled
# once for the host, the tests and the benchmarks.

CARGO ?= cargo
WASM_TARGET := wasm32-wasip2
UDF_CRATES := change-only-counter campaign-totals top-zones order-timeout session-report tumbling-window stream-join misbehaving-udf ttl-probe \
	versioned-udf-v1 versioned-udf-v2 versioned-udf-broken versioned-udf-bad-init \
	versioned-udf-retyped versioned-udf-migrated not-a-udf
WEIR := target/release/weir

.PHONY: all setup build host udfs guests demo test bench bench-full fmt clippy lint clean

all: build

setup:
	@scripts/setup.sh

## build: the host (target/release/weir) and every UDF component (target/wasm32-wasip2/release/*.wasm)
build: setup host udfs

host:
	$(CARGO) build --release -p weir

udfs: setup
	# Line tables are 90% of a component's size; the name section keeps backtraces readable.
	CARGO_PROFILE_RELEASE_DEBUG=false CARGO_PROFILE_RELEASE_STRIP=debuginfo \
		$(CARGO) build --release --target $(WASM_TARGET) $(addprefix -p ,$(UDF_CRATES))

## guests: the UDFs written in Python and JavaScript (udfs/python, udfs/js), built with their
## toolchains (componentize-py, componentize-qjs), which scripts/toolchain/ installs into
## .weir-tools on first use. The Rust-only targets (build, demo) never need them.
GUESTS := target/guests
PYTHON_SDK := $(wildcard guest-sdk/python/*.lock guest-sdk/python/weir/*.py)
JS_SDK := $(wildcard guest-sdk/js/*.json guest-sdk/js/sdk/*.js)

## The *-batch folders hold the same UDFs built with the batch export (WEIR_GUEST_BATCH=1,
## not the default yet), and the misbehaving UDFs that test it (tests/udfs/python, tests/udfs/js).
guests: $(GUESTS)/python/change_only_counter.wasm $(GUESTS)/js/order_timeout.wasm \
	$(GUESTS)/python-batch/change_only_counter.wasm $(GUESTS)/js-batch/order_timeout.wasm \
	$(GUESTS)/python-batch/misbehaving.wasm $(GUESTS)/js-batch/misbehaving.wasm

$(GUESTS)/python/change_only_counter.wasm: $(wildcard udfs/python/change-only-counter/*) $(PYTHON_SDK) wit/weir.wit guest-sdk/python/requirements.lock
	scripts/toolchain/build-python.sh udfs/python/change-only-counter $@

$(GUESTS)/js/order_timeout.wasm: $(wildcard udfs/js/order-timeout/*) $(JS_SDK) wit/weir.wit guest-sdk/js/package-lock.json
	scripts/toolchain/build-js.sh udfs/js/order-timeout/app.js $@

$(GUESTS)/python-batch/change_only_counter.wasm: $(wildcard udfs/python/change-only-counter/*) $(PYTHON_SDK) wit/weir.wit guest-sdk/python/requirements.lock
	WEIR_GUEST_BATCH=1 scripts/toolchain/build-python.sh udfs/python/change-only-counter $@

$(GUESTS)/js-batch/order_timeout.wasm: $(wildcard udfs/js/order-timeout/*) $(JS_SDK) wit/weir.wit guest-sdk/js/package-lock.json
	WEIR_GUEST_BATCH=1 scripts/toolchain/build-js.sh udfs/js/order-timeout/app.js $@

$(GUESTS)/python-batch/misbehaving.wasm: $(wildcard tests/udfs/python/misbehaving/*) $(PYTHON_SDK) wit/weir.wit guest-sdk/python/requirements.lock
	WEIR_GUEST_BATCH=1 scripts/toolchain/build-python.sh tests/udfs/python/misbehaving $@

$(GUESTS)/js-batch/misbehaving.wasm: $(wildcard tests/udfs/js/misbehaving/*) $(JS_SDK) wit/weir.wit guest-sdk/js/package-lock.json
	WEIR_GUEST_BATCH=1 scripts/toolchain/build-js.sh tests/udfs/js/misbehaving/app.js $@

## demo: change-only ad-click counts from the sample clicks, printed as JSON lines
demo: build
	$(WEIR) run examples/ad-clicks/pipeline.toml

## test: unit tests, UDF tests on the SDK's test host, and end-to-end tests of the real components
## (the Python and JavaScript ones too)
test: build guests
	scripts/test.sh

## bench: the headline figures in about ten minutes (the counter wasm vs native, Weir's
## side of the Flink comparison, hot keys, Python and JavaScript per element, checkpoint
## cost, two keyed stages against one); the last lines are the results. `make bench PART=name` runs one part (flink, stage-graph, state-backend, state-backend-large,
## native, wasm, checkpoints, kafka, postgres, languages, parallel, scale, state-size);
## `make bench-full` runs every part. Starts the broker (scripts/services.sh) if it is
## not running, and stops it afterwards only if it was not already running.
bench: build guests
	$(CARGO) build --release -p weir-e2e --bin weir-bench
	@if scripts/services.sh status 2>/dev/null; then started=0; else started=1; fi; \
	scripts/services.sh start >/dev/null || exit 1; \
	$(CARGO) run --release -p weir-e2e --bin weir-bench -- $(PART); status=$$?; \
	if [ $$started = 1 ]; then scripts/services.sh stop 2>/dev/null || true; fi; \
	exit $$status

bench-full:
	$(MAKE) bench PART=full

fmt:
	$(CARGO) fmt --all

clippy lint:
	$(CARGO) clippy --release --workspace --all-targets -- -D warnings
	$(CARGO) clippy --release --target $(WASM_TARGET) $(addprefix -p ,weir-sdk $(UDF_CRATES)) -- -D warnings

clean:
	$(CARGO) clean
