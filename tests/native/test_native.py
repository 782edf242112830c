"""The native runtime (native/) against runtime_min and the Python reader.

- `make -C native` builds; `make -C native asan` builds the same under ASan + UBSan.
- Agreement: bundles of small models that together use every kernel family on the generic and
  lavapipe profiles, in float32 and float16 (CASES), run in runtime_min and in vkcrun on the same
  random inputs give bit-identical outputs (same SPIR-V, same specialization, same schedule, same device: any
  difference would be a bug, so equality is asserted, not a tolerance), with the validation layer
  (synchronization validation on) silent for the C runtime.
- Fuzz: VKC_NATIVE_FUZZ_N (default 2000) mutations of tests/bundles/test_fuzz.py go through the C
  loader's checks (vkc_check) built with ASan/UBSan (leak checking on): no crash, leak or hang, and
  the same verdict as the Python reader (same check name on rejection), the barrier rule included.
  Soak: VKC_NATIVE_FUZZ_N=100000 (documented in native/README.md).
- Soak: VKC_NATIVE_SOAK runs (default 3000) of vkc_run in one process with flat RSS, plus load/free cycles.
- Variants (format 1.2): a bundle of a small CNN at two batch sizes for three profiles (nvidia and
  lavapipe with a target.match, generic portable), from bundles.variants.combine: vkcrun picks the
  lavapipe profile here and the variant of the inputs' shapes, and agrees bit-identically with
  runtime_min on each single-variant bundle; --target overrides; other shapes and unknown targets
  are errors that list what the bundle has; its fuzz mutations get the Python reader's verdicts.
- The Android JNI layer compiles against the JDK's jni.h.
"""
import functools
import glob
import os
import random
import re
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parents[2]
NATIVE = ROOT / "native"

FUZZ_N = int(os.environ.get("VKC_NATIVE_FUZZ_N", "2000"))
SPIRV_N = int(os.environ.get("VKC_FUZZ_SPIRV_N", "150"))
SOAK_N = int(os.environ.get("VKC_NATIVE_SOAK", "3000"))

pytestmark = pytest.mark.skipif(shutil.which(os.environ.get("CC", "cc")) is None, reason="no C compiler")


# ---- models ------------------------------------------------------------------------------------

def _conv_pad():
    from tests.onnx_builders import GraphBuilder
    g = GraphBuilder("conv_pad", 3)
    x = g.input("x", [1, 4, 9, 7])
    g.node("Conv", [x, g.const("w", g.rng.standard_normal((6, 4, 3, 3)).astype(np.float32)),
                    g.const("b", g.rng.standard_normal(6).astype(np.float32))],
           out="y", pads=[1, 2, 1, 0], strides=[1, 1])
    return g.build(["y"])


def _elementwise():
    from tests.onnx_builders import make_model, tensor_info
    nodes = [helper.make_node("Mul", ["a", "b"], ["m"]), helper.make_node("Add", ["m", "a"], ["s"]),
             helper.make_node("Tanh", ["s"], ["t"]), helper.make_node("Sigmoid", ["t"], ["y"]),
             helper.make_node("Sub", ["s", "b"], ["z"])]
    graph = helper.make_graph(nodes, "chain", [tensor_info("a", [3, 17]), tensor_info("b", [3, 17])],
                              [tensor_info("y", [3, 17]), tensor_info("z", [3, 17])])
    return make_model(graph)


def _gather():
    from tests.onnx_builders import init, make_model, tensor_info
    data = np.random.default_rng(5).standard_normal((10, 6)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("Gather", ["data", "idx"], ["g"], axis=0),
                               helper.make_node("Relu", ["g"], ["y"])], "gather",
                              [tensor_info("idx", [2, 3], np.int64)], [tensor_info("y", [2, 3, 6])],
                              [init("data", data)])
    return make_model(graph)


MODEL_TESTS = ROOT / "tests" / "models"
FIXTURES = MODEL_TESTS / "fixtures"
# The transformer and 3-D CNN fixtures of the model tests: attention, LayerNorm, bool masks,
# embedding gathers, 3-D convolution.
TRANSFORMERS = ("bert_tiny", "distilbert_tiny", "gpt2_tiny", "whisper_enc_tiny", "vit_tiny", "convnext_tiny",
                "r3d_tiny")


def _large_input():
    """An input over 4 MiB (both runtimes copy it in on four threads), in sizes that split unevenly."""
    from onnx import TensorProto, helper
    rows, cols = 1031, 1033
    graph = helper.make_graph([helper.make_node("Neg", ["x"], ["y"])], "large_input",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, cols])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, cols])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _models():
    """name -> builder: the small models here, the transformer and 3-D CNN fixtures, the zoo
    CNNs (test_zoo.CASES) and test_models.MODELS, at the model tests' sizes."""
    import onnx
    from tests.models import test_models
    from tests.models import test_zoo
    from tests.onnx_builders import mlp, small_cnn
    made = {"mlp": lambda: mlp(16, 32, 8, batch=2), "small_cnn": lambda: small_cnn(hw=16),
            "conv_pad": _conv_pad, "elementwise": _elementwise, "gather_int64": _gather,
            "large_input": _large_input}
    for name in TRANSFORMERS:
        made[name] = lambda name=name: onnx.load(str(FIXTURES / f"{name}.onnx"))
    for case in test_zoo.CASES:
        made[case] = lambda case=case: test_zoo._model(case)
    for name, builder in test_models.MODELS.items():
        made[f"models.{name}"] = builder
    return made


