"""Texel-buffer bindings (modules[].texel_buffers, format 1.1): what the compiler writes for the
lavapipe profile, and how the reader rejects manifests that disagree with the modules or the
tensors. Runtime behaviour is covered by every lavapipe-target matmul and conv test."""
import copy
import json

import numpy as np
import pytest
from onnx import helper, numpy_helper

from bundles import BundleError, read_bundle, write_bundle
from compiler.compile import compile_model


@pytest.fixture(scope="module")
def lavapipe_bundle():
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((64, 32)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
                              [helper.make_tensor_value_info("x", 1, [8, 64])],
                              [helper.make_tensor_value_info("y", 1, [8, 32])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    b = read_bundle(compile_model(model, target="lavapipe"))
    parts = (copy.deepcopy(b.manifest), [bytes(s) for s in b.spirv], bytes(b.weights))
    b.close()
    return parts


def test_compiler_lists_texel_bindings(lavapipe_bundle):
    manifest, _, _ = lavapipe_bundle
    (module,) = manifest["modules"]
    assert module["texel_buffers"] == [{"binding": 0, "format": "rgba32f"},
                                       {"binding": 1, "format": "rgba32f"}]
    # x is 8x64 and w 64x32 floats: the larger view has 2048 / 4 = 512 texels.
    assert manifest["requirements"]["max_texel_buffer_elements"] == 512


def reseal(parts, edit):
    manifest, spirv, weights = copy.deepcopy(parts[0]), parts[1], parts[2]
    edit(manifest)
    return write_bundle(manifest, spirv, weights)


def rejects(parts, edit, *fragments):
    with pytest.raises(BundleError) as info:
        read_bundle(reseal(parts, edit))
    for fragment in fragments:
        assert fragment in str(info.value), str(info.value)


def _module(m):
    return m["modules"][0]


def test_unknown_format(lavapipe_bundle):
    rejects(lavapipe_bundle, lambda m: _module(m)["texel_buffers"][0].update(format="rgba16f"),
            "texel_buffers[0].format", "is not one of r32f, rgba32f")


def test_binding_beyond_the_module(lavapipe_bundle):
    rejects(lavapipe_bundle, lambda m: _module(m)["texel_buffers"][0].update(binding=9),
            "texel_buffers[0].binding")


def test_binding_listed_twice(lavapipe_bundle):
    rejects(lavapipe_bundle, lambda m: _module(m)["texel_buffers"][1].update(binding=0),
            "is listed twice")


def test_entry_not_an_object(lavapipe_bundle):
    rejects(lavapipe_bundle, lambda m: _module(m).update(texel_buffers=[1]), "must be an object")


def test_understated_texel_requirement(lavapipe_bundle):
    rejects(lavapipe_bundle, lambda m: m["requirements"].update(max_texel_buffer_elements=100),
            "max_texel_buffer_elements = 100")


def test_missing_texel_requirement(lavapipe_bundle):
    rejects(lavapipe_bundle, lambda m: m["requirements"].pop("max_texel_buffer_elements"),
            "max_texel_buffer_elements = 0")


def test_module_declares_a_texel_buffer_the_manifest_omits(lavapipe_bundle):
    """The SPIR-V reads binding 1 as a samplerBuffer; a manifest calling it a storage buffer would
    make the runtime write the wrong descriptor type."""
    rejects(lavapipe_bundle, lambda m: _module(m)["texel_buffers"].pop(1),
            "spirv interface", "binds a texel buffer at set 0, binding 1")


def test_manifest_lists_a_texel_buffer_the_module_reads_as_storage(lavapipe_bundle):
    rejects(lavapipe_bundle,
            lambda m: _module(m)["texel_buffers"].append({"binding": 2, "format": "r32f"}),
            "spirv interface", "binds a storage buffer")


def test_view_must_cover_whole_texels(lavapipe_bundle):
    def edit(m):
        # Re-bind the 8x64 input as a 3-float tensor: 12 bytes are not a whole rgba32f texel.
        t = m["tensors"][m["dispatches"][0]["bindings"][0]]
        t.update(shape=[3], nbytes=12)
    rejects(lavapipe_bundle, edit, "must be whole texels")


def test_older_bundles_have_no_texel_keys():
    """A bundle for any other profile has no texel_buffers and no texel requirement."""
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "r",
                              [helper.make_tensor_value_info("x", 1, [4, 4])],
                              [helper.make_tensor_value_info("y", 1, [4, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    b = read_bundle(compile_model(model, target="generic"))
    text = json.dumps(b.manifest)
    b.close()
    assert "texel" not in text
