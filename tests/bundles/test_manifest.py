"""validate_manifest: the sample passes, every rule fails on one mutation, fuzzing finds no crash."""
import copy
import random

import pytest

from bundles import BundleError, validate_manifest

COUNTS = {"module_count": 2, "weights_bytes": 9472}  # what the sample manifest describes


def check(manifest, **counts):
    validate_manifest(manifest, **{**COUNTS, **counts})


def set_path(manifest, path, value):
    """set_path(m, "tensors.0.shape", [1]); a value of DELETE removes the key."""
    *parents, last = path.split(".")
    node = manifest
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    key = int(last) if isinstance(node, list) else last
    if value is DELETE:
        del node[key]
    else:
        node[key] = value


DELETE = object()

# (field path, new value, fragment of the message)
CASES = [
    ("manifest_version", 2, "manifest_version = 2 is not supported"),
    ("manifest_version", True, "manifest_version = True is not supported"),
    ("manifest_version", DELETE, "manifest_version is missing"),
    ("model", DELETE, "model is missing"),
    ("model", "mlp", "model = 'mlp' must be an object"),
    ("model.opset", "13", "model.opset = '13' must be an integer"),
    ("model.name", None, "model.name = None must be a string"),
    ("model.source_sha256", DELETE, "model.source_sha256 is missing"),
    ("target.name", 1, "target.name = 1 must be a string"),
    ("requirements.vulkan_api", [1, 1], "requirements.vulkan_api = [1, 1] must have exactly 3 entries"),
    ("requirements.vulkan_api.1", 1024, "requirements.vulkan_api[1] = 1024 must be in 0..=1023"),
    ("requirements.extensions", [""], "requirements.extensions[0] = '' must not be empty"),
    ("requirements.extensions", "VK_KHR_16bit_storage", "requirements.extensions = 'VK_KHR_16bit_storage' must be a list"),
    ("requirements.max_workgroup_invocations", 0, "requirements.max_workgroup_invocations = 0 must be in 1..="),
    ("requirements.max_workgroup_size", [64, 1], "requirements.max_workgroup_size = [64, 1] must have exactly 3"),
    ("requirements.max_shared_memory_bytes", -1, "requirements.max_shared_memory_bytes = -1 must be in 0..="),
    ("requirements.max_storage_buffer_range", 2**48, "max_storage_buffer_range = 281474976710656 must be in"),
    # requirements.features is optional (format 1.1; the sample has none)
    ("requirements.features", ["shaderInt64", "shaderFloat64"], None),
    ("requirements.features", "shaderInt64", "requirements.features = 'shaderInt64' must be a list"),
    ("requirements.features", [""], "requirements.features[0] = '' must not be empty"),
    ("requirements.features", [64], "requirements.features[0] = 64 must be a string"),
    ("requirements.features", ["shader Int64"], "requirements.features[0] = 'shader Int64' is not a feature name"),
    ("requirements.features", ["shaderInt64", "shaderInt64"], "requirements.features[1] = 'shaderInt64' is listed twice"),
    ("memory.alignment", 3, "memory.alignment = 3 must be in 4..=65536"),
    ("memory.alignment", 96, "memory.alignment = 96 must be a power of two"),
    ("memory.alignment", 131072, "memory.alignment = 131072 must be in 4..=65536"),
    ("memory.arena_bytes", 1024.0, "memory.arena_bytes = 1024.0 must be an integer"),
    ("memory.arena_bytes", 2**48, "memory.arena_bytes = 281474976710656 must be in 0..=281474976710655"),
    ("memory.weights_bytes", 9476, "memory.weights_bytes = 9476 but the WEIGHTS section is 9472 bytes"),
    ("memory.lower_bound_bytes", DELETE, "memory.lower_bound_bytes is missing"),
    ("tensors", {}, "tensors = {} must be a list"),
    ("tensors.0", ["x"], "tensors[0] = ['x'] must be an object"),
    ("tensors.0.name", 0, "tensors[0].name = 0 must be a string"),
    ("tensors.0.dtype", "complex64", "tensors[0].dtype = 'complex64' is not one of float32, float16"),
    ("tensors.0.shape", "1,64", "tensors[0].shape = '1,64' must be a list"),
    ("tensors.0.shape", [1, -1], "tensors[0].shape[1] = -1 must be in 0..=2147483647"),
    ("tensors.0.shape", [2**31], "tensors[0].shape[0] = 2147483648 must be in 0..=2147483647"),
    ("tensors.0.shape", [True, 64], "tensors[0].shape[0] = True must be an integer"),
    ("tensors.0.shape", [2**30] * 4, "tensors[0].shape = [1073741824, 1073741824, 1073741824, 1073741824] has more"),
    ("tensors.0.nbytes", 255, "tensors[0].nbytes = 255 but shape [1, 64] of float32 is 256 bytes"),
    ("tensors.0.memory", "host", "tensors[0].memory = 'host' must be 'arena', 'weights' or 'state'"),
    ("tensors.3.offset", 128, "tensors[3].offset = 128 is not a multiple of memory.alignment = 256"),
    ("tensors.3.offset", -256, "tensors[3].offset = -256 must be in 0..="),
    ("tensors.4.offset", 1024, "tensors[4].offset = 1024 + nbytes 40 = 1064 runs past the end of arena (1024 bytes)"),
    ("tensors.2.offset", 8448, "tensors[2].offset = 8448 + nbytes 1280 = 9728 runs past the end of weights (9472 bytes)"),
    ("inputs", None, "inputs = None must be a list"),
    ("inputs.0.tensor", 5, "inputs[0].tensor = 5 is not an index into tensors (5 entries)"),
    ("inputs.0.tensor", True, "inputs[0].tensor = True must be an integer"),
    ("inputs.0.tensor", 1, "inputs[0].tensor = 1 is a weights tensor; inputs must be in the arena"),
    ("inputs.0.name", "", "inputs[0].name = '' must not be empty"),
    ("outputs", [{"name": "y", "tensor": 4}, {"name": "y", "tensor": 3}], "outputs[1].name = 'y' appears twice in outputs"),
    ("outputs.0.tensor", DELETE, "outputs[0].tensor is missing"),
    ("modules.0.bindings", 0, "modules[0].bindings = 0 must be in 1..=64"),
    ("modules.0.bindings", 65, "modules[0].bindings = 65 must be in 1..=64"),
    ("modules.0.local_size", [0, 1, 1], "modules[0].local_size[0] = 0 must be in 1..="),
    ("modules.0.local_size", [64, 1], "modules[0].local_size = [64, 1] must have exactly 3 entries"),
    ("modules.0.local_size", [1024, 1024, 2], "modules[0].local_size = [1024, 1024, 2] has 2097152 invocations"),
    ("modules.0.shared_memory_bytes", DELETE, "modules[0].shared_memory_bytes is missing"),
    ("kernels.0.module", 2, "kernels[0].module = 2 is not an index into modules (2 entries)"),
    ("kernels.0.specialization", {}, "kernels[0].specialization = {} must be a list"),
    ("kernels.0.specialization.0", 64, "kernels[0].specialization[0] = 64 must be an object"),
    ("kernels.0.specialization.0.id", 65536, "kernels[0].specialization[0].id = 65536 must be in 0..=65535"),
    ("kernels.0.specialization.1.id", 0, "kernels[0].specialization[1].id = 0 is used twice in this kernel"),
    ("kernels.0.specialization.0.type", "float64", "kernels[0].specialization[0].type = 'float64' is not one of"),
    ("kernels.0.specialization.0.value", 2**31, "kernels[0].specialization[0].value = 2147483648 must be in -2147483648..=2147483647"),
    ("kernels.0.specialization.0.value", 1.0, "kernels[0].specialization[0].value = 1.0 must be an integer"),
    ("kernels.0.specialization.0.value", DELETE, "kernels[0].specialization[0].value is missing"),
    ("kernels.1.specialization.0.value", -1, "kernels[1].specialization[0].value = -1 must be in 0..=4294967295"),
    ("kernels.0.specialization.1.value", float("nan"), "kernels[0].specialization[1].value = nan must be finite"),
    ("kernels.0.specialization.1.value", float("-inf"), "value = -inf must be finite"),
    ("kernels.0.specialization.1.value", 1e39, "value = 1e+39 does not fit in float32"),
    ("kernels.0.specialization.1.value", 10**400, "does not fit in float32"),
    ("kernels.0.specialization.1.value", "0.5", "value = '0.5' must be a number"),
    ("kernels.0.specialization.1.value", False, "value = False must be a number"),
    ("dispatches.0.kernel", 2, "dispatches[0].kernel = 2 is not an index into kernels (2 entries)"),
    ("dispatches.0.bindings", [0, 1], "dispatches[0].bindings = [0, 1] has 2 entries but kernel 0's module has 3 bindings"),
    ("dispatches.0.bindings", [0, 1, 99], "dispatches[0].bindings[2] = 99 is not an index into tensors"),
    ("dispatches.0.groups", [0, 1, 1], "dispatches[0].groups[0] = 0 must be in 1..=65535"),
    ("dispatches.0.groups", [65536, 1, 1], "dispatches[0].groups[0] = 65536 must be in 1..=65535"),
    ("dispatches.0.groups", [1, 1], "dispatches[0].groups = [1, 1] must have exactly 3 entries"),
    ("dispatches.0.barrier", 0, "dispatches[0].barrier = 0 must be true or false"),
    ("dispatches.0.barrier", DELETE, "dispatches[0].barrier is missing"),
    ("dispatches.0.nodes", "/fc1/MatMul", "dispatches[0].nodes = '/fc1/MatMul' must be a list"),
    ("dispatches.0.nodes", [1], "dispatches[0].nodes[0] = 1 must be a string"),
    ("dispatches.0.flops", -1, "dispatches[0].flops = -1 must be in 0..="),
    ("dispatches.0.bytes", 1.5, "dispatches[0].bytes = 1.5 must be an integer"),
    ("dispatches.1.flops", None, "dispatches[1].flops = None must be an integer"),
    ("quantized_weights", {"scheme": "int4", "bits": 4, "symmetric": False, "block_size": 32,
                           "quantized": [{"node": "fc", "op": "MatMulNBits"}], "float": []}, None),
    ("quantized_weights", [], "quantized_weights = [] must be an object"),
    ("float16_check", {"moved": 2e-4, "output": "y"}, None),
    ("float16_check", {"not_run": "input 'x' has a dimension no variant pins"}, None),
    ("float16_check", {"moved": -1, "output": "y"}, "float16_check.moved = -1 must be a finite number >= 0"),
    ("float16_check", {"moved": 2e-4}, "float16_check.output is missing"),
    ("float16_check", "ok", "float16_check = 'ok' must be an object"),
    ("quantized_weights", {"scheme": "int4", "bits": 4, "block_size": 32, "quantized": [{"node": "fc"}],
                           "float": []}, "quantized_weights.quantized[0].op is missing"),
    ("quantized_weights", {"scheme": "int4", "bits": 9, "block_size": 32, "quantized": [], "float": []},
     "quantized_weights.bits = 9 must be in 1..=8"),
    # requirements may not understate what the modules and dispatches use
    ("requirements.max_workgroup_invocations", 32,
     "modules[0].local_size = [64, 1, 1] has 64 invocations but requirements.max_workgroup_invocations = 32"),
    ("requirements.max_workgroup_size", [64, 1, 1], None),  # the sample's own value: passes
    ("requirements.max_workgroup_size", [32, 1, 1],
     "modules[0].local_size = [64, 1, 1] exceeds requirements.max_workgroup_size = [32, 1, 1] on axis x"),
    ("modules.1.local_size", [16, 2, 1],
     "modules[1].local_size = [16, 2, 1] exceeds requirements.max_workgroup_size = [64, 1, 1] on axis y"),
    ("requirements.max_shared_memory_bytes", 1023,
     "modules[1].shared_memory_bytes = 1024 exceeds requirements.max_shared_memory_bytes = 1023"),
    ("requirements.max_storage_buffer_range", 8191,
     "dispatches[0].bindings[1] = 1 binds tensor 1 of 8192 bytes but requirements.max_storage_buffer_range = 8191"),
]


