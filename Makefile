# kubewasm: the README's two commands (`make demo`, `make test`) and their parts.
SHELL := /bin/bash
.DEFAULT_GOAL := help

CARGO ?= cargo
TARGET_DIR := $(shell $(CARGO) metadata --format-version 1 --no-deps 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
# Guest components land here; tests and the demo read them from KUBEWASM_PLUGIN_DIR.
export KUBEWASM_PLUGIN_DIR ?= $(TARGET_DIR)/wasm32-wasip2/plugin
RUST_PLUGINS := namespace-defaults config-reloader configmap-sync sample-controller cronjob
K8S_VERSION ?= 1.37.2
K8S_BIN ?= $(or $(KUBEBUILDER_ASSETS),$(or $(KUBEWASM_K8S_CACHE),$(HOME)/.cache/kubewasm/k8s)/$(K8S_VERSION))
# Plugins in other languages: plugins/python/<name>/<name_with_underscores>.py and
# plugins/js/<name>/<name>.js, built to <name_with_underscores>_py.wasm / _js.wasm.
PY_PLUGINS := namespace-defaults sample-controller cronjob
# Language engines (wit/engine@0.1.0): one component per language and SDK version that runs
# plugins given as source (`engine: python@0.3` in a plugin's config). The host finds them in
# KUBEWASM_ENGINE_DIR (`kubewasm run --engine-dir`).
export KUBEWASM_ENGINE_DIR ?= $(TARGET_DIR)/engines
PY_SDK_VERSION := $(shell sed -n 's/^version = "\(.*\)"$$/\1/p' plugins/sdk/python/pyproject.toml)
JS_SDK_VERSION := $(shell sed -n 's/^  "version": "\(.*\)",$$/\1/p' plugins/sdk/js/package.json)
WIT_ENGINE := wit/engine@0.1.0
JS_PLUGINS := namespace-defaults sample-controller cronjob
GO_PLUGINS := namespace-defaults contract-calls sample-controller cronjob
# Their toolchains, pinned (plugins/python/requirements.txt, plugins/js/package-lock.json) and
# installed once per version into this cache; a plain `cargo build` needs none of them.
KUBEWASM_TOOLS ?= $(HOME)/.cache/kubewasm/tools
COMPONENTIZE_PY_VERSION := $(shell sed -n 's/^componentize-py==//p' plugins/python/requirements.txt)
PY_TOOL := $(KUBEWASM_TOOLS)/componentize-py-$(COMPONENTIZE_PY_VERSION)
JS_TOOL := $(KUBEWASM_TOOLS)/js-$(shell cat plugins/js/package.json plugins/js/package-lock.json | sha256sum | cut -c1-16)
# mdBook, for the book (docs/; `make docs`): the newest release when pinned, built from crates.io
# with the lock file it was released with, without its `serve`/`watch` features.
MDBOOK_VERSION := 0.5.4
MDBOOK := $(KUBEWASM_TOOLS)/mdbook-$(MDBOOK_VERSION)/bin/mdbook
# Go: mainline Go (GOOS=wasip1) and tools/go-component, a workspace binary that gives the WASI
# preview1 adapter an arena in Go's data and wraps module + adapter into a component
# (wit-component, what `wasm-tools component new` runs). The adapter is the preview1 reactor
# adapter @bytecodealliance/jco ships (in the JS toolchain's node_modules).
GO_COMPONENT := $(TARGET_DIR)/debug/kubewasm-go-component
REACTOR_ADAPTER := $(JS_TOOL)/node_modules/@bytecodealliance/jco/lib/wasi_snapshot_preview1.reactor.wasm
GO ?= go
# Every SDK is on contract 0.3. The host still serves 0.2 and 0.1 components: plugins/fixtures/
# frozen-0-2 binds wit/controller@0.2.0 itself, and the legacy fixtures (plugins/fixtures/legacy,
# hostile-legacy) bind wit/controller@0.1.0.
WIT_03 := wit/controller@0.3.0
# The host's container image (`make image`): a static binary for this machine's architecture,
# named after the workspace version; the OCI layout and oci-archive land in KUBEWASM_IMAGE_DIR,
# where the image test (host/tests/all/image.rs) reads them.
MUSL_TARGET := $(shell uname -m)-unknown-linux-musl
VERSION := $(shell sed -n 's/^version = "\(.*\)"$$/\1/p' Cargo.toml | head -n1)
IMAGE := kubewasm:$(VERSION)
export KUBEWASM_IMAGE_DIR ?= $(TARGET_DIR)/image
# The image's binary builds in a target dir of its own, so that `make test` can build it beside
# the test binaries: cargo locks a target dir for one build at a time, and the image's fat LTO
# spends most of its time in one codegen unit, on one CPU, leaving the other to the tests.
IMAGE_TARGET_DIR := $(TARGET_DIR)/image-build
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
FIXTURES := fixture-looper fixture-memory-bomb fixture-trapper fixture-forbidden fixture-wrong-world fixture-getter fixture-sleeper fixture-counter fixture-stamper fixture-greedy fixture-intruder fixture-mapper fixture-latency fixture-contract fixture-legacy fixture-hostile fixture-hostile-legacy fixture-desired fixture-frozen-0-2

.PHONY: docs install help toolchain plugins engines engines-compiled rust-plugins py-plugins js-plugins go-plugins sdk-test sdk-packages control-plane registry helm promtool test lint demo demo-check bench bench-hotload bench-peer bench-converge bench-converge-ten bench-plugin-rss bench-latency bench-workqueue image image-tools image-binary release reactor-adapter test-binaries

help:
	@echo "make demo    run kubewasm with the example plugins against a local control plane"
	@echo "make test    run every test (builds plugins and the control plane first)"
	@echo "make image   build the host's container image ($(IMAGE)) without a Docker engine"
	@echo "make install put kubewasm on the PATH (cargo install into ~/.cargo/bin) and its engines beside"
	@echo "make docs    build the book (docs/) into $(TARGET_DIR)/book and check its links"
	@echo "parts: toolchain plugins control-plane registry helm promtool lint bench"

## `kubewasm` on the PATH (~/.cargo/bin): the release binary, built from the lock file, and the
## language engines where it finds them (~/.cargo/lib/kubewasm/engines), precompiled by that
## binary as the image's are, so a first `kubewasm dev` compiles no engine.
INSTALL_ROOT := $(or $(CARGO_INSTALL_ROOT),$(CARGO_HOME),$(HOME)/.cargo)
install: toolchain engines
	$(CARGO) install --locked --path host --bin kubewasm
	mkdir -p $(INSTALL_ROOT)/lib/kubewasm/engines
	cp $(KUBEWASM_ENGINE_DIR)/*.wasm $(INSTALL_ROOT)/lib/kubewasm/engines/
	bash deploy/image/precompile-engines.sh $(INSTALL_ROOT)/bin/kubewasm $(INSTALL_ROOT)/lib/kubewasm/engines

## The pinned Rust toolchain and the wasm32-wasip2 target (rust-toolchain.toml names both).
toolchain:
	@rustup show active-toolchain >/dev/null 2>&1 || rustup toolchain install
	@rustup target list --installed | grep -qx wasm32-wasip2 || rustup target add wasm32-wasip2

## The path of the WASI preview1 reactor adapter a Go component is made with (in the JS toolchain).
reactor-adapter:
	@echo $(REACTOR_ADAPTER)

## Every guest component (example plugins in each language and test fixtures).
plugins: rust-plugins py-plugins js-plugins go-plugins engines
	@ls -l $(KUBEWASM_PLUGIN_DIR)/*.wasm $(KUBEWASM_ENGINE_DIR)/*.wasm

rust-plugins: toolchain
	$(CARGO) build --profile plugin --target wasm32-wasip2 $(addprefix -p ,$(RUST_PLUGINS) $(FIXTURES))

py-plugins: $(foreach p,$(PY_PLUGINS),$(KUBEWASM_PLUGIN_DIR)/$(subst -,_,$(p))_py.wasm)
engines: $(KUBEWASM_ENGINE_DIR)/python-$(PY_SDK_VERSION).wasm $(KUBEWASM_ENGINE_DIR)/js-$(JS_SDK_VERSION).wasm
## The engines precompiled into $(KUBEWASM_ENGINE_DIR)/compiled, which a host maps instead of
## compiling an engine (the image ships them): by the tests' host binary, built well before the
## image's static one, which runs the same code (wasmtime checks each file fits when it loads it).
## Skipped when nothing that decides them changed (deploy/image/precompile-engines.sh).
engines-compiled: engines test-binaries
	bash deploy/image/precompile-engines.sh $(TARGET_DIR)/debug/kubewasm $(KUBEWASM_ENGINE_DIR)
js-plugins: $(foreach p,$(JS_PLUGINS),$(KUBEWASM_PLUGIN_DIR)/$(subst -,_,$(p))_js.wasm)
go-plugins: $(foreach p,$(GO_PLUGINS),$(KUBEWASM_PLUGIN_DIR)/$(subst -,_,$(p))_go.wasm)

# The toolchains: a venv with componentize-py; `npm ci` of the committed lock file. Their
# directories are named by version / lock-file hash, so the stamp's existence is enough (a fresh
# clone's newer file times must not reinstall them).
$(PY_TOOL)/.installed: | plugins/python/requirements.txt
	rm -rf $(PY_TOOL) && python3 -m venv $(PY_TOOL)
	$(PY_TOOL)/bin/pip install --quiet --disable-pip-version-check -r plugins/python/requirements.txt
	touch $@
$(JS_TOOL)/.installed: | plugins/js/package.json plugins/js/package-lock.json
	rm -rf $(JS_TOOL) && mkdir -p $(JS_TOOL) && cp plugins/js/package.json plugins/js/package-lock.json $(JS_TOOL)/
	cd $(JS_TOOL) && npm ci --no-audit --no-fund --loglevel=error
	touch $@
$(PY_TOOL)/.pytest-installed: $(PY_TOOL)/.installed plugins/python/requirements-test.txt
	$(PY_TOOL)/bin/pip install --quiet --disable-pip-version-check -r plugins/python/requirements-test.txt
	touch $@
$(GO_COMPONENT): tools/go-component/Cargo.toml $(wildcard tools/go-component/src/*.rs)
	$(CARGO) build -p kubewasm-go-component

# A plugin is rebuilt when its sources, its SDK, the WIT world or its toolchain change.
.SECONDEXPANSION:
$(KUBEWASM_PLUGIN_DIR)/%_py.wasm: $(PY_TOOL)/.installed $(WIT_03)/controller.wit \
		$$(wildcard plugins/sdk/python/kubewasm/*.py) \
		$$(wildcard plugins/python/$$(subst _,-,$$*)/*.py plugins/python/$$(subst _,-,$$*)/requirements.txt)
	@mkdir -p $(@D)
	@# componentize-py writes __pycache__ into the directories it reads: give it copies.
	rm -rf $@.src && mkdir -p $@.src/sdk $@.src/plugin $@.src/deps
	cp -r plugins/sdk/python/kubewasm $@.src/sdk/ && cp plugins/python/$(subst _,-,$*)/*.py $@.src/plugin/
	@# A plugin's own pure-Python dependencies, if it lists any (plugins/python/<name>/requirements.txt,
	@# every one pinned): installed once per list into the tools cache, put on its path alone.
	@# Installed beside it and renamed into place, so two plugins of one list built at once
	@# (make -j) never read or write a half-installed directory.
	reqs=plugins/python/$(subst _,-,$*)/requirements.txt; \
	if [ -f $$reqs ]; then deps=$(KUBEWASM_TOOLS)/py-deps-$$(sha256sum < $$reqs | cut -c1-16); \
		[ -f $$deps/.installed ] || { tmp=$$deps.$$$$ && rm -rf $$tmp && $(PY_TOOL)/bin/pip install --quiet \
			--disable-pip-version-check --no-deps --target $$tmp -r $$reqs && touch $$tmp/.installed && \
			{ [ -f $$deps/.installed ] || { rm -rf $$deps && mv -T $$tmp $$deps; }; } && rm -rf $$tmp; }; \
		cp -r $$deps/. $@.src/deps/; fi
	$(PY_TOOL)/bin/componentize-py -d $(WIT_03) -w controller componentize \
		-p $@.src/sdk -p $@.src/plugin -p $@.src/deps $* -o $@.tmp
	rm -rf $@.src
	mv $@.tmp $@
# The Python engine: plugins/engine/python/kubewasm_engine.py with the SDK, pre-initialized with
# the standard library modules it lists (STDLIB) imported.
$(KUBEWASM_ENGINE_DIR)/python-%.wasm: $(PY_TOOL)/.installed $(WIT_ENGINE)/engine.wit $(WIT_03)/controller.wit \
		$(wildcard plugins/sdk/python/kubewasm/*.py) plugins/engine/python/kubewasm_engine.py
	@mkdir -p $(@D)
	rm -rf $@.src && mkdir -p $@.src/sdk $@.src/engine
	cp -r plugins/sdk/python/kubewasm $@.src/sdk/ && cp plugins/engine/python/kubewasm_engine.py $@.src/engine/
	$(PY_TOOL)/bin/componentize-py -d $(WIT_ENGINE) -w engine componentize \
		-p $@.src/sdk -p $@.src/engine kubewasm_engine -o $@.tmp
	rm -rf $@.src
	mv $@.tmp $@
# The JavaScript engine: plugins/engine/js/*.js with the SDK and acorn (the pinned tools'), bundled
# from a copy laid out as the repository is, then pre-initialized by componentize-js.
$(KUBEWASM_ENGINE_DIR)/js-%.wasm: $(JS_TOOL)/.installed $(WIT_ENGINE)/engine.wit $(WIT_03)/controller.wit \
		$(wildcard plugins/sdk/js/*.js) $(wildcard plugins/engine/js/*.js)
	rm -rf $@.src && mkdir -p $@.src/plugins/engine $@.src/plugins/sdk $@.src/bundle
	cp -r plugins/sdk/js $@.src/plugins/sdk/ && cp -r plugins/engine/js $@.src/plugins/engine/
	rm -rf $@.src/plugins/engine/js/node_modules $@.src/plugins/engine/js/test
	ln -s $(JS_TOOL)/node_modules $@.src/plugins/engine/js/node_modules
	$(JS_TOOL)/node_modules/.bin/rolldown $@.src/plugins/engine/js/engine.js --format esm \
		$(foreach i,types cache client events log config,--external kubewasm:controller/$(i)@0.3.0) \
		--file $@.src/bundle/engine.js
	@# componentize-js resolves the source relative to the working directory.
	cd $@.src/bundle && $(JS_TOOL)/node_modules/.bin/componentize-js engine.js --wit $(CURDIR)/$(WIT_ENGINE) \
		-n engine --disable http fetch-event -o $@.tmp
	rm -rf $@.src
	mv $@.tmp $@
$(KUBEWASM_PLUGIN_DIR)/%_js.wasm: $(JS_TOOL)/.installed $(WIT_03)/controller.wit \
		$(wildcard plugins/sdk/js/*.js) \
		$$(wildcard plugins/js/$$(subst _,-,$$*)/*.js plugins/js/$$(subst _,-,$$*)/package*.json)
	@mkdir -p $(@D)/js-bundle
	@# Bundled from a copy laid out as the repository is (the plugin imports the SDK by path). A
	@# plugin's own npm packages, if it lists any (plugins/js/<name>/package.json and its lock), are
	@# installed once per lock into the tools cache with `npm ci` and linked beside its copy.
	rm -rf $@.src && mkdir -p $@.src/plugins/js $@.src/plugins/sdk
	cp -r plugins/sdk/js $@.src/plugins/sdk/ && cp -r plugins/js/$(subst _,-,$*) $@.src/plugins/js/
	dir=plugins/js/$(subst _,-,$*); \
	if [ -f $$dir/package-lock.json ]; then \
		deps=$(KUBEWASM_TOOLS)/js-deps-$$(cat $$dir/package.json $$dir/package-lock.json | sha256sum | cut -c1-16); \
		[ -f $$deps/.installed ] || { rm -rf $$deps && mkdir -p $$deps && cp $$dir/package.json $$dir/package-lock.json $$deps/ \
			&& (cd $$deps && npm ci --no-audit --no-fund --loglevel=error) && touch $$deps/.installed; }; \
		rm -rf $@.src/$$dir/node_modules && ln -s $$deps/node_modules $@.src/$$dir/node_modules; fi
	$(JS_TOOL)/node_modules/.bin/rolldown $@.src/plugins/js/$(subst _,-,$*)/$(subst _,-,$*).js --format esm \
		$(foreach i,types cache client events log config,--external kubewasm:controller/$(i)@0.3.0) \
		--file $(@D)/js-bundle/$*.js
	rm -rf $@.src
	# componentize-js resolves the source relative to the working directory.
	cd $(@D)/js-bundle && $(JS_TOOL)/node_modules/.bin/componentize-js $*.js --wit $(CURDIR)/$(WIT_03) \
		-n controller --disable http fetch-event -o $@.tmp
	mv $@.tmp $@
# The core module (`c-shared`: a reactor whose _initialize starts Go's runtime), then the component.
$(KUBEWASM_PLUGIN_DIR)/%_go.wasm: $(GO_COMPONENT) $(JS_TOOL)/.installed $(WIT_03)/controller.wit \
		$(wildcard plugins/sdk/go/*.go plugins/sdk/go/go.mod) \
		$$(wildcard plugins/go/$$(subst _,-,$$*)/*.go plugins/go/$$(subst _,-,$$*)/go.mod)
	@mkdir -p $(@D)/go-build
	cd plugins/go/$(subst _,-,$*) && GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -trimpath \
		-o $(@D)/go-build/$*.core.wasm .
	$(GO_COMPONENT) $(@D)/go-build/$*.core.wasm --wit $(WIT_03) --adapter $(REACTOR_ADAPTER) -o $@.tmp
	mv $@.tmp $@

## Unit tests of the Python and JavaScript SDKs' pure helpers (conditions, finalizers, errors)
## and of the JavaScript engine's `source` export (plugins/engine/js/test), without a component or
## a cluster: pytest over the bindings componentize-py generates (their host functions replaced by
## fakes), node --test with the host imports resolved to fakes and acorn to the pinned tools'.
sdk-test: $(PY_TOOL)/.pytest-installed $(JS_TOOL)/.installed
	rm -rf $(TARGET_DIR)/py-bindings && $(PY_TOOL)/bin/componentize-py -d $(WIT_03) -w controller \
		bindings $(TARGET_DIR)/py-bindings
	cd plugins/sdk/python && PYTHONDONTWRITEBYTECODE=1 KUBEWASM_PY_BINDINGS=$(TARGET_DIR)/py-bindings $(PY_TOOL)/bin/python -m pytest \
		-q -p no:cacheprovider tests
	cd plugins/sdk/js && node --import ./test/register.mjs --test test/*.test.mjs
	cd plugins/engine/js && KUBEWASM_ACORN=$(JS_TOOL)/node_modules/acorn/dist/acorn.mjs \
		node --import ./test/register.mjs --test test/*.test.mjs

## The SDKs as packages, for plugin projects outside this repository (`kubewasm new python|js
## --sdk FILE`): the Python SDK's wheel (flit_core, without writing into plugins/sdk/python) and
## the JavaScript SDK's npm tarball, in $(SDK_DIST).
SDK_DIST := $(TARGET_DIR)/sdk
sdk-packages: $(PY_TOOL)/.installed
	$(PY_TOOL)/bin/pip install --quiet --disable-pip-version-check -r plugins/python/requirements.txt
	@mkdir -p $(SDK_DIST)
	$(PY_TOOL)/bin/pip wheel --quiet --disable-pip-version-check --no-deps --no-build-isolation \
		-w $(SDK_DIST) plugins/sdk/python
	cd plugins/sdk/js && npm pack --loglevel=error --pack-destination $(SDK_DIST)

## The book: docs/src rendered by the pinned mdBook into $(TARGET_DIR)/book (not the source tree),
## then every internal link and anchor checked (docs/check-links.py says why it is hand-written).
## `host/tests/book.rs` runs its getting-started commands; `make test` runs both.
BOOK_DIR := $(TARGET_DIR)/book
docs: $(MDBOOK)
	$(MDBOOK) build docs --dest-dir $(BOOK_DIR)
	python3 docs/check-links.py $(BOOK_DIR) .
# Installed once per version (the file's existence is enough); a temporary target dir, so the
# workspace's is not locked meanwhile.
$(MDBOOK):
	$(NO_JOBSERVER) env -u CARGO_TARGET_DIR $(CARGO) install --locked --quiet --no-default-features \
		--features search --root $(KUBEWASM_TOOLS)/mdbook-$(MDBOOK_VERSION) mdbook@$(MDBOOK_VERSION)

## kube-apiserver, etcd and kubectl built from Go modules, cached by version.
control-plane:
	bash tests/control-plane/build.sh

## The CNCF distribution registry the OCI tests push to and pull from, built from Go modules.
registry:
	bash tests/registry/build.sh

## helm and promtool, built from their Go modules (cached by version) for the chart and alert
## tests (host/tests/kit).
helm:
	bash tests/helm/build.sh
promtool:
	bash tests/promtool/build.sh

## What `make image` needs: umoci, skopeo, musl-gcc (ring's C code) and CA certificates from
## Debian packages, and the musl target of the pinned toolchain; buildah for the image test,
## which builds the Dockerfile's final stage with it.
image-tools: toolchain
	@command -v umoci >/dev/null && command -v skopeo >/dev/null && command -v musl-gcc >/dev/null \
		&& command -v buildah >/dev/null && command -v strip >/dev/null && test -f /etc/ssl/certs/ca-certificates.crt \
		|| { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq umoci skopeo musl-tools buildah binutils ca-certificates; }
	@rustup target list --installed | grep -qx $(MUSL_TARGET) || rustup target add $(MUSL_TARGET)

## The host's container image without a Docker engine or base-image pull: a static (musl)
## release binary, the language engines and the example plugins, as the Dockerfile's final stage lays them out
## (deploy/image/build.sh). Prints the image's name; the book's "Deploying with kustomize" says how to push it.
image: image-tools rust-plugins engines-compiled image-binary
	bash deploy/image/build.sh $(KUBEWASM_IMAGE_DIR) $(IMAGE_TARGET_DIR)/$(MUSL_TARGET)/image/kubewasm \
		$(TARGET_DIR)/wasm32-wasip2/plugin $(KUBEWASM_ENGINE_DIR)

## A release archive of the image's static binary, stripped (`kubewasm manifests` prints what a
## cluster needs): dist/kubewasm-VERSION-TARGET.tar.gz, and its line tables apart in
## dist/kubewasm-VERSION-TARGET.debug.tar.gz (the binary names them by .gnu_debuglink).
release: image
	rm -rf $(TARGET_DIR)/dist && mkdir -p $(TARGET_DIR)/dist/bin
	install -m 0755 $(KUBEWASM_IMAGE_DIR)/kubewasm $(TARGET_DIR)/dist/bin/kubewasm
	cp $(KUBEWASM_IMAGE_DIR)/kubewasm.debug $(TARGET_DIR)/dist/bin/kubewasm.debug
	cd $(TARGET_DIR)/dist/bin && objcopy --add-gnu-debuglink=kubewasm.debug kubewasm
	cp README.md $(TARGET_DIR)/dist/bin/
	tar -C $(TARGET_DIR)/dist/bin -czf $(TARGET_DIR)/dist/kubewasm-$(VERSION)-$(MUSL_TARGET).tar.gz kubewasm README.md
	tar -C $(TARGET_DIR)/dist/bin -czf $(TARGET_DIR)/dist/kubewasm-$(VERSION)-$(MUSL_TARGET).debug.tar.gz kubewasm.debug
	@ls -l $(TARGET_DIR)/dist/*.tar.gz

## Clippy checks the guest crates too (the SDK, the example plugins, the fixtures), built for
## the host: what a plugin author runs on a plugin includes the SDK's generated bindings.
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc -p kubewasm-queue -p kubewasm-informer -p kubewasm-runtime -p kubewasm-host -p kubewasm -p kubewasm-testenv --no-deps

## The image's static binary alone (what takes long in `make image`). At nice 10 under `make
## test`, so the tests come first: the machine is busy either way (CONTRIBUTING.md, "Build and
## test time").
image-binary: image-tools
	$(NO_JOBSERVER) CARGO_TARGET_DIR=$(IMAGE_TARGET_DIR) CC_$(subst -,_,$(MUSL_TARGET))=musl-gcc \
		nice -n 10 $(CARGO) build --profile image --locked --target $(MUSL_TARGET) -p kubewasm

## The test binaries, built and not run.
test-binaries: toolchain
	$(NO_JOBSERVER) $(CARGO) test --no-run --locked

# `make test` runs the test binaries side by side (the e2e binaries mostly wait on API servers
# and Leases), each target's output printed whole when it ends (--output-sync). Every run selects
# the default members, as `test-binaries` does, so that cargo resolves the same features and
# builds nothing again; `--test NAME` picks the binary.
E2E_TESTS := shard_e2e all outage_e2e
# Every other test target of the default members (a new one runs without being named here).
OTHER_TESTS = $(shell $(CARGO) metadata --format-version 1 --no-deps | python3 -c 'import json,sys; m=json.load(sys.stdin); d=set(m["workspace_default_members"]); print(" ".join(sorted(t["name"] for p in m["packages"] if p["id"] in d for t in p["targets"] if "test" in t["kind"] and t["name"] not in "$(E2E_TESTS)".split())))')
# A test run must not join this make's jobserver: `cargo` under the tests (a new project's
# build) would wait for tokens the other test runs hold.
NO_JOBSERVER := env -u MAKEFLAGS -u MFLAGS -u CARGO_MAKEFLAGS
# Tests that run the image's binary need `make image`, which finishes later than the other runs.
IMAGE_TESTS := image::

.PHONY: test-runs test-units test-image $(addprefix test-e2e-,$(E2E_TESTS))
test-e2e-all: test-binaries plugins sdk-packages engines-compiled
	$(NO_JOBSERVER) $(CARGO) test --no-fail-fast --test all -- --skip $(IMAGE_TESTS)
# A static pattern rule: make looks up no implicit rule for a phony target, so a plain pattern
# rule would leave these runs without a recipe, silently.
$(addprefix test-e2e-,$(filter-out all,$(E2E_TESTS))): test-e2e-%: test-binaries plugins engines-compiled
	$(NO_JOBSERVER) $(CARGO) test --no-fail-fast --test $*
test-image: test-binaries image
	$(NO_JOBSERVER) $(CARGO) test --no-fail-fast --test all -- $(IMAGE_TESTS)
# The kit test's PromQL reader (tools/promql-uses): a binary of its own, so that promql-parser's
# build dependencies stay out of the test build's feature resolution.
PROMQL_USES := $(TARGET_DIR)/debug/kubewasm-promql-uses
$(PROMQL_USES): tools/promql-uses/Cargo.toml $(wildcard tools/promql-uses/src/*.rs)
	$(NO_JOBSERVER) $(CARGO) build --locked -p kubewasm-promql-uses
# helm and promtool (host/tests/kit) build here, beside the test binaries, not before them.
test-units: test-binaries plugins engines-compiled $(PROMQL_USES) helm promtool
	$(NO_JOBSERVER) $(CARGO) test --no-fail-fast --lib --bins $(addprefix --test ,$(OTHER_TESTS))
	$(NO_JOBSERVER) $(CARGO) test --no-fail-fast --doc
	$(NO_JOBSERVER) $(CARGO) test --no-fail-fast -p kubewasm-go-component
	$(NO_JOBSERVER) $(CARGO) test --no-fail-fast -p kubewasm-sdk --lib
	$(NO_JOBSERVER) $(CARGO) test --no-fail-fast -p cronjob --lib
# The longest first: make starts prerequisites in the order they are named.
test-runs: $(addprefix test-e2e-,$(E2E_TESTS)) test-image test-units sdk-test docs

## Formatting, then every test of the native crates (the guest crates are exercised through
## the components `plugins` builds, and the Rust SDK's unit tests run natively; the container image
## through the image test). Missing docs fail
## the build itself (workspace lints). The image's binary builds beside the test binaries and
## the test runs; `-k` runs every test even when one fails, and make fails at the end.
test: toolchain control-plane registry image-tools
	$(CARGO) fmt --all -- --check
	$(MAKE) --no-print-directory -j8 -k --output-sync=target image-binary test-runs

## The host and the control-plane launcher, then deploy/demo/demo.sh (Ctrl-C stops it).
demo: plugins control-plane
	$(CARGO) build -p kubewasm -p kubewasm-testenv --bins
	KUBEWASM_BIN_DIR=$(TARGET_DIR)/debug KUBEWASM_KUBECTL=$(K8S_BIN)/kubectl bash deploy/demo/demo.sh

## The demo, stopping after it has shown its result (CI runs this).
demo-check:
	KUBEWASM_DEMO_EXIT=1 KUBEWASM_DEMO_ADMIN=127.0.0.1:18080 $(MAKE) demo

## Every side-by-side benchmark (each against its peer in the same run; BENCHMARKS.md), and the
## dispatch benchmark. Run it on a quiet machine: the figures are only as good as the machine.
bench: plugins control-plane bench-peer
	$(CARGO) bench -p kubewasm --bench dispatch
	$(MAKE) bench-workqueue
	$(CARGO) bench -p kubewasm --bench informer
	$(CARGO) bench -p kubewasm --bench converge
	$(MAKE) bench-converge bench-converge-ten bench-plugin-rss bench-latency

## WorkQueue beside client-go's, alternating passes (benches/workqueue.sh).
bench-workqueue:
	bash benches/workqueue.sh

# Arguments for the converge benchmarks below, e.g. ARGS="--namespaces 50 --rounds 1"
# (`cargo bench -p kubewasm --bench peer_converge -- --help` lists them).
ARGS ?=
## Converge beside controller-runtime: kubewasm (warm and cold compile cache) and the peer with
## its FIFO and its default priority queue, interleaved rounds, a fresh control plane each; then
## each restarted over what it converged.
bench-converge: rust-plugins control-plane bench-peer
	KUBEWASM_BENCH_PEER=$(PEER_BIN) $(CARGO) bench -p kubewasm --bench peer_converge -- --restart $(ARGS)
## Ten copies of namespace-defaults: one kubewasm host, ten controller-runtime processes, one
## controller-runtime manager with ten controllers; then each restarted.
bench-converge-ten: rust-plugins control-plane bench-peer
	KUBEWASM_BENCH_PEER=$(PEER_BIN) $(CARGO) bench -p kubewasm --bench peer_converge -- --plugins 10 --restart $(ARGS)
## kubewasm's resident set with 1, 2, 5, 10 and 20 plugins: the cost of one more plugin.
bench-plugin-rss: rust-plugins control-plane bench-peer
	KUBEWASM_BENCH_PEER=$(PEER_BIN) $(CARGO) bench -p kubewasm --bench peer_converge -- --marginal 1,2,5,10,20 $(ARGS)

## Event → reconcile latency beside controller-runtime: 500 updates/s to cached ConfigMaps.
bench-latency: rust-plugins control-plane bench-peer
	KUBEWASM_BENCH_PEER=$(PEER_BIN) $(CARGO) bench -p kubewasm --bench peer_converge -- --latency $(ARGS)

## Swap latency of a ~1 MiB (unoptimized) component, with and without the compile cache.
bench-hotload: toolchain control-plane
	$(CARGO) build --profile plugin-unoptimized --target wasm32-wasip2 -p fixture-stamper
	$(CARGO) bench -p kubewasm --bench hotload

## Edit → effect under `kubewasm dev` per scaffolded language (BENCHMARKS.md), and the Python
## plugin's pull from the harness registry beside its load from a file: release, measurements
## printed, nothing asserted about time.
bench-edit: plugins control-plane sdk-packages
	$(CARGO) test -p kubewasm --release --test all -- --ignored --nocapture dev::edit_to_effect
bench-pull: plugins registry
	$(CARGO) test -p kubewasm --release --test all -- --ignored --nocapture oci::python_pull

## The controller-runtime peer of the converge benchmarks (benches/go/controller-runtime: Go's
## build cache makes a rebuild cheap, so it is always built).
PEER_BIN := $(TARGET_DIR)/bench-peer/controller-runtime
bench-peer:
	cd benches/go/controller-runtime && $(GO) build -trimpath -o $(PEER_BIN) .
