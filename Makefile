# Miaohui: `make run` and `make test` set everything up on a fresh clone (idempotent).
# `make run` installs the runtime dependencies only; `make test` adds the test extras (pytest, keyrings.alt).
# TORCH_SPEC is the torch requirement, TORCH_BUILD which build of it: auto (a CUDA build where an NVIDIA GPU is
# found, the CPU build where none is: packaging/install_torch.py), cpu or cuda. CI passes TORCH_SPEC=torch==2.13.0
# (a CPU build that installs from local disk in seconds).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_SPEC ?= torch>=2.6
TORCH_BUILD ?= auto
PYTEST_ARGS ?=
STAMP := $(VENV)/.miaohui-installed
TEST_STAMP := $(VENV)/.miaohui-test-installed
QM := assets/i18n/miaohui_zh_CN.qm

.PHONY: install install-test run test bench bench-peer lab package package-test bundle bundle-test clean gui-bench i18n

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# Reinstall only when pyproject.toml, the torch spec or the torch build changed.
$(STAMP): pyproject.toml packaging/install_torch.py | $(PY)
	$(PY) packaging/install_torch.py --spec "$(TORCH_SPEC)" --build $(TORCH_BUILD)
	$(PY) -m pip install --quiet -e .
	echo "$(TORCH_SPEC) $(TORCH_BUILD)" > $(STAMP)

$(TEST_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e ".[test]"
	touch $(TEST_STAMP)

# The interface's compiled translations (app/ui/i18n.py loads them), rebuilt only when their .ts source changed.
assets/i18n/%.qm: assets/i18n/%.ts | $(STAMP)
	bash packaging/i18n.sh build

# The native int4/int8 kernels (engine/quant/native.py), rebuilt when a source changed; without a compiler it says so
# in one line and int4 runs on aten's kernel.
NATIVE := engine/quant/build/miaohui_int4.so
$(NATIVE): $(wildcard engine/quant/*.cpp) | $(STAMP)
	-$(PY) -m engine.quant.native

install: $(STAMP) $(QM) $(NATIVE)
	@if [ "$$(cat $(STAMP))" != "$(TORCH_SPEC) $(TORCH_BUILD)" ]; then rm -f $(STAMP); $(MAKE) --no-print-directory $(STAMP); fi
	$(PY) -m engine fetch

install-test: install $(TEST_STAMP)

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
	$(PY) -m pip install --quiet -e ".[package]"
	bash packaging/build.sh

package-test: package
	bash packaging/test_deb.sh

# The frozen folder alone (no .tar.gz/.deb), then its --self-test offscreen on a scratch data folder: what CI runs.
bundle: install
	$(PY) -m pip install --quiet -e ".[package]"
	bash packaging/build.sh --bundle-only

bundle-test: bundle
	bash packaging/self_test_bundle.sh

clean:
	rm -rf $(VENV) build dist packaging/out