def test_sample_is_valid(manifest):
    check(manifest)


@pytest.mark.parametrize("path, value, fragment", CASES, ids=[(f"{p}=" + ("deleted" if v is DELETE else repr(v)))[:60] for p, v, _ in CASES])
def test_rule(manifest, path, value, fragment):
    set_path(manifest, path, value)
    if fragment is None:
        check(manifest)
        return
    with pytest.raises(BundleError) as info:
        check(manifest)
    assert info.value.check == "manifest"
    assert fragment in str(info.value), str(info.value)


def test_not_an_object():
    with pytest.raises(BundleError, match=r"manifest = \[\] must be a JSON object"):
        validate_manifest([], **COUNTS)


def test_module_count_matches_container(manifest):
    with pytest.raises(BundleError, match="modules has 2 entries but the bundle has 3 SPIR-V sections"):
        check(manifest, module_count=3)


def test_weights_bytes_matches_container(manifest):
    with pytest.raises(BundleError, match="memory.weights_bytes = 9472 but the WEIGHTS section is 0 bytes"):
        check(manifest, weights_bytes=0)


def test_accepted_variants(manifest):
    """Forward-compatible extras, scalars, empty tensors, tuples from a Python writer, float32 ints."""
    manifest["future_field"] = {"anything": [1, 2]}
    manifest["tensors"][0]["layout"] = "nchw"
    manifest["tensors"].append({"name": "s", "dtype": "int64", "shape": [], "memory": "arena", "offset": 768, "nbytes": 8})
    manifest["tensors"].append({"name": "e", "dtype": "bool", "shape": [0, 5], "memory": "arena", "offset": 1024, "nbytes": 0})
    manifest["tensors"][1]["shape"] = (64, 32)
    manifest["kernels"][0]["specialization"][1]["value"] = 3
    manifest["kernels"][0]["specialization"].append({"id": 65535, "type": "float32", "value": -3.4028234663852886e38})
    manifest["kernels"][1]["specialization"][0]["value"] = 2**32 - 1
    manifest["dispatches"][0]["nodes"] = []
    check(manifest)


