# One entry point for people and CI. Every target creates what it needs first.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell sha1sum pyproject.toml | cut -c1-12)
SLURM_DIR ?= $(CURDIR)/.slurm
# The Slurm 24.11 cluster (Debian 13 root in .slurm-roots/trixie) on its own ports
SLURM24_DIR ?= $(CURDIR)/.slurm-24.11
SLURM24_PORT_BASE ?= 6917
export SLURM_DIR SLURM24_DIR SLURM24_PORT_BASE

.PHONY: agent-wheels test-host-roots test-hosts-clean failover venv focus-venv browser-deps proxy-deps run simulate test test-e2e test-unit test-browser test-ha lint typecheck bench chaos slurm-up slurm-down pg-up pg-down \
        localstack-up localstack-down iac-review clean

venv: $(STAMP)

# focus-validator 1.0.0 (the last release for Python 3.11) pins numpy<2: it gets its own venv.
# focus-validator 2.2.1 carries the FOCUS 1.2 rules and needs Python 3.12 (pyenv has it here):
# a second venv. It declares numpy<2, but the pyarrow it pulls in needs numpy 2 to import.
FOCUS_STAMP := .venv-focus/.installed-1.0.0
FOCUS2_STAMP := .venv-focus2/.installed-2.2.1
PY312 ?= $(shell ls -d $$(pyenv root 2>/dev/null || echo $$HOME/.pyenv)/versions/3.12*/bin/python3.12 2>/dev/null | tail -n 1 | grep . || command -v python3.12 2>/dev/null)
focus-venv: $(FOCUS_STAMP) $(FOCUS2_STAMP)

$(FOCUS2_STAMP):
	@test -n "$(PY312)" || { echo "focus-validator 2.2.1 needs Python 3.12: none found (PY312=...)"; exit 1; }
	test -x .venv-focus2/bin/python || $(PY312) -m venv .venv-focus2
	.venv-focus2/bin/pip install -q --upgrade pip
	.venv-focus2/bin/pip install -q focus-validator==2.2.1
	.venv-focus2/bin/pip install -q -U 'numpy>=2'
	touch $@

# The console's browser tests: Debian's Chromium, driven by Playwright (in the dev extras).
# Playwright's own browser download cannot work offline; the system browser is used instead.
browser-deps:
	@command -v chromium >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get install -y chromium chromium-driver || \
	    { apt-get update && apt-get install -y chromium chromium-driver; }; \
	  else sudo apt-get install -y chromium chromium-driver; fi; }

# The reverse proxy the API runs behind in production (deploy/nginx-provisioner.conf), which
# tests/hostile/test_slow_sockets.py starts on a port of its own. RUNLEVEL=1 keeps Debian's
# package from starting its default site (port 80, all addresses).
proxy-deps:
	@command -v nginx >/dev/null || test -x /usr/sbin/nginx || { \
	  if [ "$$(id -u)" = 0 ]; then RUNLEVEL=1 apt-get install -y nginx-light || \
	    { apt-get update && RUNLEVEL=1 apt-get install -y nginx-light; }; \
	  else sudo RUNLEVEL=1 apt-get install -y nginx-light; fi; \
	  { invoke-rc.d nginx stop || true; } >/dev/null 2>&1; }

$(FOCUS_STAMP):
	test -x .venv-focus/bin/python || $(PY) -m venv .venv-focus
	.venv-focus/bin/pip install -q --upgrade pip
	.venv-focus/bin/pip install -q focus-validator==1.0.0 'multimethod<2'
	touch $@

# pip's own output (each download, warnings about this machine's package indexes, the build
# backend's notes) goes to $(VENV)/install.log, so `make run` reaches the demo's banner on the
# first screen; when the install fails, the log's last lines are shown.
INSTALL_LOG := $(VENV)/install.log
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || { echo "creating $(VENV) ($(PY) -m venv)"; $(PY) -m venv $(VENV); }
	@echo "installing the project and its dependencies into $(VENV) (log: $(INSTALL_LOG))"
	@{ $(BIN)/pip install --progress-bar off --upgrade pip && \
	   $(BIN)/pip install --progress-bar off -e '.[aws,gcp,nvml,pulumi,pg,dev]'; } \
	    >$(INSTALL_LOG) 2>&1 || { tail -n 40 $(INSTALL_LOG); \
	    echo "pip install failed: the whole log is $(INSTALL_LOG)" >&2; exit 1; }
	@touch $@

# The main job on the embedded default: no cloud account, no Slurm install needed.
run: venv
	$(BIN)/provisioner demo

simulate: venv
	$(BIN)/provisioner simulate --onprem-gpus 256 --policy default --policy never \
	    --policy immediate --policy fixed-wait:3600

# All tests, the ones that need real parts included: starts the local Slurm clusters and the
# private PostgreSQL first. The store, account, reconcile and API suites run on SQLite and on
# PostgreSQL; the `ha` tests run two controllers on PostgreSQL.
PG_DIR ?= $(CURDIR)/.pg
PG_URL = $$(cat $(PG_DIR)/url)
# Printed last whether the tests pass or fail (an EXIT trap); make still fails exactly when
# lint-imports or pytest does.
LEFT_RUNNING = make test left running: Slurm 22.05 ($(SLURM_DIR:$(CURDIR)/%=%)), Slurm 24.11 \
    ($(SLURM24_DIR:$(CURDIR)/%=%)), PostgreSQL ($(PG_DIR:$(CURDIR)/%=%)); stop them with: \
    make slurm-down pg-down
