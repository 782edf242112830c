# vkc: `make demo` on a fresh Debian/Ubuntu machine installs everything and runs the demo.
VENV   ?= .venv
PY     := $(VENV)/bin/python
# Peers for `make bench`; ncnn and iree need `$(VENV)/bin/pip install -e '.[bench]'`.
PEERS  ?= ort

.PHONY: help setup demo test bench bench-smoke clean

help:
	@echo "make setup        apt packages (Vulkan/lavapipe, validation layer) + $(VENV) (pip: vkc, its shader toolchain)"
	@echo "make demo         setup, then compile/inspect/verify light_squeezenet (shipped + random weights)"
	@echo "make test         the test suite, a worker per core (the tests turn the Khronos validation layer on themselves)"
	@echo "make bench        models, GEMMs, conv layers: vkc vs onnxruntime (+ ncnn, IREE with pip install -e '.[bench]')"
	@echo "make bench-smoke  the benchmark on the MLP, 2 runs"

setup:
	bash .ci/setup

demo: setup
	$(PY) -m benchmarks.demo

test: setup
	$(PY) -m pytest -q -n auto --dist loadfile tests

bench: setup
	$(PY) -m benchmarks.bench --peers $(PEERS) --gemm --convs --profile --json out/bench.json

bench-smoke: setup
	$(PY) -m benchmarks.bench_models --models mlp --repeat 2 --warmup 1

clean:
	rm -rf out