# The runtimes differ in what they do around the kernels (descriptor types: storage buffers on
# generic, texel buffers on lavapipe; specialization constants; grids; uploads of float16, int64
# and bool data; barriers; a multi-profile bundle's pick), not in the kernels, which are the same
# SPIR-V. So the cases are the fewest small models whose bundles, together, use every kernel
# family the model tests' bundles use on each profile (KERNEL_FAMILIES, checked below), in
# float32 and float16, plus the edge cases here.
CASES = [("mlp", "generic"), ("elementwise", "generic"), ("elementwise", "lavapipe"), ("conv_pad", "generic"),
         ("conv_pad", "lavapipe"), ("large_input", "generic"), ("large_input", "lavapipe"),
         ("small_cnn", "lavapipe"), ("models.small_cnn", "generic"), ("models.mobilenetv2-block-s1-residual", "generic"),
         ("bert_tiny", "lavapipe"), ("bert_tiny", "generic-fp16"), ("vit_tiny", "generic"), ("vit_tiny", "generic-fp16"),
         ("vit_tiny", "lavapipe-fp16"),
         ("r3d_tiny", "generic"), ("r3d_tiny", "lavapipe"), ("unet_small-64", "generic"), ("unet_small-64", "lavapipe-fp16"),
         ("shufflenet_v2-64-split-shapeops", "lavapipe-fp16"), ("convnext_tiny", "generic-fp16"),
         # `vkc compile`'s default: every profile of DEFAULT_TARGETS in one bundle (lavapipe runs here)
         ("gather_int64", "default"), ("bert_tiny", "default")]
PARAMS = [pytest.param(name, target, id=f"{name}-{target}") for name, target in CASES]
# Kernel families (a module's name less its tile sizes, operand loads and epilogue) per profile.
KERNEL_FAMILIES = {
    "generic": {"attention_tiled", "conv2d_depthwise", "conv3d", "conv_transpose", "copy_slice", "elementwise",
                "elementwise_typed_bool", "elementwise_typed_float16", "elementwise_typed_float32", "gather",
                "layernorm", "matmul_gemv", "matmul_register_im2col", "matmul_register_strided", "matmul_tiled",
                "pool_max", "reduce", "resize", "splitk_reduce", "strided_copy", "strided_copy_16bit", "zero_fill"},
    "lavapipe": {"attention", "attention_tiled", "conv2d_depthwise", "conv3d", "conv_transpose", "copy_slice",
                 "elementwise", "elementwise_typed_bool", "elementwise_typed_float16", "elementwise_typed_float32",
                 "gather", "im2col", "layernorm", "matmul_register_im2col", "matmul_register_strided", "matmul_texel",
                 "pool_avg", "pool_max", "reduce", "resize", "strided_copy", "strided_copy_16bit", "winograd_input",
                 "winograd_output"},
}


def kernel_family(module_name: str) -> str:
    family = re.sub(r"_\d+x\d+x\d+", "", module_name)
    family = re.sub(r"_(a|b)(scalar|k4|m4|n4|im2col)", "", family)
    return family.removesuffix("_epilogue")


def feeds_for(model):
    rng = np.random.default_rng(7)
    out = {}
    for spec in model.inputs:
        if spec.dtype.kind == "f":
            out[spec.name] = rng.standard_normal(spec.shape).astype(spec.dtype)
        else:
            out[spec.name] = rng.integers(-10 if spec.dtype.kind == "i" else 0, 10, spec.shape).astype(spec.dtype)
    return out


class Bundles(dict):
    """(name, target) -> bundle path, compiled on first use (compile_cached: once per session)."""

    def __init__(self, folder):
        super().__init__()
        self.folder = folder

    def __missing__(self, key):
        from tests.harness import compile_cached
        name, target = key
        from compiler.targets import DEFAULT_TARGETS
        path = self.folder / f"{name}-{target}.vkb"
        profile, _, precision = target.partition("-")
        profile = ",".join(DEFAULT_TARGETS) if profile == "default" else profile
        path.write_bytes(compile_cached(_models()[name](), target=profile, precision=precision or "fp32"))
        self[key] = path
        return path


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    return Bundles(tmp_path_factory.mktemp("native_bundles"))


def vkcrun(binary, bundle, feeds, out_dir, *extra, env=None):
    out_dir.mkdir(parents=True, exist_ok=True)
    args = [str(binary / "vkcrun"), str(bundle), "--output-dir", str(out_dir), *extra]
    for name, arr in feeds.items():
        path = out_dir / f"in_{len(args)}.npy"
        np.save(path, arr)
        args += ["--input", f"{name}={path}"]
    return subprocess.run(args, capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})})


@pytest.mark.parametrize("name,target", PARAMS)
def test_agrees_with_runtime_min(build, bundles, tmp_path, name, target):
    from tests.harness import rel_l2
    from runtime_min import load
    path = bundles[(name, target)]
    with load(str(path)) as model:
        feeds = feeds_for(model)
        ref = model.run(feeds)
    r = vkcrun(build, path, feeds, tmp_path, env={"VKC_VALIDATION": "1"})
    assert r.returncode == 0, r.stderr
    assert "validation" not in r.stderr.lower(), r.stderr  # the messenger prints every message
    worst, same = 0.0, True
    for out_name, want in ref.items():
        got = np.load(tmp_path / f"{out_name.replace('/', '_')}.npy")
        assert got.dtype == want.dtype and got.shape == want.shape
        worst = max(worst, rel_l2(got, want) if want.size else 0.0)
        same &= got.tobytes() == want.tobytes()
    assert worst < 1e-6, f"{name}-{target}: max rel L2 {worst:.3g} against runtime_min"
    assert same, f"{name}-{target}: outputs differ from runtime_min (max rel L2 {worst:.3g})"


def test_cases_use_every_kernel_family(bundles):
    """The cases' bundles use every family of KERNEL_FAMILIES on its profile: a compiler change
    that moves a case off a kernel (a Winograd no longer chosen) shows here, not as lost coverage."""
    from bundles import read_bundle
    used = {profile: set() for profile in KERNEL_FAMILIES}
    for name, target in CASES:
        profile = target.partition("-")[0]
        if profile in used:
            manifest = read_bundle(bundles[(name, target)].read_bytes()).manifest
            used[profile] |= {kernel_family(m["name"]) for m in manifest["modules"]}
    for profile, families in KERNEL_FAMILIES.items():
        assert families <= used[profile], f"{profile}: no case uses {sorted(families - used[profile])}"


