"""A random-graph fuzzer for the compiler, in the manner of NNSmith: random well-typed ONNX graphs
over the ops the compiler's registry supports (generate.py), compiled and run on the Vulkan device
against onnxruntime (oracle.py), every failure shrunk to a minimal graph (reduce.py).

    python -m tests.fuzz --seeds 2000           # local runs; --help for the options
    pytest tests/fuzz                           # CI: a few hundred seeds, and the kept cases

A graph the compiler refuses with a one-line CompileError is not a bug; a traceback, a crash, a
validation-layer message or outputs outside tolerance are. Minimal cases that found bugs are kept
in cases/ (ONNX text format) and run by test_cases.py.
"""
