"""Format 1.2: combine() shares modules and weights, the reader checks every variant by the 1.1
rules (details name the variant), malformed multi-variant manifests are refused by check name,
and the pick rule on fake device properties."""
import copy
import json

import numpy as np
import pytest
from onnx import helper

from bundles import BundleError, read_bundle, validate_manifest
from bundles.variants import VariantError, combine, input_shapes, match_score, pick_profile

NVIDIA = {"vendor_ids": [0x10DE], "device_types": ["discrete_gpu", "integrated_gpu"]}
CPU = {"device_types": ["cpu"]}


def gemm_model():
    """Gemm + Softmax with a free batch dimension `n` (pinned per variant)."""
    from onnx import TensorProto
    from tests.onnx_builders import init, make_model
    rng = np.random.default_rng(0)
    w, b = rng.standard_normal((16, 8)).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "W", "B"], ["h"]), helper.make_node("Softmax", ["h"], ["y"], axis=1)],
        "gemm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])], [init("W", w), init("B", b)])
    return make_model(graph)


@pytest.fixture(scope="module")
def singles():
    """{(target, rows): single-variant bundle bytes}."""
    from compiler import compile_model
    model = gemm_model()
    return {(t, rows): compile_model(model, target=t, input_shapes={"x": [rows, 16]})
            for t in ("nvidia", "lavapipe") for rows in (2, 8)}


@pytest.fixture(scope="module")
def multi(singles):
    return combine(list(singles.values()), matches={"nvidia": NVIDIA, "lavapipe": CPU})


def sections_of(data):
    b = read_bundle(data)
    return b.manifest, [bytes(m) for m in b.spirv], bytes(b.weights)


def rebuilt(raw, manifest, modules, weights):
    """A bundle of this manifest laid out from FORMAT.md, bypassing the writer's checks."""
    sections = [(1, 8, json.dumps(manifest).encode())] + [(2, 16, m) for m in modules] + [(3, 4096, weights)]
    return bytes(raw.build(sections, version=(1, 2)))


def refused(raw, multi, edit, check, *fragments):
    manifest, modules, weights = sections_of(multi)
    edit(manifest)
    with pytest.raises(BundleError) as info:
        read_bundle(rebuilt(raw, manifest, modules, weights))
    assert info.value.check == check, str(info.value)
    for fragment in fragments:
        assert fragment in info.value.detail, info.value.detail


# ---- combine ---------------------------------------------------------------------------------

def test_combined_bundle_reads_back(multi, singles):
    b = read_bundle(multi)
    assert b.version == (1, 2)
    m = b.manifest
    assert [v["name"] for v in m["variants"]] == ["nvidia x=2x16", "nvidia x=8x16", "lavapipe x=2x16",
                                                   "lavapipe x=8x16"]
    assert [v["target"].get("match") for v in m["variants"]] == [NVIDIA, NVIDIA, CPU, CPU]
    for key in ("tensors", "kernels", "dispatches", "target", "memory"):
        assert key not in m
    # Every variant keeps its single bundle's schedule, kernels and tensor shapes.
    for v, single in zip(m["variants"], singles.values()):
        flat = read_bundle(single).manifest
        assert v["dispatches"] == flat["dispatches"]
        assert [t["shape"] for t in v["tensors"]] == [t["shape"] for t in flat["tensors"]]


def test_modules_and_weights_are_shared(multi, singles):
    b = read_bundle(multi)
    per_single = [read_bundle(s) for s in singles.values()]
    assert len(b.spirv) < sum(len(s.spirv) for s in per_single)
    assert len({bytes(m) for m in b.spirv}) == len(b.spirv)
    # Shape variants of one profile share the weights: two shapes cost no more weight bytes than one.
    two_shapes = read_bundle(combine([singles["lavapipe", 2], singles["lavapipe", 8]]))
    assert len(two_shapes.weights) <= len(read_bundle(singles["lavapipe", 2]).weights)
    assert len(b.weights) <= sum(len(read_bundle(singles[t, 2]).weights) for t in ("nvidia", "lavapipe"))


def test_weights_keep_their_bytes(multi, singles):
    """Every weight tensor of every variant reads the same bytes as in its single bundle."""
    b = read_bundle(multi)
    for v, single in zip(b.manifest["variants"], singles.values()):
        s = read_bundle(single)
        for t, u in zip(v["tensors"], s.manifest["tensors"]):
            if t["memory"] == "weights":
                assert bytes(b.weights[t["offset"]:t["offset"] + t["nbytes"]]) == \
                    bytes(s.weights[u["offset"]:u["offset"] + u["nbytes"]])


def test_one_variant_is_written_flat_and_unchanged(singles):
    data = singles["nvidia", 2]
    assert combine([data]) == data
    assert read_bundle(data).version == (1, 1)