def test_validation_layer_env_silent(build, bundles, tmp_path):
    """The layer turned on from the environment alone (no messenger of ours): nothing printed."""
    if not glob.glob("/usr/share/vulkan/explicit_layer.d/*validation*"):
        pytest.skip("no validation layer installed")
    path = bundles[("small_cnn", "lavapipe")]
    from runtime_min import load
    with load(str(path)) as model:
        feeds = feeds_for(model)
    r = vkcrun(build, path, feeds, tmp_path, env={
        "VK_INSTANCE_LAYERS": "VK_LAYER_KHRONOS_validation",
        "VK_LAYER_ENABLES": "VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "" and r.stderr.strip() == "", r.stdout + r.stderr


def test_bench_prints_wall_and_gpu(build, bundles, tmp_path):
    from runtime_min import load
    path = bundles[("mlp", "generic")]
    with load(str(path)) as model:
        feeds = feeds_for(model)
    r = vkcrun(build, path, feeds, tmp_path, "--bench", "5")
    assert r.returncode == 0, r.stderr
    stats = dict(line.split(": ", 1) for line in r.stdout.strip().splitlines())
    assert float(stats["median_wall_ms"]) > 0 and "median_gpu_ms" in stats


@pytest.mark.parametrize("name", ["small_cnn", "mlp"])
def test_in_place_io_agrees(build, bundles, tmp_path, name):
    """vkc_input_data / vkc_output_data: inputs written once where the run reads them and outputs
    read where it leaves them (vkcrun --bench --in-place, outputs poisoned before those runs) give
    runtime_min's results bit for bit, under the validation layer."""
    from runtime_min import load
    path = bundles[(name, "lavapipe")]
    with load(str(path)) as model:
        feeds = feeds_for(model)
        ref = model.run(feeds)
    r = vkcrun(build, path, feeds, tmp_path, "--bench", "3", "--in-place", env={"VKC_VALIDATION": "1"})
    assert r.returncode == 0, r.stderr
    assert "in_place: 1" in r.stdout
    for out_name, want in ref.items():
        got = np.load(tmp_path / f"{out_name.replace('/', '_')}.npy")
        assert got.tobytes() == want.tobytes(), out_name


def test_refusals_name_the_check(build, bundles, tmp_path):
    """A bundle whose barrier flag was cleared where a dispatch reads what the one before wrote:
    the native loader refuses it by the check's name before creating anything."""
    import json

    from bundles import read_bundle
    from tests.bundles.test_fuzz import assemble
    with read_bundle(str(bundles[("mlp", "generic")])) as b:
        m, mods, weights = b.manifest, [bytes(x) for x in b.spirv], bytes(b.weights)
    flagged = [i for i, d in enumerate(m["dispatches"]) if d["barrier"]]
    assert flagged, "the MLP has dependent dispatches"
    m["dispatches"][flagged[0]]["barrier"] = False
    bad = tmp_path / "nobarrier.vkb"
    bad.write_bytes(assemble([(1, 8, json.dumps(m).encode())] + [(2, 16, x) for x in mods] + [(3, 4096, weights)]))
    r = subprocess.run([str(build / "vkc_fuzz"), str(bad)], capture_output=True, text=True, timeout=60)
    assert f"REJECT {bad} barriers:" in r.stdout, r.stdout
    r = vkcrun(build, bad, {"input": np.zeros((2, 16), np.float32)}, tmp_path)
    assert r.returncode == 2 and "bundle check 'barriers' failed" in r.stderr, r.stderr


# ---- variants (format 1.2) ---------------------------------------------------------------------

VARIANT_BATCHES = (1, 3)
VARIANT_TARGETS = ("nvidia", "lavapipe", "generic")
MATCHES = {"nvidia": {"vendor_ids": [0x10DE], "device_types": ["discrete_gpu", "integrated_gpu"]},
           "lavapipe": {"device_types": ["cpu"]}}


@pytest.fixture(scope="module")
def variant_bundles(tmp_path_factory):
    """{(target, batch): single-variant bundle path} and the multi-variant bundle of all of them."""
    from bundles.variants import combine
    from tests.harness import compile_cached
    from tests.onnx_builders import small_cnn
    folder = tmp_path_factory.mktemp("variants")
    singles = {}
    for target in VARIANT_TARGETS:
        for batch in VARIANT_BATCHES:
            path = folder / f"cnn-{target}-{batch}.vkb"
            path.write_bytes(compile_cached(small_cnn(hw=16), target=target,
                                            input_shapes={"input": [batch, 3, 16, 16]}))
            singles[(target, batch)] = path
    multi = folder / "cnn-variants.vkb"
    multi.write_bytes(combine([str(p) for p in singles.values()], matches=MATCHES))
    return singles, multi


def _cnn_feeds(batch):
    return {"input": np.random.default_rng(batch).standard_normal((batch, 3, 16, 16)).astype(np.float32)}


@pytest.mark.parametrize("target", [None, "generic"])
def test_variants_pick_and_agree(build, variant_bundles, tmp_path, target):
    """Each batch size runs the variant compiled for it, of the profile the rule picks on lavapipe
    (its match names CPUs; nvidia's does not fit; generic has none) or of --target: outputs
    bit-identical to runtime_min running the same multi-variant bundle (which picks the same
    profile) and running that variant's single-variant bundle; validation silent. The device holds
    the largest variant's arena and only the shape set's weights, packed (packed_weights)."""
    from bundles import read_bundle
    from bundles.variants import packed_weights
    from runtime_min import load
    singles, multi = variant_bundles
    profile = target or "lavapipe"
    for batch in VARIANT_BATCHES:
        feeds = _cnn_feeds(batch)
        with load(str(singles[(profile, batch)])) as model:
            want = model.run(feeds)
        with load(str(multi), target=target) as model:
            assert model.target == profile
            same = model.run(feeds)
        assert all(same[k].tobytes() == v.tobytes() for k, v in want.items())
        out = tmp_path / f"{profile}-{batch}"
        extra = ["--bench", "1"] + (["--target", target, "--build-all"] if target else [])
        r = vkcrun(build, multi, feeds, out, *extra, env={"VKC_VALIDATION": "1"})
        assert r.returncode == 0, r.stderr
        info = dict(line.split(": ", 1) for line in r.stdout.strip().splitlines())
        assert info["target"] == profile and info["variant"] == f"{profile} input={batch}x3x16x16", r.stdout
        with read_bundle(str(multi)) as b:
            views = b.manifest["variants"]
            ids = [i for i, v in enumerate(views) if v["target"]["name"] == profile]
            packed = sum(end - start for start, end, _ in packed_weights(b.manifest, ids))
            assert int(info["weights_bytes"]) == packed < len(b.weights)
            assert int(info["arena_bytes"]) == max(max(views[i]["memory"]["arena_bytes"] for i in ids), 4)
        for name, value in want.items():
            got = np.load(out / f"{name}.npy")
            assert got.shape == value.shape and got.tobytes() == value.tobytes(), (profile, batch, name)


MESA = 0x10005  # lavapipe's VkPhysicalDeviceProperties.vendorID


@pytest.mark.parametrize("order,matches,profile", [
    # no match anywhere: every score is 0, list order decides
    (("generic", "lavapipe", "nvidia"), {}, "generic"),
    # a vendor match (2) beats a device-type match (1) beats none (0)
    (VARIANT_TARGETS, {"generic": {"vendor_ids": [MESA]}, "lavapipe": {"device_types": ["cpu"]}}, "generic"),
    (VARIANT_TARGETS, {"lavapipe": {"device_types": ["cpu", "discrete_gpu"]}}, "lavapipe"),
    # a vendor that fits with a device type that does not: dropped; nvidia (no match) is first of the rest
    (VARIANT_TARGETS, {"generic": {"vendor_ids": [MESA], "device_types": ["discrete_gpu"]}}, "nvidia"),
    # no match fits: an error naming per target what this device misses
    (VARIANT_TARGETS, {t: {"device_types": ["discrete_gpu"]} for t in VARIANT_TARGETS}, None),
], ids=["list-order", "vendor-beats-type", "type-beats-none", "vendor-and-wrong-type", "none-fits"])
def test_variants_profile_rule(build, variant_bundles, tmp_path, order, matches, profile):
    """FORMAT.md "Which variant runs", step 1, on this device (llvmpipe: vendor 0x10005, a CPU): the
    C runtime and runtime_min pick the same profile (or both refuse)."""
    from bundles.variants import combine
    from runtime_min import VkcRuntimeError, load
    singles, _ = variant_bundles
    path = tmp_path / "picked.vkb"
    path.write_bytes(combine([str(singles[(t, b)]) for t in order for b in VARIANT_BATCHES], matches=matches))
    r = vkcrun(build, path, _cnn_feeds(1), tmp_path / "out", "--bench", "1")
    if profile is None:
        with pytest.raises(VkcRuntimeError, match="can run this bundle"):
            load(str(path)).close()
    else:
        with load(str(path)) as model:
            assert model.target == profile
    if profile is None:
        assert r.returncode == 2, r.stdout
        for t in VARIANT_TARGETS:
            assert f"for target '{t}': a device its target.match fits (this one is vendor 0x10005, CPU)" in r.stderr, \
                r.stderr
        return
    assert r.returncode == 0, r.stderr
    assert f"target: {profile}\n" in r.stdout, r.stdout


def test_variants_errors_list_what_the_bundle_has(build, variant_bundles, tmp_path):
    _, multi = variant_bundles
    r = vkcrun(build, multi, _cnn_feeds(2), tmp_path / "b2")
    assert r.returncode == 2, r.stderr
    assert ("input 'input' has shape (2, 3, 16, 16); this bundle was compiled for "
            "input=1x3x16x16, input=3x3x16x16") in r.stderr, r.stderr
    r = vkcrun(build, multi, _cnn_feeds(1), tmp_path / "t", "--target", "tpu")
    assert r.returncode == 2 and "Target 'tpu' is not in this bundle; it has 'nvidia', 'lavapipe', 'generic'." \
        in r.stderr, r.stderr
    # a variant of the profile that this device cannot run: named, with what it lacks (as runtime_min)
    from bundles import read_bundle, write_bundle
    b = read_bundle(multi.read_bytes())
    manifest = b.manifest
    (unmet,) = [v for v in manifest["variants"] if v["name"].startswith("lavapipe") and "3x3x16x16" in v["name"]]
    unmet["requirements"]["max_shared_memory_bytes"] = 2**40
    path = tmp_path / "unmet.vkb"
    path.write_bytes(write_bundle(manifest, [bytes(x) for x in b.spirv], bytes(b.weights)))
    r = vkcrun(build, path, _cnn_feeds(3), tmp_path / "u", "--target", "lavapipe")
    assert r.returncode == 2, r.stderr
    assert f"these input shapes are variant '{unmet['name']}', which device " in r.stderr, r.stderr
    assert "cannot run: it lacks 1099511627776 shared memory bytes" in r.stderr, r.stderr


def _edited(multi, tmp_path, edit):
    """The multi-variant bundle with its manifest edited, laid out again (no writer checks)."""
    import json

    from bundles import read_bundle
    from tests.bundles.test_fuzz import assemble
    with read_bundle(str(multi)) as b:
        m, mods, weights = b.manifest, [bytes(x) for x in b.spirv], bytes(b.weights)
    edit(m)
    path = tmp_path / "edited.vkb"
    path.write_bytes(assemble([(1, 8, json.dumps(m).encode())] + [(2, 16, x) for x in mods] + [(3, 4096, weights)]))
    read_bundle(str(path)).close()
    return path


def test_variants_shape_set_ignores_match(build, variant_bundles, tmp_path):
    """The shape set is every variant of the chosen profile whose requirements the device meets: a
    variant of it whose own match does not fit this device still runs (both runtimes)."""
    from runtime_min import load

    def mismatch(m):
        big = [v for v in m["variants"] if v["target"]["name"] == "lavapipe"][-1]
        big["target"]["match"] = {"device_types": ["discrete_gpu"]}
    path = _edited(variant_bundles[1], tmp_path, mismatch)
    batch = VARIANT_BATCHES[-1]
    r = vkcrun(build, path, _cnn_feeds(batch), tmp_path / "out", "--bench", "1")
    assert r.returncode == 0 and "target: lavapipe\n" in r.stdout, r.stdout + r.stderr
    with load(str(path)) as model:
        assert model.target == "lavapipe" and len(model.variants) == len(VARIANT_BATCHES)
        want = model.run(_cnn_feeds(batch))
    assert all(np.load(tmp_path / "out" / f"{k}.npy").tobytes() == v.tobytes() for k, v in want.items())


def test_flat_bundle_target_override(build, bundles, tmp_path):
    """A flat bundle is one variant named as runtime_min names it; --target must be its target."""
    from runtime_min import load
    path = bundles[("mlp", "generic")]
    with load(str(path)) as model:
        feeds, name = feeds_for(model), model.variants[0]
    r = vkcrun(build, path, feeds, tmp_path / "ok", "--target", "generic", "--bench", "1")
    assert r.returncode == 0 and f"variant: {name}\n" in r.stdout and name == "generic input=2x16", r.stdout
    r = vkcrun(build, path, feeds, tmp_path / "no", "--target", "nvidia")
    assert r.returncode == 2 and "Target 'nvidia' is not in this bundle; it has 'generic'." in r.stderr, r.stderr


def test_variants_unmet_requirements(build, variant_bundles, tmp_path):
    """A profile asking more than the device has: skipped by the rule, refused by name when asked for."""
    def greedy(m):  # overstating requirements is allowed
        for v in m["variants"]:
            if v["target"]["name"] == "lavapipe":
                v["requirements"]["max_shared_memory_bytes"] = 2**30
    path = _edited(variant_bundles[1], tmp_path, greedy)
    r = vkcrun(build, path, _cnn_feeds(1), tmp_path / "rule", "--bench", "1")
    assert r.returncode == 0 and "target: generic\n" in r.stdout, r.stdout + r.stderr
    r = vkcrun(build, path, _cnn_feeds(1), tmp_path / "asked", "--target", "lavapipe")
    assert r.returncode == 2 and "as target 'lavapipe'" in r.stderr and "1073741824 shared memory bytes" in r.stderr, \
        r.stderr


@pytest.mark.timeout(600)  # a soak of up to 300 s
def test_variants_soak_switches_shapes(build, variant_bundles):
    """Runs alternating between the two variants of one process: each built on first use, one
    arena, flat memory."""
    _, multi = variant_bundles
    r = subprocess.run([str(build / "vkc_soak"), str(multi), "400", "--reloads", "3"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    f = r.stdout.split()
    assert f[f.index("variants") + 1] == str(len(VARIANT_BATCHES)), r.stdout
    assert int(f[f.index("rss_end_kb") + 1]) - int(f[f.index("rss_start_kb") + 1]) < 4096, r.stdout


def _matmul(n):
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["y"])], "mm",
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [n, n]) for x in "ab"],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, n])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _workgroup_scope(spirv: bytes) -> bytes:
    """The module with its cooperative matrices' scope constant set to Workgroup (2), as
    VK_NV_cooperative_matrix2 kernels declare them (never run: only read for what a device lacks)."""
    words = list(struct.unpack(f"<{len(spirv) // 4}I", spirv))
    at = [5]
    while at[-1] < len(words):
        at.append(at[-1] + (words[at[-1]] >> 16))
    at.pop()
    scopes = {words[i + 3] for i in at if words[i] & 0xFFFF == 4456}  # OpTypeCooperativeMatrixKHR
    for i in at:
        if words[i] & 0xFFFF == 43 and words[i + 2] in scopes:  # OpConstant type, result, value
            words[i + 3] = 2
    return struct.pack(f"<{len(words)}I", *words)


