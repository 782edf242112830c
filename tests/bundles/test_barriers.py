"""Barriers are checked, not trusted (FORMAT.md, "Barriers"): the one rule in bundles/hazards.py,
the writes it derives from SPIR-V, the reader refusing a schedule it does not cover, and the compiler
agreeing with the reader on every bundle it makes."""
from __future__ import annotations
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from bundles import BundleError, read_bundle, write_bundle
from bundles.hazards import Access, bound_range, dispatch_accesses, required_barriers, uncovered
from bundles.spirv import Module
from tests.harness import glslang
from tests.onnx_builders import light_model, mlp, mobilenetv2_block, small_cnn

from tests.models.zoo import resnet18  # noqa: E402


def acc(i, b, start, end, write, memory="arena", tensor=0):
    return Access(i, b, tensor, memory, start, end, write)


# ---- the rule --------------------------------------------------------------------------------

def test_rule_read_after_write_write_after_read_write_after_write():
    w0, r1 = acc(0, 0, 0, 64, True), acc(1, 0, 32, 96, False)
    assert required_barriers([[w0], [r1]]) == [False, True]                        # read after write
    assert required_barriers([[acc(0, 0, 0, 64, False)], [acc(1, 0, 0, 8, True)]]) == [False, True]  # WAR
    assert required_barriers([[w0], [acc(1, 0, 60, 61, True)]]) == [False, True]   # write after write
    assert required_barriers([[acc(0, 0, 0, 64, False)], [acc(1, 0, 0, 64, False)]]) == [False, False]
    assert required_barriers([[w0], [acc(1, 0, 64, 128, True)]]) == [False, False]  # touching, not overlapping
    # The arena and the weights are different buffers.
    assert required_barriers([[w0], [acc(1, 0, 0, 64, False, "weights")]]) == [False, False]
    (h,) = uncovered([[w0], [r1]], [False, False])
    assert h.kind == "read after write" and (h.earlier, h.later) == (w0, r1)
    assert uncovered([[w0], [r1]], [False, True]) == []
    assert len(uncovered([[w0], [r1]], [True, False])) == 1  # a flag on the first dispatch covers nothing


def test_a_barrier_orders_everything_before_it():
    w0, other, r2 = acc(0, 0, 0, 64, True), acc(1, 0, 256, 512, True), acc(2, 0, 0, 64, False)
    assert required_barriers([[w0], [acc(1, 0, 0, 8, False)], [r2]]) == [False, True, False]
    assert uncovered([[w0], [other], [r2]], [False, True, False]) == []
    assert [h.later.dispatch for h in uncovered([[w0], [other], [r2]], [False, False, False])] == [2]


def test_an_empty_tensor_binds_four_bytes_at_offset_zero():
    """The reduce-over-an-empty-axis bug: the schedule saw empty ranges where the runtime binds 4
    bytes at offset 0, which a later dispatch's output may occupy."""
    assert bound_range({"offset": 512, "nbytes": 0}) == (0, 4)
    assert bound_range({"offset": 512, "nbytes": 6}) == (512, 518)
    manifest = {"tensors": [{"offset": 0, "nbytes": 0, "memory": "arena"},     # empty input
                            {"offset": 0, "nbytes": 32, "memory": "arena"},    # output, same bytes
                            {"offset": 256, "nbytes": 0, "memory": "arena"}],  # empty intermediate
                "kernels": [{"module": 0}, {"module": 1}], "modules": [{}, {}],
                "dispatches": [{"kernel": 0, "bindings": [0, 2]}, {"kernel": 1, "bindings": [2, 1]}]}
    accesses = dispatch_accesses(manifest, [{1}, {1}])
    assert [(a.start, a.end, a.write) for a in accesses[1]] == [(0, 4, False), (0, 32, True)]
    assert required_barriers(accesses) == [False, True]


# ---- writes come from the SPIR-V -------------------------------------------------------------

RW = """#version 450
layout(local_size_x = 1) in;
layout(std430, set = 0, binding = 0) readonly buffer A { float a[]; };
layout(std430, set = 0, binding = 1) writeonly buffer B { float b[]; };
layout(std430, set = 0, binding = 2) buffer C { float c[]; };
layout(std430, set = 0, binding = 3) buffer D { float d[]; };
layout(set = 0, binding = 4) uniform samplerBuffer T;
void main() { b[0] = a[0] + c[0] + texelFetch(T, 0).x; }
"""


def test_written_bindings_from_nonwritable():
    # readonly and texel buffers are read-only; writeonly and plain buffers (even if only read) are written
    assert Module(glslang(RW)).written_bindings() == {1, 2, 3}


