# Miaohui: `make run` and `make test` set everything up on a fresh clone (idempotent).
# Every dependency comes from requirements.lock (pinned, with hashes: packaging/lock.py), so a fresh clone today
# installs exactly what CI tested; `make lock` refreshes the lock and runs the tests on it.
# TORCH_SPEC is the torch requirement (default: the lock's `# torch:` pin), TORCH_BUILD which build of it: auto (a
# CUDA build where an NVIDIA GPU is found, the CPU build where none is: packaging/install_torch.py), cpu or cuda.
# CI passes TORCH_SPEC=torch==2.13.0 (a CPU build that installs from local disk in seconds).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
LOCKFILE := requirements.lock
TORCH_SPEC ?= $(shell sed -n 's/^\# torch: \([^ ]*\).*/\1/p' $(LOCKFILE))
TORCH_BUILD ?= auto
PYTEST_ARGS ?=
STAMP := $(VENV)/.miaohui-installed
QM := assets/i18n/miaohui_zh_CN.qm

.PHONY: install install-test run test bench bench-peer lab package package-test bundle bundle-test clean gui-bench i18n lock

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# Reinstall only when the lock, the torch spec or the torch build changed. The lock holds the test and packaging
# tools too (one resolution for everything CI runs); --no-deps: the lock is the whole set, pip resolves nothing, and
# `pip check` then proves it consistent with the torch build install_torch.py chose.
$(STAMP): $(LOCKFILE) pyproject.toml packaging/install_torch.py | $(PY)
	$(PY) packaging/install_torch.py --spec "$(TORCH_SPEC)" --build $(TORCH_BUILD)
	$(PY) -m pip install --quiet --require-hashes --no-deps -r $(LOCKFILE)
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	$(PY) -m pip check
	echo "$(TORCH_SPEC) $(TORCH_BUILD)" > $(STAMP)

# The interface's compiled translations (app/ui/i18n.py loads them), rebuilt only when their .ts source changed.
assets/i18n/%.qm: assets/i18n/%.ts | $(STAMP)
	bash packaging/i18n.sh build

# The native library (engine/native/: its sources and headers, built by engine/native/library.py), rebuilt when one
# changed; without a compiler it says so in one line and int4/int8 run on aten's kernels.
NATIVE := engine/native/build/miaohui_native.so
$(NATIVE): $(wildcard engine/native/*.cpp engine/native/*.h) | $(STAMP)
	-$(PY) -m engine.native.library

install: $(STAMP) $(QM) $(NATIVE)
	@if [ "$$(cat $(STAMP))" != "$(TORCH_SPEC) $(TORCH_BUILD)" ]; then rm -f $(STAMP); $(MAKE) --no-print-directory $(STAMP); fi
	$(PY) -m engine fetch
	$(PY) -m engine docs fetch-embedder

install-test: install

# After changing texts in app/: update the .ts sources (new texts arrive unfinished; translate them), build .qm.
i18n: $(STAMP)
	bash packaging/i18n.sh

run: install
	$(PY) -m app $(ARGS)

test: install-test
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest $(PYTEST_ARGS)

bench: install
	$(PY) -m engine bench $(ARGS)

# Optional, never part of install/test/CI: llama-cpp-python, so `make bench` adds a llama.cpp column on the same
# GGUF. Built from source (--no-binary, no pip cache: a wheel built earlier for another CPU is not reused) with
# GGML_NATIVE=OFF and the CPU's instruction sets named explicitly (engine.bench.peer prints them from
# /proc/cpuinfo): the default -march=native build crashed with SIGILL in prefill on an AVX-512/AMX CPU, and an
# explicit AVX2/AVX-512 build ran. Compiles llama.cpp: about 5 minutes on 2 cores.
bench-peer: $(STAMP)
	-$(PY) -m pip uninstall --quiet --yes llama-cpp-python
	CMAKE_ARGS="$$($(PY) -m engine.bench.peer --cmake-args)" FORCE_CMAKE=1 \
		$(PY) -m pip install --no-cache-dir --no-binary llama-cpp-python llama-cpp-python
	$(PY) -c "import llama_cpp; print('llama-cpp-python', llama_cpp.__version__)"

gui-bench: install
	QT_QPA_PLATFORM=$${QT_QPA_PLATFORM:-offscreen} $(PY) -m app.gui_bench $(ARGS)

lab: install
	$(PY) -m engine lab --out lab-results $(ARGS)

package: install
	bash packaging/build.sh

package-test: package
	bash packaging/test_deb.sh

# The frozen folder alone (no .tar.gz/.deb), then its --self-test offscreen on a scratch data folder: what CI runs.
bundle: install
	bash packaging/build.sh --bundle-only

bundle-test: bundle
	bash packaging/self_test_bundle.sh

# Refresh requirements.lock from pyproject.toml (newest releases that satisfy it), install it, run the tests on it.
# Commit the lock alone, with what changed and that the tests passed (README: Upgrading).
lock: | $(PY)
	$(PY) -m pip install --quiet "$$(grep -m1 -o '^uv==[^ ]*' $(LOCKFILE) || echo uv)"
	$(PY) packaging/lock.py
	$(MAKE) --no-print-directory test

clean:
	rm -rf $(VENV) build dist packaging/out