def _rebuilt(path, out, manifest_edit=None, spirv_edit=None):
    """The bundle at `path` with its manifest and modules edited, written to `out`."""
    import json

    from bundles import read_bundle
    from tests.bundles.test_fuzz import assemble
    with read_bundle(str(path)) as b:
        m, mods, weights = b.manifest, [bytes(x) for x in b.spirv], bytes(b.weights)
    if manifest_edit:
        manifest_edit(m)
    mods = [spirv_edit(x) for x in mods] if spirv_edit else mods
    out.write_bytes(assemble([(1, 8, json.dumps(m).encode())] + [(2, 16, x) for x in mods] + [(3, 4096, weights)]))
    return out


def test_cooperative_matrix_bundle_refused_by_name(build, tmp_path):
    """A float16 bundle for the nvidia profile (tensor-core GEMM) on a device without
    VK_KHR_cooperative_matrix (lavapipe): refused, naming the extension and the feature. The same
    bundle with its matrices at Workgroup scope (requirements.features not listing what that needs):
    both runtimes name the two features it needs, read from the SPIR-V."""
    from compiler import compile_model
    from runtime_min import VkcRuntimeError, load
    bundle = tmp_path / "coopmat.vkb"
    bundle.write_bytes(compile_model(_matmul(32), target="nvidia", precision="fp16"))
    zeros = np.zeros((32, 32), np.float32)
    r = vkcrun(build, bundle, {"a": zeros, "b": zeros}, tmp_path)
    assert r.returncode == 2, r.stderr
    assert "lacks: extension VK_KHR_cooperative_matrix" in r.stderr and "feature cooperativeMatrix" in r.stderr, r.stderr
    assert "workgroup-scope" not in r.stderr, r.stderr
    wg = _rebuilt(bundle, tmp_path / "workgroup.vkb", spirv_edit=_workgroup_scope)
    r = vkcrun(build, wg, {"a": zeros, "b": zeros}, tmp_path)
    with pytest.raises(VkcRuntimeError) as e:
        load(str(wg))
    assert r.returncode == 2, r.stderr
    for f in ("cooperativeMatrixWorkgroupScope", "cooperativeMatrixFlexibleDimensions"):
        assert f"feature {f} (workgroup-scope cooperative matrices, module " in r.stderr, r.stderr
        assert f"feature {f} (workgroup-scope cooperative matrices, module " in str(e.value), e.value