def test_combine_refuses_different_models(singles):
    from compiler import compile_model
    other = compile_model(gemm_model(), target="nvidia", input_shapes={"x": [2, 16]})
    manifest, modules, weights = sections_of(other)
    manifest["model"]["source_sha256"] = "0" * 64
    from bundles import write_bundle
    with pytest.raises(ValueError, match="one model"):
        combine([singles["nvidia", 2], write_bundle(manifest, modules, weights)])


# ---- malformed multi-variant manifests ---------------------------------------------------------

def test_top_level_variant_key_is_refused(raw, multi):
    refused(raw, multi, lambda m: m.update(tensors=m["variants"][0]["tensors"]), "manifest",
            "tensors is present at the top level")


def test_empty_variants_is_refused(raw, multi):
    refused(raw, multi, lambda m: m.update(variants=[]), "manifest", "at least one variant")


def test_variant_errors_name_the_variant(raw, multi):
    refused(raw, multi, lambda m: m["variants"][1]["dispatches"][0].update(kernel=99), "manifest",
            "variants[1].dispatches[0].kernel = 99")
    refused(raw, multi, lambda m: m["variants"][2].pop("memory"), "manifest", "variants[2].memory is missing")


def test_different_inputs_are_refused(raw, multi):
    def rename(m):
        v = m["variants"][3]
        v["inputs"][0]["name"] = "z"
    refused(raw, multi, rename, "manifest", "variants[3].inputs", "same inputs")

    def retype(m):
        v = m["variants"][1]
        v["tensors"][v["outputs"][0]["tensor"]].update(dtype="int32")
    refused(raw, multi, retype, "manifest", "variants[1].outputs")


@pytest.mark.parametrize("match, fragment", [
    ({"vendor_ids": [-1]}, "vendor_ids[0] = -1"), ({"vendor_ids": [2**32]}, "vendor_ids[0]"),
    ({"vendor_ids": 4318}, "must be a list"), ({"device_types": ["gpu"]}, "is not one of"),
    ([], "must be an object")])
def test_bad_match_is_refused(raw, multi, match, fragment):
    refused(raw, multi, lambda m: m["variants"][0]["target"].update(match=match), "manifest",
            "variants[0].target.match", fragment)


def test_requirements_cover_the_variants_own_modules(raw, multi):
    def understate(m):
        m["variants"][0]["requirements"]["max_workgroup_invocations"] = 1
    refused(raw, multi, understate, "manifest", "variants[0]: modules[")


def test_spirv_version_is_bounded_by_each_using_variant(raw, multi):
    refused(raw, multi, lambda m: m["variants"][2]["requirements"].update(vulkan_api=[1, 0, 0]),
            "spirv interface", "variants[2] requirements.vulkan_api [1, 0]")


def test_barriers_are_checked_per_variant(raw, multi):
    def clear(m):
        for d in m["variants"][3]["dispatches"]:
            d["barrier"] = False
    manifest, _, _ = sections_of(multi)
    assert any(d["barrier"] for d in manifest["variants"][3]["dispatches"])
    refused(raw, multi, clear, "barriers", "variants[3]: dispatch")


def test_flat_reader_view_refuses_variants(multi):
    """What a 1.1 reader sees: a required top-level key missing, check `manifest`."""
    manifest, modules, weights = sections_of(multi)
    flat_rules = copy.deepcopy(manifest)
    del flat_rules["variants"]
    with pytest.raises(BundleError, match="target is missing"):
        validate_manifest(flat_rules, module_count=len(modules), weights_bytes=len(weights))


# ---- which variant runs ------------------------------------------------------------------------

@pytest.mark.parametrize("match, vendor, kind, score", [
    (None, 0x10DE, "discrete_gpu", 0), ({}, 0x10DE, "cpu", 0),
    (NVIDIA, 0x10DE, "discrete_gpu", 2), (NVIDIA, 0x10DE, "cpu", None), (NVIDIA, 0x1002, "discrete_gpu", None),
    ({"vendor_ids": [0x13B5]}, 0x13B5, "integrated_gpu", 2), (CPU, 0x10005, "cpu", 1),
    (CPU, 0x10DE, "discrete_gpu", None)])
def test_match_score(match, vendor, kind, score):
    assert match_score(match, vendor, kind) == score


def fake_manifest(*targets):
    """A manifest skeleton with one variant per (name, match, rows)."""
    variants = [{"target": {"name": name, **({"match": match} if match is not None else {})},
                 "tensors": [{"shape": [rows, 16]}], "inputs": [{"name": "x", "tensor": 0}]}
                for name, match, rows in targets]
    return {"variants": variants, "modules": [], "model": {}, "manifest_version": 1}


PROFILES = fake_manifest(("nvidia", NVIDIA, 1), ("nvidia", NVIDIA, 8), ("mobile", {"vendor_ids": [0x13B5, 0x5143]}, 1),
                         ("lavapipe", CPU, 1), ("lavapipe", CPU, 8), ("generic", None, 1), ("generic", None, 8))