def test_empty_model():
    """Zero modules, kernels and dispatches is structurally valid (e.g. an identity graph)."""
    m = {"manifest_version": 1,
         "model": {"name": "", "producer": "", "opset": 0, "source_sha256": ""}, "target": {"name": ""},
         "requirements": {"vulkan_api": [1, 0, 0], "extensions": [], "max_shared_memory_bytes": 0,
                          "max_workgroup_invocations": 1, "max_workgroup_size": [1, 1, 1],
                          "max_storage_buffer_range": 0},
         "memory": {"alignment": 4, "arena_bytes": 0, "weights_bytes": 0, "intermediates_sum_bytes": 0,
                    "lower_bound_bytes": 0},
         "tensors": [], "inputs": [], "outputs": [], "modules": [], "kernels": [], "dispatches": []}
    validate_manifest(m, module_count=0, weights_bytes=0)


# ---- fuzz: random edits anywhere in the tree raise BundleError or pass, nothing else ------------

JUNK = [None, True, False, -1, 0, 1, 3, 2**31, 2**64, 10**400, 1.5, float("nan"), float("inf"), "", "x",
        "float32", "arena", [], [0], [1, 1, 1], [0, 1, 2, 3], {}, {"name": "x"}]


def _nodes(tree, path=()):
    yield path, tree
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list) else ()
    for key, child in items:
        yield from _nodes(child, path + (key,))