@pytest.mark.skipif(not os.environ.get("VKC_COOPMAT2_GLSLC"),
                    reason="VKC_COOPMAT2_GLSLC unset: no glslang >= 15 to compile coopmat2 kernels (.ci/newer_glslc.sh)")
def test_coopmat2_bundle_refused_by_name(build, tmp_path):
    """A VK_NV_cooperative_matrix2 GEMM (templates/matmul_coopmat2.comp.j2) on lavapipe: refused for
    the extension; with requirements.features and .extensions emptied (so the message is what the
    SPIR-V needs alone), each of its capabilities, SPIR-V extensions and workgroup-scope features is
    named, none unknown."""
    from dataclasses import replace

    from compiler import compile_model
    from compiler.targets import TARGETS
    target = replace(TARGETS["nvidia"], name="nvidia-coopmat2", coopmat2_tile=(128, 128, 32, 256, 8))
    bundle = tmp_path / "coopmat2.vkb"
    bundle.write_bytes(compile_model(_matmul(256), target=target, precision="fp16"))
    zeros = np.zeros((256, 256), np.float32)
    r = vkcrun(build, bundle, {"a": zeros, "b": zeros}, tmp_path)
    assert r.returncode == 2 and "extension VK_NV_cooperative_matrix2" in r.stderr, r.stderr
    # a feature the SPIR-V needs is named once, for the SPIR-V, as runtime_min does: the whole list fits
    assert "(requirements.features)" not in r.stderr, r.stderr
    assert "feature cooperativeMatrixFlexibleDimensions (workgroup-scope cooperative matrices" in r.stderr, r.stderr
    bare = _rebuilt(bundle, tmp_path / "bare.vkb",
                    manifest_edit=lambda m: m["requirements"].update(features=[], extensions=[]))
    r = vkcrun(build, bare, {"a": zeros, "b": zeros}, tmp_path)
    assert r.returncode == 2 and "does not know" not in r.stderr, r.stderr
    for phrase in ("feature cooperativeMatrixTensorAddressing (SPIR-V capability 5433",
                   "feature cooperativeMatrixTensorAddressing (SPIR-V capability 5439",
                   "feature cooperativeMatrixWorkgroupScope (workgroup-scope cooperative matrices",
                   "feature cooperativeMatrixFlexibleDimensions (workgroup-scope cooperative matrices",
                   "extension VK_NV_cooperative_matrix2 (for SPV_NV_cooperative_matrix2",
                   "extension VK_NV_cooperative_matrix2 (for SPV_NV_tensor_addressing"):
        assert phrase in r.stderr, (phrase, r.stderr)


