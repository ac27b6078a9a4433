# libmonarch developer entry points. `make help` lists them.
#
#   make demo   build, install the Python package into .venv, run the example
#   make test   everything CI checks (.ci/run calls this)

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

# cargo may not be on PATH in a non-login shell (rustup installs it under
# ~/.cargo/bin): fall back to that.
ifeq ($(shell command -v cargo 2>/dev/null),)
export PATH := $(HOME)/.cargo/bin:$(PATH)
endif
CARGO ?= cargo

PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
VENV_STAMP := $(VENV)/.monarch-dev-stamp
# Run by `make test` so they keep working; the first is `make demo`.
EXAMPLES := examples/python/hello_mesh.py examples/python/errors.py examples/python/parameter_server.py \
	examples/python/tutorial.py examples/python/distributed_tensors.py
JULIA_EXAMPLES := examples/julia/hello_mesh.jl examples/julia/data_parallel.jl
JULIA := julia --startup-file=no

# Release everywhere: `cargo build --release`, the library that
# `pip install .` bundles and `cargo test --release` then
# share one set of compiled dependencies instead of building twice.
CARGO_PROFILE := --release

# Tag every process started by `make test` so the orphan check only counts
# procs of this run (see scripts/check-orphans.sh).
ORPHAN_TAG := $(shell od -An -N8 -tx8 /dev/urandom | tr -d ' ')

.PHONY: help venv build header schema install install-prefix test-install test-otel pkg-config-tool tmux-tool julia test-julia demo test lint fmt bench \
	check-cargo clean distclean \
	cpp test-cpp cpp-asan bench-cpp bench-hosts bench-slurm slurm-install slurm-up slurm-down test-slurm slurm-tests bench-supervision

help:
	@echo "make demo      build + install the Python package, run examples/python/hello_mesh.py"
	@echo "make test      fmt, clippy, ruff, cargo tests, pytest, Julia tests, C++ tests (+ASan), install test, SLURM tests, orphan check (what CI runs)"
	@echo "make venv      create .venv with the dev tools (requirements-dev.txt, requirements-torch.txt)"
	@echo "make build     cargo build --release (libmonarch.so, monarch CLI)"
	@echo "make install   pip install . (the Python distribution libmonarch) into .venv; with PREFIX=DIR also"
	@echo "               the C/C++ package into DIR (library + SONAME links, headers, CMake, pkg-config, CLI)"
	@echo "make test-install  wheel + sdist into a fresh venv outside the repo (demo, monarch on PATH),"
	@echo "               install to a temp prefix, C via pkg-config and C++ via find_package, SONAME"
	@echo "make header    regenerate include/monarch.h (cbindgen), the cffi module and the Julia ccall layer"
	@echo "make schema    regenerate flatbuffers code from core/schema/monarch.fbs"
	@echo "make lint      cargo fmt --check, cargo clippy, ruff check"
	@echo "make fmt       cargo fmt, ruff format of examples/scripts"
	@echo "make bench     run benches/run.py (Python + C++ rows; builds the C++ bench), benches/rdma.py (data plane), benches/meshes.py, benches/native_cast.py (in-process casts vs N), benches/supervision.py, benches/tensors.py"
	@echo "make bench-supervision  SIGKILL -> caller error latency, idle heartbeat CPU on 8 procs"
	@echo "make test-otel the OpenTelemetry export test (feature otel, a local OTLP/HTTP receiver)"
	@echo "make julia     install Julia 1.5.3 from Debian bullseye when no working julia is on PATH (root)"
	@echo "make test-julia the Julia binding's tests (bindings/julia/test) and examples/julia"
	@echo "make cpp       install the C++ package into build/cpp/install, build its tests and examples/cpp"
	@echo "make test-cpp  the C++ tests (ctest) and the sgd_trainer example"
	@echo "make cpp-asan  the C++ tests built with AddressSanitizer + UBSan"
	@echo "make bench-cpp the C++ ping benchmark (benches/cpp_ping.cpp)"
	@echo "make bench-hosts ping/broadcast: this host vs host agents over TCP, with and without TLS (namespaced hosts need root); connect + handshake latency"
	@echo "make bench-slurm time to a 2-node SLURM host mesh and a first reply (test cluster, root)"
	@echo "make test-slurm the SLURM allocator tests (Rust, Python, C++) on a test cluster on this machine (root; installs slurm-wlm munge if missing)"
	@echo "make slurm-up  start the test SLURM cluster (scripts/slurm/up.sh); make slurm-down stops it"
	@echo "make clean     remove build outputs (cargo, Python build dirs)"
	@echo "make distclean clean, and remove .venv"

