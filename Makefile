# kubewasm: the README's two commands (`make demo`, `make test`) and their parts.
SHELL := /bin/bash
.DEFAULT_GOAL := help

CARGO ?= cargo
TARGET_DIR := $(shell $(CARGO) metadata --format-version 1 --no-deps 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
# Guest components land here; tests and the demo read them from KUBEWASM_PLUGIN_DIR.
export KUBEWASM_PLUGIN_DIR ?= $(TARGET_DIR)/wasm32-wasip2/plugin
RUST_PLUGINS := namespace-defaults config-reloader configmap-sync
K8S_VERSION ?= 1.37.2
K8S_BIN ?= $(or $(KUBEBUILDER_ASSETS),$(or $(KUBEWASM_K8S_CACHE),$(HOME)/.cache/kubewasm/k8s)/$(K8S_VERSION))
FIXTURES := fixture-looper fixture-memory-bomb fixture-trapper fixture-forbidden fixture-wrong-world fixture-getter fixture-sleeper fixture-stamper

.PHONY: help toolchain plugins control-plane test lint demo demo-check bench bench-hotload

help:
	@echo "make demo    run kubewasm with the example plugins against a local control plane"
	@echo "make test    run every test (builds plugins and the control plane first)"
	@echo "parts: toolchain plugins control-plane lint bench"

## The pinned Rust toolchain and the wasm32-wasip2 target (rust-toolchain.toml names both).
toolchain:
	@rustup show active-toolchain >/dev/null 2>&1 || rustup toolchain install
	@rustup target list --installed | grep -qx wasm32-wasip2 || rustup target add wasm32-wasip2

## Every guest component (example plugins and test fixtures), built once for wasm32-wasip2.
plugins: toolchain
	$(CARGO) build --profile plugin --target wasm32-wasip2 $(addprefix -p ,$(RUST_PLUGINS) $(FIXTURES))
	@ls -l $(KUBEWASM_PLUGIN_DIR)/*.wasm

## kube-apiserver, etcd and kubectl built from Go modules, cached by version.
control-plane:
	bash tests/control-plane/build.sh

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc -p kubewasm -p kubewasm-testenv --no-deps

## Formatting, then every test of the native crates (the guest crates are exercised through
## the components `plugins` builds). Missing docs fail the build itself (workspace lints).
test: toolchain plugins control-plane
	$(CARGO) fmt --all -- --check
	$(CARGO) test --no-fail-fast

## The host and the control-plane launcher, then deploy/demo/demo.sh (Ctrl-C stops it).
demo: plugins control-plane
	$(CARGO) build -p kubewasm -p kubewasm-testenv --bins
	KUBEWASM_BIN_DIR=$(TARGET_DIR)/debug KUBEWASM_KUBECTL=$(K8S_BIN)/kubectl bash deploy/demo/demo.sh

## The demo, stopping after it has shown its result (CI runs this).
demo-check:
	KUBEWASM_DEMO_EXIT=1 KUBEWASM_DEMO_ADMIN=127.0.0.1:18080 $(MAKE) demo

bench: plugins
	$(CARGO) bench -p kubewasm --bench dispatch

## Swap latency of a ~1 MiB (unoptimized) component, with and without the compile cache.
bench-hotload: toolchain control-plane
	$(CARGO) build --profile plugin-unoptimized --target wasm32-wasip2 -p fixture-stamper
	$(CARGO) bench -p kubewasm --bench hotload