# ---- fuzz --------------------------------------------------------------------------------------

def python_verdict(data: bytes):
    from bundles import BundleError, read_bundle
    try:
        with read_bundle(data):
            return "ACCEPT", ""
    except BundleError as e:
        return "REJECT", e.check


@functools.lru_cache(maxsize=1)
def _variant_bases():
    """Multi-variant fuzz bases: tests/bundles/test_variants.py's Gemm model at two batch sizes for
    two profiles with target.match, combined (4 KiB and 16 KiB weights)."""
    from tests.bundles import test_fuzz
    from bundles.variants import combine
    from compiler import compile_model
    from tests.bundles.test_variants import gemm_model
    singles = [compile_model(gemm_model(), target=t, input_shapes={"x": [rows, 16]})
               for t in ("nvidia", "lavapipe") for rows in (2, 8)]
    return [test_fuzz.Base(combine(singles, matches=MATCHES, weights_alignment=a)) for a in (4096, 16384)]


def _edit_spirv_version(m):
    m["variants"][2]["requirements"]["vulkan_api"] = [1, 0, 0]


def _clear_barriers(m):
    for d in m["variants"][3]["dispatches"]:
        d["barrier"] = False


# Malformed (and a few valid) multi-variant manifests: test_variants.py's cases plus more, each
# through both readers.
VARIANT_EDITS = {
    "top-level-key": lambda m: m.update(tensors=m["variants"][0]["tensors"]),
    "variants-empty": lambda m: m.update(variants=[]),
    "variants-not-a-list": lambda m: m.update(variants={"a": 1}),
    "variant-not-an-object": lambda m: m["variants"].append(7),
    "name-not-a-string": lambda m: m["variants"][1].update(name=3),
    "name-absent": lambda m: m["variants"][1].pop("name"),
    "kernel-index": lambda m: m["variants"][1]["dispatches"][0].update(kernel=99),
    "memory-missing": lambda m: m["variants"][2].pop("memory"),
    "model-missing": lambda m: m.pop("model"),
    "modules-count": lambda m: m["modules"].pop(),
    "input-renamed": lambda m: m["variants"][3]["inputs"][0].update(name="z"),
    "output-retyped": lambda m: m["variants"][1]["tensors"][m["variants"][1]["outputs"][0]["tensor"]].update(
        dtype="int32"),
    "match-negative-vendor": lambda m: m["variants"][0]["target"].update(match={"vendor_ids": [-1]}),
    "match-huge-vendor": lambda m: m["variants"][0]["target"].update(match={"vendor_ids": [2**32]}),
    "match-vendor-not-a-list": lambda m: m["variants"][0]["target"].update(match={"vendor_ids": 4318}),
    "match-unknown-type": lambda m: m["variants"][0]["target"].update(match={"device_types": ["gpu"]}),
    "match-not-an-object": lambda m: m["variants"][0]["target"].update(match=[]),
    "match-empty": lambda m: m["variants"][0]["target"].update(match={}),
    "understated-invocations": lambda m: m["variants"][0]["requirements"].update(max_workgroup_invocations=1),
    "weights-bytes": lambda m: m["variants"][1]["memory"].update(weights_bytes=8),
    "spirv-version-per-variant": _edit_spirv_version,
    "barriers-per-variant": _clear_barriers,
    "flat-match-ignored": None,  # below: a flat manifest's bad match is not checked
}
EXPECTED = {edit: "manifest" for edit in VARIANT_EDITS}  # the check each case fails, or ACCEPT
EXPECTED.update({"name-absent": "ACCEPT", "match-empty": "ACCEPT", "flat-match-ignored": "ACCEPT",
                 "spirv-version-per-variant": "spirv interface", "barriers-per-variant": "barriers"})