check-cargo:
	@command -v $(CARGO) >/dev/null || { echo "cargo not found on PATH or in $(HOME)/.cargo/bin: install Rust with rustup" >&2; exit 1; }

# ---------------------------------------------------------------- venv
venv: $(VENV_STAMP)

$(VENV_STAMP): requirements-dev.txt requirements-torch.txt
	@test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --disable-pip-version-check -q -r requirements-dev.txt -r requirements-torch.txt
	@touch $@

# ---------------------------------------------------------------- build
build: check-cargo
	$(CARGO) build $(CARGO_PROFILE) --workspace

# include/monarch.h (cbindgen), the Python binding's pre-built cffi module and
# the Julia binding's ccall layer (bindings/julia/src/generated/capi.jl).
header: venv check-cargo
	MONARCH_UPDATE_HEADER=1 $(CARGO) test $(CARGO_PROFILE) -p monarch-ffi --test header
	cd bindings/python && ../../$(VPY) -m monarch._cffi_build >/dev/null
	$(VPY) scripts/gen-julia-ccall.py

schema: venv
	scripts/gen-schema.sh

# The Python distribution (pyproject.toml, setup.py: setuptools-rust builds
# libmonarch and the CLI with cargo, cffi the compiled module) into .venv.
# With PREFIX=DIR, also the C/C++ package into DIR (bindings/cpp/CMakeLists.txt).
install: venv check-cargo
	rm -rf build/python
	@# A venv made before the distribution was named libmonarch still holds
	@# the old one's files, whose extension module Python would prefer.
	@if $(VPY) -m pip show -q monarch >/dev/null 2>&1; then $(VPY) -m pip uninstall -y -q monarch; fi
	$(VPY) -m pip install --disable-pip-version-check -q --no-build-isolation .
ifneq ($(PREFIX),)
	$(MAKE) --no-print-directory install-prefix
endif

install-prefix: venv build
	@test -n "$(PREFIX)" || { echo "usage: make install PREFIX=DIR" >&2; exit 1; }
	$(CMAKE) -S bindings/cpp -B $(CPP_BUILD)/prefix -DCMAKE_INSTALL_PREFIX=$(abspath $(PREFIX)) >/dev/null
	$(CMAKE) --install $(CPP_BUILD)/prefix >/dev/null

# The user's install paths from outside the repository (scripts/test-install.sh).
test-install: venv build pkg-config-tool
	PYTHON=$(PYTHON) scripts/test-install.sh

# The OpenTelemetry exporter (cargo feature `otel`, off in default builds):
# real procs export their spans to an OTLP/HTTP receiver inside the test.
# Run last by `make test`: it re-links target/release/monarch with the feature.
test-otel: check-cargo
	$(CARGO) test $(CARGO_PROFILE) -p monarch-cli --features otel --test otel_e2e

# Julia 1.5 from Debian bullseye unless a working `julia` is on PATH (scripts/install-julia.sh, root).
julia:
	@scripts/install-julia.sh

# The Julia binding's tests (real procs) and the Julia examples.
test-julia: julia build
	timeout 300 $(JULIA) bindings/julia/test/runtests.jl
	@for f in $(JULIA_EXAMPLES); do echo "$(JULIA) $$f"; timeout 180 $(JULIA) $$f >/dev/null || { echo "example $$f failed" >&2; exit 1; }; done

# A fresh machine may lack pkg-config (used by test-install).
pkg-config-tool:
	@command -v pkg-config >/dev/null || { apt-get update -qq && apt-get install -y -qq pkg-config >/dev/null; }

# `monarch debug` and `monarch top` are tested by driving them in tmux
# (bindings/python/tests/test_debug.py, test_top.py).
tmux-tool:
	@command -v tmux >/dev/null || { apt-get update -qq && apt-get install -y -qq tmux >/dev/null; }

demo: venv install
	$(VPY) examples/python/hello_mesh.py

bench: venv install cpp
	$(VPY) benches/run.py
	$(VPY) benches/rdma.py
	$(VPY) benches/meshes.py
	CARGO="$(CARGO)" $(VPY) benches/native_cast.py
	$(VPY) benches/supervision.py
	$(VPY) benches/tensors.py

bench-supervision: venv install
	$(VPY) benches/supervision.py

bench-hosts: venv build install
	$(VPY) benches/hosts.py
	CARGO="$(CARGO)" $(VPY) benches/handshake.py

# Bring-up of a 2-node SLURM host mesh on the test cluster (root).
bench-slurm: venv build install
	scripts/slurm/with-cluster.sh $(VPY) benches/slurm.py

# ---------------------------------------------------------------- C++
# The CMake package (bindings/cpp) installed into $(CPP_PREFIX); the tests
# and examples/cpp are separate CMake projects using find_package(Monarch).
CMAKE := $(VENV)/bin/cmake
CTEST := $(VENV)/bin/ctest
CPP_BUILD := build/cpp
CPP_PREFIX := $(abspath $(CPP_BUILD)/install)