test: venv focus-venv browser-deps proxy-deps slurm-up pg-up test-host-roots agent-wheels
	@trap '{ set +x; } 2>/dev/null; echo "$(LEFT_RUNNING)"' EXIT; \
	trap '{ set +x; } 2>/dev/null; exit 130' INT TERM; \
	set -ex; \
	$(BIN)/lint-imports; \
	env REQUIRE_FOCUS_VALIDATOR=1 REQUIRE_POSTGRES=1 REQUIRE_TEST_HOSTS=1 \
	    PROVISIONER_TEST_DATABASE_URL=$(PG_URL) $(BIN)/python -m pytest -q $(PYTEST_ARGS)

# Burst instances booted as hosts of their own (tests/hosts): Debian 12 (Slurm 22.05, Python
# 3.11) and Debian 13 (Slurm 24.11, Python 3.13) roots that systemd-nspawn boots, with
# cloud-init, munge and slurmd. Each built once (~70 s), then reused.
TEST_HOST_ROOTS ?= $(CURDIR)/.slurm-roots
test-host-roots:
	bash scripts/test-host-root.sh "$(TEST_HOST_ROOTS)/host-bookworm" bookworm
	bash scripts/test-host-root.sh "$(TEST_HOST_ROOTS)/host-trixie" trixie

# The GPU agent as a burst VM installs it (node.agent_wheels): this checkout's wheel and the
# agent's dependencies (provisioner/act/userdata.py AGENT_REQUIREMENTS), for the Pythons of
# the test hosts' images (Debian 12: 3.11, Debian 13: 3.13). The tests serve the folder on
# their /24; a site puts the same in its artifact store.
AGENT_WHEELS ?= $(CURDIR)/.wheelhouse/agent
agent-wheels: venv
	rm -rf "$(AGENT_WHEELS)" && mkdir -p "$(AGENT_WHEELS)"
	$(BIN)/pip wheel -q --no-deps -w "$(AGENT_WHEELS)" .
	reqs=$$($(BIN)/python -c 'from provisioner.act.userdata import AGENT_REQUIREMENTS as r; print(" ".join(r))') && \
	for v in 3.11 3.13; do \
	    $(BIN)/pip download -q -d "$(AGENT_WHEELS)" --only-binary=:all: --python-version $$v \
	        --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 $$reqs \
	        >"$(AGENT_WHEELS).log" 2>&1 || { cat "$(AGENT_WHEELS).log"; exit 1; }; \
	done

# Removes every test host, namespace and link a killed test run left (names start with gbt).
# Every test host, namespace and link the tests left, and the test hosts' Slurm clusters.
test-hosts-clean: venv
	$(BIN)/python -m provisioner.testing.hosts
	for d in .slurm-hosts/*/; do [ -d "$$d" ] && bash scripts/slurm-down.sh "$$d" --purge || true; done

test-ha: venv pg-up
	REQUIRE_POSTGRES=1 PROVISIONER_TEST_DATABASE_URL=$(PG_URL) \
	    $(BIN)/python -m pytest -q -m "ha or postgres" $(PYTEST_ARGS)

# A private PostgreSQL cluster under .pg (socket only, no TCP), never the system service.
pg-up:
	bash scripts/pg-up.sh "$(PG_DIR)"

pg-down:
	bash scripts/pg-down.sh "$(PG_DIR)"

test-e2e: venv focus-venv slurm-up
	REQUIRE_FOCUS_VALIDATOR=1 $(BIN)/python -m pytest -q -m e2e $(PYTEST_ARGS)

test-unit: venv
	$(BIN)/python -m pytest -q -m "not slurm and not e2e and not browser and not wheel and not testhosts" $(PYTEST_ARGS)

test-browser: venv focus-venv browser-deps
	REQUIRE_FOCUS_VALIDATOR=1 $(BIN)/python -m pytest -q -m browser $(PYTEST_ARGS)

# The import contracts (layers, account without SQL, one decider, the agent alone) are in
# pyproject.toml; `make test` checks them too, so CI does.
lint: venv
	$(BIN)/lint-imports
	$(BIN)/ruff check provisioner tests bench infra policies
	$(BIN)/ruff format --check provisioner tests bench infra policies
	$(BIN)/mypy provisioner

typecheck: venv
	$(BIN)/mypy provisioner

# The seeded chaos soak at full length: 20 seeds, faults of every kind, invariants checked;
# then the soak on real parts (provisioner run, both Slurm releases, moto), 3 seeds each.
chaos: venv
	$(BIN)/python bench/chaos.py --seeds 20
	$(BIN)/python bench/chaos.py --live --seeds 3

bench: venv pg-up
	for b in bench/*.py; do echo "== $$b"; PROVISIONER_TEST_DATABASE_URL=$(PG_URL) $(BIN)/python $$b || exit 1; done

failover: venv pg-up
	PROVISIONER_TEST_DATABASE_URL=$(PG_URL) $(BIN)/python bench/failover.py

# Both clusters: 22.05 on this host, 24.11 in its Debian 13 root (built once, ~75 s).
slurm-up: venv
	bash scripts/slurm-up.sh "$(SLURM_DIR)"
	SLURM_SERIES=24.11 PORT_BASE=$(SLURM24_PORT_BASE) bash scripts/slurm-up.sh "$(SLURM24_DIR)"

slurm-down:
	bash scripts/slurm-down.sh "$(SLURM_DIR)" --purge
	bash scripts/slurm-down.sh "$(SLURM24_DIR)" --purge

localstack-up:
	docker compose -f localstack/docker-compose.yml up -d

localstack-down:
	docker compose -f localstack/docker-compose.yml down

iac-review: venv
	$(BIN)/provisioner iac review --format markdown

clean:
	rm -rf $(VENV) .pytest_cache .screenshots .mypy_cache .ruff_cache build *.egg-info