@pytest.mark.parametrize("edit", list(VARIANT_EDITS))
def test_variant_rules_same_verdict_in_c(build, edit):
    """Each rule of format 1.2 through the C loader (vkc_check) and the Python reader: same verdict,
    same check name."""
    import copy
    import json

    from tests.bundles import test_fuzz
    base = _variant_bases()[0] if edit != "flat-match-ignored" else None
    if base is None:
        from compiler import compile_model
        flat = test_fuzz.Base(compile_model(test_fuzz.tiny_model(), target="generic"))
        m, mods, weights = copy.deepcopy(flat.manifest), flat.modules, flat.weights
        m["target"]["match"] = {"vendor_ids": "not checked in a flat manifest"}
    else:
        m, mods, weights = copy.deepcopy(base.manifest), base.modules, base.weights
        VARIANT_EDITS[edit](m)
    data = test_fuzz.assemble([(1, 8, json.dumps(m).encode())] + [(2, 16, x) for x in mods] + [(3, 4096, weights)])
    r = subprocess.run([str(build / "vkc_fuzz")], input=struct.pack("<Q", len(data)) + data, capture_output=True,
                       timeout=60)
    line = r.stdout.decode().strip()
    verdict, check = python_verdict(data)
    assert (check or verdict) == EXPECTED[edit], (verdict, check)
    assert line.split()[0] == verdict and (verdict == "ACCEPT" or line.split(" ", 2)[2].split(":")[0] == check), \
        (verdict, check, line)