cpp: venv build
	$(CMAKE) -S bindings/cpp -B $(CPP_BUILD)/pkg -DCMAKE_INSTALL_PREFIX=$(CPP_PREFIX) >/dev/null
	$(CMAKE) --install $(CPP_BUILD)/pkg >/dev/null
	$(CMAKE) -S bindings/cpp/tests -B $(CPP_BUILD)/tests -DCMAKE_PREFIX_PATH=$(CPP_PREFIX) >/dev/null
	$(CMAKE) --build $(CPP_BUILD)/tests -j2
	$(CMAKE) -S examples/cpp -B $(CPP_BUILD)/examples -DCMAKE_PREFIX_PATH=$(CPP_PREFIX) >/dev/null
	$(CMAKE) --build $(CPP_BUILD)/examples -j2

test-cpp: cpp
	$(CTEST) --test-dir $(CPP_BUILD)/tests --output-on-failure
	timeout 120 $(CPP_BUILD)/examples/sgd_trainer >/dev/null
	timeout 120 $(CPP_BUILD)/examples/sgd_trainer --plugin $(abspath $(CPP_BUILD)/examples/libmyactors.so) >/dev/null

cpp-asan: cpp
	$(CMAKE) -S bindings/cpp/tests -B $(CPP_BUILD)/tests-asan -DCMAKE_PREFIX_PATH=$(CPP_PREFIX) -DMONARCH_ASAN=ON >/dev/null
	$(CMAKE) --build $(CPP_BUILD)/tests-asan -j2
	$(CTEST) --test-dir $(CPP_BUILD)/tests-asan --output-on-failure

bench-cpp: cpp
	$(CPP_BUILD)/examples/cpp_ping

# ---------------------------------------------------------------- SLURM
# A real SLURM cluster on this machine (munged, slurmctld, two slurmd on
# 127.0.0.1), state under /tmp/monarch-slurm-<uid>; see docs/slurm.md.
slurm-install:
	scripts/slurm/install.sh

slurm-up: slurm-install
	scripts/slurm/up.sh

slurm-down:
	scripts/slurm/down.sh

# with-cluster.sh installs SLURM if missing, brings the cluster up, runs the
# tests with SLURM_CONF and MONARCH_SLURM_TEST=1, fails if a job is left in
# the queue, and stops the cluster whatever happened.
test-slurm: venv build install cpp
	scripts/slurm/with-cluster.sh $(MAKE) --no-print-directory slurm-tests

slurm-tests:
	$(CARGO) test $(CARGO_PROFILE) -p monarch-core --test slurm_alloc
	$(VPY) -m pytest -q bindings/python/tests/test_slurm.py
	timeout 300 $(CPP_BUILD)/tests/cpp_test slurm

# ---------------------------------------------------------------- checks
# Import circles among the modules of each Rust crate and of the Python package.
MODULE_CYCLES := $(VPY) scripts/check-module-cycles.py --python bindings/python/monarch \
	--rust core/src --rust rdma/src --rust tensor/src --rust ffi/src --rust cli/src
lint: venv check-cargo
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy --workspace --all-targets --features monarch-cli/otel,monarch-ffi/otel -- -D warnings
	$(VENV)/bin/ruff check
	$(MODULE_CYCLES)

fmt: venv check-cargo
	$(CARGO) fmt --all
	$(VENV)/bin/ruff format examples scripts

test: export MONARCH_ORPHAN_TAG := $(ORPHAN_TAG)
test: venv build install julia tmux-tool
	$(CARGO) fmt --all -- --check
	$(VENV)/bin/ruff check
	$(MODULE_CYCLES)
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy --workspace --all-targets --features monarch-cli/otel,monarch-ffi/otel -- -D warnings
	$(CARGO) test $(CARGO_PROFILE) --workspace
	$(VPY) -m pytest -q bindings/python/tests tests/cross_language
	@for f in $(EXAMPLES); do echo "$(VPY) $$f"; timeout 120 $(VPY) $$f >/dev/null || { echo "example $$f failed" >&2; exit 1; }; done
	$(MAKE) --no-print-directory test-julia
	$(MAKE) --no-print-directory test-cpp cpp-asan
	$(MAKE) --no-print-directory test-install
	$(MAKE) --no-print-directory test-slurm
	$(MAKE) --no-print-directory test-otel
	scripts/check-orphans.sh

# ---------------------------------------------------------------- clean
clean:
	-$(CARGO) clean
	rm -rf bindings/python/*.egg-info build .ruff_cache .pytest_cache
	find . -path ./.venv -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