def meets_all(view):
    return None


@pytest.mark.parametrize("vendor, kind, profile, ids", [
    (0x10DE, "discrete_gpu", "nvidia", [0, 1]), (0x5143, "integrated_gpu", "mobile", [2]),
    (0x10005, "cpu", "lavapipe", [3, 4]), (0x1002, "discrete_gpu", "generic", [5, 6]),
    (0x10DE, "cpu", "lavapipe", [3, 4])])
def test_pick_profile(vendor, kind, profile, ids):
    assert pick_profile(PROFILES, vendor, kind, meets_all) == (profile, ids)


def test_pick_skips_unmet_requirements_and_ties_go_to_list_order():
    def no_nvidia(view):
        return "shared memory 49152 > 32768" if view["target"]["name"] == "nvidia" else None
    assert pick_profile(PROFILES, 0x10DE, "discrete_gpu", no_nvidia) == ("generic", [5, 6])
    tie = fake_manifest(("a", None, 1), ("b", None, 1), ("a", None, 8))
    assert pick_profile(tie, 1, "cpu", meets_all) == ("a", [0, 2])
    # Variants of the chosen profile that the device cannot run leave the shape set.
    def no_big(view):
        return "too big" if view["tensors"][0]["shape"][0] == 8 else None
    assert pick_profile(PROFILES, 0x10DE, "discrete_gpu", no_big) == ("nvidia", [0])


def test_pick_override_and_errors():
    assert pick_profile(PROFILES, 0x10DE, "discrete_gpu", meets_all, target="lavapipe") == ("lavapipe", [3, 4])
    with pytest.raises(VariantError, match="'amd' is not in this bundle; it has 'nvidia', 'mobile', 'lavapipe', "
                                           "'generic'"):
        pick_profile(PROFILES, 0x10DE, "discrete_gpu", meets_all, target="amd")
    with pytest.raises(VariantError, match="^for target 'nvidia': no fp16$"):
        pick_profile(PROFILES, 0x10DE, "discrete_gpu", lambda v: "no fp16", target="nvidia")
    with pytest.raises(VariantError) as info:
        pick_profile(PROFILES, 0x10DE, "discrete_gpu", lambda v: f"{v['target']['name']} things")
    assert str(info.value) == ("for target 'nvidia': nvidia things; for target 'mobile': mobile things; "
                               "for target 'lavapipe': lavapipe things; for target 'generic': generic things")
    only_cpu = fake_manifest(("lavapipe", CPU, 1))
    # One target: the reason alone (nothing to tell apart).
    with pytest.raises(VariantError, match=r"^a device its match names \(\{'device_types'"):
        pick_profile(only_cpu, 0x10DE, "discrete_gpu", meets_all)
    with pytest.raises(VariantError, match="^no fp16$"):
        pick_profile(only_cpu, 0x10005, "cpu", lambda v: "no fp16", target="lavapipe")


def test_a_flat_manifests_match_is_ignored():
    flat = {"manifest_version": 1, "target": {"name": "lavapipe", "match": CPU}, "kernels": []}
    assert pick_profile(flat, 0x10DE, "discrete_gpu", meets_all) == ("lavapipe", [0])


def test_input_shapes():
    assert input_shapes(PROFILES["variants"][1]) == ((8, 16),)


def test_no_variant_message():
    from bundles.variants import no_variant_message

    def view(a, b):
        return {"tensors": [{"shape": a}, {"shape": b}],
                "inputs": [{"name": "a", "tensor": 0}, {"name": "b", "tensor": 1}]}
    views = [view([1, 3], [1, 10]), view([2, 3], [2, 10])]
    assert no_variant_message(views, [(4, 3), (4, 10)]) == (
        "inputs have shapes a=(4, 3), b=(4, 10); this bundle was compiled for a=1x3,b=1x10; a=2x3,b=2x10")
    one = [{"tensors": [{"shape": [1, n]}], "inputs": [{"name": "ids", "tensor": 0}]} for n in (32, 128)]
    assert no_variant_message(one, [(1, 64)]) == \
        "input 'ids' has shape (1, 64); this bundle was compiled for ids=1x32, ids=1x128"


def test_packed_weights(multi, singles):
    """A profile's ranges of the shared WEIGHTS section, packed in order; a flat bundle: all, unmoved."""
    from bundles.variants import packed_weights
    b = read_bundle(multi)
    for ids in ([0, 1], [2, 3], [0]):
        moves = packed_weights(b.manifest, ids)
        assert [at for _, _, at in moves] == [sum(e - s for s, e, _ in moves[:k]) for k in range(len(moves))]
        assert all(s % 256 == 0 and (e - s) % 256 == 0 for s, e, _ in moves)
    flat = read_bundle(singles["nvidia", 2])
    assert packed_weights(flat.manifest, [0]) == [(0, len(flat.weights), 0)]