def vkc_fuzz_lines(asan_build, corpus: list) -> list:
    """vkc_fuzz (vkc_check on each bundle) under ASan/UBSan with leak checking: its line per bundle."""
    stream = b"".join(struct.pack("<Q", len(d)) + d for d in corpus)
    env = {**os.environ, "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:exitcode=86",
           "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1"}
    r = subprocess.run([str(asan_build / "vkc_fuzz")], input=stream, capture_output=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr.decode()[-4000:]
    lines = r.stdout.decode().splitlines()
    assert len(lines) == len(corpus)
    return lines


@pytest.mark.parametrize("corpus_of", ["test_fuzz", "variants"])
@pytest.mark.timeout(1200)  # the sanitizer build, then up to 600 s of fuzzing
def test_fuzz_c_loader_under_sanitizers(asan_build, tmp_path, corpus_of):
    """test_fuzz's corpus (its three bases: flat 4 KiB, flat 16 KiB, two variants), then one of the
    four-variant bundle with target.match (4 KiB, 16 KiB)."""
    from tests.bundles import test_fuzz
    from compiler import compile_model
    if corpus_of == "test_fuzz":
        base = test_fuzz.Base(compile_model(test_fuzz.tiny_model(), target="generic"))
        bases = [base, test_fuzz.Base(test_fuzz.write_bundle(base.manifest, base.modules, base.weights,
                                                             weights_alignment=16384)),
                 test_fuzz.Base(compile_model(test_fuzz.tiny_model(), target="generic,lavapipe"))]
    else:
        bases = [*_variant_bases(), _variant_bases()[0]]
    rng = random.Random(int(os.environ.get("VKC_FUZZ_SEED", "1")))
    corpus = [bases[0].data] + [test_fuzz.mutate(rng, bases)[1] for _ in range(FUZZ_N)]
    lines = vkc_fuzz_lines(asan_build, corpus)
    counts, mismatches, by_check = {"ACCEPT": 0, "REJECT": 0}, [], {}
    for i, (line, data) in enumerate(zip(lines, corpus)):
        verdict, check = python_verdict(data)
        c_verdict = line.split()[0]
        c_check = line.split(" ", 2)[2].split(":")[0] if c_verdict == "REJECT" else ""
        counts[c_verdict] += 1
        by_check[c_check] = by_check.get(c_check, 0) + (c_verdict == "REJECT")
        if (verdict, check) != (c_verdict, c_check):
            mismatches.append((i, verdict, check, line[:300]))
    print(f"\nnative fuzz ({corpus_of}): {len(corpus)} bundles, C accepted {counts['ACCEPT']}, rejected "
          f"{counts['REJECT']}, same verdicts as the Python reader; rejections by check: "
          + ", ".join(f"{k} {v}" for k, v in sorted(by_check.items(), key=lambda kv: -kv[1]) if v))
    assert lines[0] == "ACCEPT 0"
    assert not mismatches, mismatches[:10]


def test_spirv_edits_refused(build, asan_build, tmp_path):
    """test_fuzz.spirv_edit's bundles (SPIR-V words edited, checksums recomputed): vkc_check under
    ASan/UBSan refuses every one, those the Python reader lets through by check 'spirv validation';
    and vkc_load (vkcrun, on lavapipe) refuses them without a crash (it segfaulted in the driver)."""
    from tests.bundles import test_fuzz
    from compiler import compile_model
    base = test_fuzz.Base(compile_model(test_fuzz.tiny_model(), target="generic"))
    rng = random.Random(int(os.environ.get("VKC_FUZZ_SEED", "1")))
    corpus = [test_fuzz.spirv_edit(rng, base)[1] for _ in range(SPIRV_N)]
    lines = vkc_fuzz_lines(asan_build, corpus)
    reader_accepts = [i for i, d in enumerate(corpus) if python_verdict(d)[0] == "ACCEPT"]
    assert reader_accepts and all(line.startswith("REJECT") for line in lines), [x for x in lines if "ACCEPT" in x]
    # (the C interface check also refuses a variable id beyond the module's bound, which the Python
    # reader leaves to the validator)
    checks = [lines[i].split(" ", 2)[2].split(":")[0] for i in reader_accepts]
    assert set(checks) <= {"spirv validation", "spirv interface"} and "spirv validation" in checks, checks
    for i in [i for i, check in zip(reader_accepts, checks) if check == "spirv validation"][:6]:
        path = tmp_path / f"{i}.vkb"
        path.write_bytes(corpus[i])
        r = subprocess.run([str(build / "vkcrun"), str(path), "--input", "x=none.npy"], capture_output=True,
                           text=True, timeout=120)
        assert r.returncode > 0 and "spirv validation" in r.stderr, (r.returncode, r.stderr[-2000:])


@pytest.mark.timeout(900)  # a soak of up to 600 s
def test_soak_flat_rss(build, bundles):
    path = bundles[("mlp", "generic")]
    r = subprocess.run([str(build / "vkc_soak"), str(path), str(SOAK_N), "--reloads", "20"], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    f = r.stdout.split()
    start, end = int(f[f.index("rss_start_kb") + 1]), int(f[f.index("rss_end_kb") + 1])
    print(f"\nnative soak: {SOAK_N} runs + 20 reloads, RSS {start} -> {end} KiB")
    assert end - start < 4096, r.stdout  # flat: under 4 MiB for thousands of runs and 20 load/free cycles


@pytest.mark.timeout(900)  # the sanitizer build, then whole models under it
def test_asan_full_load_and_run(asan_build, bundles, variant_bundles, tmp_path):
    """The Vulkan half under ASan/UBSan too (a leak check inside the driver is out of our hands)."""
    from runtime_min import load
    env = {"ASAN_OPTIONS": "detect_leaks=0", "UBSAN_OPTIONS": "halt_on_error=1"}
    for key in (("small_cnn", "lavapipe"), ("gather_int64", "generic")):
        with load(str(bundles[key])) as model:
            feeds = feeds_for(model)
        r = vkcrun(asan_build, bundles[key], feeds, tmp_path / key[0], env=env)
        assert r.returncode == 0, r.stderr[-4000:]
    r = vkcrun(asan_build, variant_bundles[1], _cnn_feeds(3), tmp_path / "variants", env=env)
    assert r.returncode == 0, r.stderr[-4000:]


def test_in_place_rules_under_asan(asan_build, c_program, bundles, tmp_path):
    """tests/native/in_place_threads.c under ASan/UBSan: in-place I/O from two threads and a run with
    the app's own buffers from a third, under the app's lock as vkc.h requires: every output is its
    input's; a trusted load skips SPIR-V validation, a default one validates."""
    exe = c_program("in_place_threads.c", asan_build, tmp_path)
    env = {**os.environ, "ASAN_OPTIONS": "detect_leaks=0", "UBSAN_OPTIONS": "halt_on_error=1"}
    r = subprocess.run([str(exe), str(bundles[("mlp", "generic")])], capture_output=True, text=True, timeout=300,
                       env=env)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-4000:]


# ---- Android -----------------------------------------------------------------------------------

def test_jni_layer_compiles(jni_lib):
    assert jni_lib.exists()


def test_jni_runs_shape_variants(jni_lib, variant_bundles, tmp_path):
    """The JNI calls VkcModel.kt makes, from Java (tests/native/JniCheck.java, same native symbols):
    a multi-variant bundle from a direct ByteBuffer, the variant found by shape and run, bit-identical
    to runtime_min, and again on its input written in place (nativeInputBuffer); a shape the bundle lacks is a VkcException listing the compiled shapes."""
    java = shutil.which("java")
    assert java, "no java on PATH: bash .ci/setup installs default-jdk-headless"
    from runtime_min import load
    singles, multi = variant_bundles
    batch = VARIANT_BATCHES[-1]
    feeds = _cnn_feeds(batch)
    (tmp_path / "in.bin").write_bytes(feeds["input"].tobytes())
    r = subprocess.run([java, str(Path(__file__).with_name("JniCheck.java")), str(jni_lib), str(multi),
                        str(tmp_path / "in.bin"), f"{batch}x3x16x16", str(tmp_path / "out.bin")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"profile lavapipe variants {len(VARIANT_BATCHES)} variant {len(VARIANT_BATCHES) - 1} input input" \
        in r.stdout, r.stdout
    assert "in place same" in r.stdout, r.stdout
    assert "error VkcException: input 'input' has shape (2, 3, 16, 16); this bundle was compiled for " in r.stdout
    with load(str(singles[("lavapipe", batch)])) as model:
        want = next(iter(model.run(feeds).values()))
    assert (tmp_path / "out.bin").read_bytes() == want.tobytes()