def _edit(rng: random.Random, manifest: dict) -> dict:
    m = copy.deepcopy(manifest)
    for _ in range(rng.randint(1, 3)):
        nodes = [(p, n) for p, n in _nodes(m) if p]
        path, _ = rng.choice(nodes)
        parent = m
        for key in path[:-1]:
            parent = parent[key]
        action = rng.random()
        if action < 0.15 and isinstance(parent, dict):
            del parent[path[-1]]
        elif action < 0.25 and isinstance(parent, list):
            parent.append(copy.deepcopy(rng.choice(parent)))
        else:
            parent[path[-1]] = copy.deepcopy(rng.choice(JUNK))
    return m


def test_fuzz(manifest):
    rng = random.Random(99)
    rejected = 0
    for i in range(2000):
        edited = _edit(rng, manifest)
        try:
            check(edited)
        except BundleError:
            rejected += 1
        except Exception as e:  # pragma: no cover - the failure message is the point
            pytest.fail(f"iteration {i}: {type(e).__name__}: {e}")
    assert rejected > 1500


def test_error_pickles(manifest):
    import pickle
    manifest["memory"]["alignment"] = 3
    with pytest.raises(BundleError) as info:
        check(manifest)
    again = pickle.loads(pickle.dumps(info.value))
    assert str(again) == str(info.value) and again.check == "manifest" and isinstance(again, ValueError)