# ---- the reader refuses a racy schedule; the compiler's schedules pass ------------------------

def empty_set_reduce() -> onnx.ModelProto:
    """Abs then ReduceSum over an empty axis: the two conformance cases of the bug, in small (the
    empty Abs an output too, so that it runs: an empty result no output declares is no kernel)."""
    graph = helper.make_graph(
        [helper.make_node("Abs", ["data"], ["abs"]),
         helper.make_node("ReduceSum", ["abs", "axes"], ["reduced"], keepdims=1)],
        "empty_set_reduce", [helper.make_tensor_value_info("data", TensorProto.FLOAT, [2, 0, 4])],
        [helper.make_tensor_value_info("reduced", TensorProto.FLOAT, [2, 1, 4]),
         helper.make_tensor_value_info("abs", TensorProto.FLOAT, [2, 0, 4])],
        [helper.make_tensor("axes", TensorProto.INT64, [1], [1])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


MODELS = {"mlp": lambda: mlp(64, 128, 10), "small_cnn": small_cnn, "mobilenetv2_block": mobilenetv2_block,
          "resnet18": lambda: resnet18(resolution=64), "light_squeezenet": lambda: light_model("squeezenet"),
          "empty_set_reduce": empty_set_reduce}


@pytest.fixture(scope="module")
def compiled():
    from compiler.compile import compile_with_kernels
    cache = {}

    def get(name, target):
        if (name, target) not in cache:
            cache[name, target] = compile_with_kernels(MODELS[name](), target=target)
        return cache[name, target]
    return get


@pytest.mark.parametrize("target", ["generic", "lavapipe"])
@pytest.mark.parametrize("name", MODELS)
def test_compiler_and_reader_agree(compiled, name, target):
    """Every bundle the compiler makes passes the reader's check (read_bundle runs it), its barriers
    are exactly the required ones, and each kernel's SPIR-V writes exactly the bindings its lowering
    writes (templates declare `readonly` on what they only read, or the rule would ask for more)."""
    data, kernels = compiled(name, target)
    with read_bundle(data) as b:
        m = b.manifest
        written = [Module(s).written_bindings() for s in b.spirv]
        assert [d["barrier"] for d in m["dispatches"]] == required_barriers(dispatch_accesses(m, written))
        for i, (d, k) in enumerate(zip(m["dispatches"], kernels)):
            assert written[m["kernels"][d["kernel"]]["module"]] == set(k.writes), (i, k.template)


def test_empty_set_reduce_gets_its_barrier(compiled):
    data, _ = compiled("empty_set_reduce", "generic")
    with read_bundle(data) as b:
        assert [d["barrier"] for d in b.manifest["dispatches"]] == [False, True]


def _resealed_without_a_needed_barrier(data: bytes) -> tuple[bytes, int]:
    with read_bundle(data) as b:
        m, spirv, weights = b.manifest, [bytes(s) for s in b.spirv], bytes(b.weights)
    i = next(i for i, d in enumerate(m["dispatches"]) if d["barrier"])
    m["dispatches"][i]["barrier"] = False
    with pytest.raises(BundleError, match="'barriers'"):
        write_bundle(m, spirv, weights)  # the writer refuses it too, unless told not to check
    return bytes(write_bundle(m, spirv, weights, barriers=False)), i


@pytest.mark.parametrize("name", ["mlp", "small_cnn", "empty_set_reduce"])
def test_cleared_barrier_is_refused(compiled, name):
    racy, i = _resealed_without_a_needed_barrier(compiled(name, "generic")[0])
    with pytest.raises(BundleError) as e:
        read_bundle(racy)
    assert e.value.check == "barriers"
    assert f"dispatch {i} binding" in e.value.detail and f"dispatches[{i}].barrier must be true" in e.value.detail
    assert "arena bytes [" in e.value.detail


def test_cleared_barrier_is_refused_by_the_runtime(compiled):
    import runtime_min
    racy, _ = _resealed_without_a_needed_barrier(compiled("mlp", "generic")[0])
    with pytest.raises(BundleError, match="bundle check 'barriers' failed"):
        runtime_min.load(racy, validation=True)
    assert runtime_min.validation_messages() == []  # refused before any Vulkan work


def test_extra_barriers_are_allowed(compiled):
    data, _ = compiled("mlp", "generic")
    with read_bundle(data) as b:
        m, spirv, weights = b.manifest, [bytes(s) for s in b.spirv], bytes(b.weights)
    for d in m["dispatches"]:
        d["barrier"] = True
    read_bundle(write_bundle(m, spirv, weights)).close()
