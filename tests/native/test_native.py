"""The native runtime (native/) against runtime_min and the Python reader.

- `make -C native` builds; `make -C native asan` builds the same under ASan + UBSan.
- Agreement: bundles compiled here (MLP, small CNN, padded conv, an elementwise chain, an int64
  Gather; generic and lavapipe targets) run in runtime_min and in vkcrun on the same random inputs
  give bit-identical outputs (same SPIR-V, same specialization, same schedule, same device: any
  difference would be a bug, so equality is asserted, not a tolerance), with the validation layer
  (synchronization validation on) silent for the C runtime.
- Fuzz: VKC_NATIVE_FUZZ_N (default 2000) mutations of tests/bundles/test_fuzz.py go through the C
  loader's checks (vkc_check) built with ASan/UBSan (leak checking on): no crash, leak or hang, and
  the same verdict as the Python reader (same check name on rejection), the barrier rule included.
  Soak: VKC_NATIVE_FUZZ_N=100000 (documented in native/README.md).
- Soak: VKC_NATIVE_SOAK runs (default 3000) of vkc_run in one process with flat RSS, plus load/free cycles.
- The Android JNI layer compiles against the JDK's jni.h.
"""
import glob
import os
import random
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parents[2]
NATIVE = ROOT / "native"
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "bundles"))

FUZZ_N = int(os.environ.get("VKC_NATIVE_FUZZ_N", "2000"))
SOAK_N = int(os.environ.get("VKC_NATIVE_SOAK", "3000"))

pytestmark = pytest.mark.skipif(shutil.which(os.environ.get("CC", "cc")) is None, reason="no C compiler")


def make(target=None):
    cmd = ["make", "-s", "-C", str(NATIVE)] + ([target] if target else [])
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.fixture(scope="module")
def build():
    make()
    return NATIVE / "build"


@pytest.fixture(scope="module")
def asan_build():
    make("asan")
    return NATIVE / "build-asan"


# ---- models ------------------------------------------------------------------------------------

def _conv_pad():
    from onnx_builders import GraphBuilder
    g = GraphBuilder("conv_pad", 3)
    x = g.input("x", [1, 4, 9, 7])
    g.node("Conv", [x, g.const("w", g.rng.standard_normal((6, 4, 3, 3)).astype(np.float32)),
                    g.const("b", g.rng.standard_normal(6).astype(np.float32))],
           out="y", pads=[1, 2, 1, 0], strides=[1, 1])
    return g.build(["y"])


def _elementwise():
    from onnx_builders import make_model, tensor_info
    nodes = [helper.make_node("Mul", ["a", "b"], ["m"]), helper.make_node("Add", ["m", "a"], ["s"]),
             helper.make_node("Tanh", ["s"], ["t"]), helper.make_node("Sigmoid", ["t"], ["y"]),
             helper.make_node("Sub", ["s", "b"], ["z"])]
    graph = helper.make_graph(nodes, "chain", [tensor_info("a", [3, 17]), tensor_info("b", [3, 17])],
                              [tensor_info("y", [3, 17]), tensor_info("z", [3, 17])])
    return make_model(graph)


def _gather():
    from onnx_builders import init, make_model, tensor_info
    data = np.random.default_rng(5).standard_normal((10, 6)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("Gather", ["data", "idx"], ["g"], axis=0),
                               helper.make_node("Relu", ["g"], ["y"])], "gather",
                              [tensor_info("idx", [2, 3], np.int64)], [tensor_info("y", [2, 3, 6])],
                              [init("data", data)])
    return make_model(graph)


FIXTURES = Path(__file__).resolve().parents[1] / "models" / "fixtures"
# The transformer and 3-D CNN fixtures of the model tests: attention, LayerNorm, bool masks,
# embedding gathers, 3-D convolution; BERT also as an fp16 bundle (16-bit storage features).
TRANSFORMERS = ("bert_tiny", "gpt2_tiny", "whisper_enc_tiny", "vit_tiny", "convnext_tiny", "r3d_tiny")


def _models():
    import onnx
    from onnx_builders import mlp, small_cnn
    made = {"mlp": lambda: mlp(16, 32, 8, batch=2), "small_cnn": lambda: small_cnn(hw=16),
            "conv_pad": _conv_pad, "elementwise": _elementwise, "gather_int64": _gather}
    for name in TRANSFORMERS:
        made[name] = lambda name=name: onnx.load(str(FIXTURES / f"{name}.onnx"))
    return made


CASES = [(name, target) for name in ["mlp", "small_cnn", "conv_pad", "elementwise", "gather_int64",
                                     *TRANSFORMERS]
         for target in ("generic", "lavapipe")] + [("bert_tiny", "generic-fp16")]


def feeds_for(model):
    rng = np.random.default_rng(7)
    out = {}
    for spec in model.inputs:
        if spec.dtype.kind == "f":
            out[spec.name] = rng.standard_normal(spec.shape).astype(spec.dtype)
        else:
            out[spec.name] = rng.integers(-10 if spec.dtype.kind == "i" else 0, 10, spec.shape).astype(spec.dtype)
    return out


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    from harness import compile_cached
    folder = tmp_path_factory.mktemp("native_bundles")
    made = {}
    for name, target in CASES:
        path = folder / f"{name}-{target}.vkb"
        profile, _, precision = target.partition("-")
        path.write_bytes(compile_cached(_models()[name](), target=profile, precision=precision or "fp32"))
        made[(name, target)] = path
    return made


def vkcrun(binary, bundle, feeds, out_dir, *extra, env=None):
    out_dir.mkdir(parents=True, exist_ok=True)
    args = [str(binary / "vkcrun"), str(bundle), "--output-dir", str(out_dir), *extra]
    for name, arr in feeds.items():
        path = out_dir / f"in_{len(args)}.npy"
        np.save(path, arr)
        args += ["--input", f"{name}={path}"]
    return subprocess.run(args, capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})})


RESULTS = []  # (bundle, outputs, max rel L2, identical) for the summary printed at the end


@pytest.mark.parametrize("name,target", CASES, ids=[f"{n}-{t}" for n, t in CASES])
def test_agrees_with_runtime_min(build, bundles, tmp_path, name, target):
    from harness import rel_l2
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
    RESULTS.append((f"{name}-{target}", len(ref), worst, same))
    assert worst < 1e-6
    assert same, f"{name}-{target}: outputs differ from runtime_min (max rel L2 {worst:.3g})"


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


def test_refusals_name_the_check(build, bundles, tmp_path):
    """A bundle whose barrier flag was cleared where a dispatch reads what the one before wrote:
    the native loader refuses it by the check's name before creating anything."""
    import json

    from bundles import read_bundle
    from test_fuzz import assemble
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


def test_cooperative_matrix_bundle_refused_by_name(build, tmp_path):
    """A float16 bundle for the nvidia profile (tensor-core GEMM) on a device without
    VK_KHR_cooperative_matrix (lavapipe): refused, naming the extension and the feature."""
    from compiler import compile_model
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["y"])], "mm",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [32, 32]) for n in "ab"],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [32, 32])])
    bundle = tmp_path / "coopmat.vkb"
    bundle.write_bytes(compile_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
                                     target="nvidia", precision="fp16"))
    zeros = np.zeros((32, 32), np.float32)
    r = vkcrun(build, bundle, {"a": zeros, "b": zeros}, tmp_path)
    assert r.returncode == 2, r.stderr
    assert "lacks: extension VK_KHR_cooperative_matrix" in r.stderr and "feature cooperativeMatrix" in r.stderr, r.stderr


# ---- fuzz --------------------------------------------------------------------------------------

def python_verdict(data: bytes):
    from bundles import BundleError, read_bundle
    try:
        with read_bundle(data):
            return "ACCEPT", ""
    except BundleError as e:
        return "REJECT", e.check


def test_fuzz_c_loader_under_sanitizers(asan_build, tmp_path):
    import test_fuzz
    from compiler import compile_model
    base = test_fuzz.Base(compile_model(test_fuzz.tiny_model()))
    page16 = test_fuzz.Base(test_fuzz.write_bundle(base.manifest, base.modules, base.weights, weights_alignment=16384))
    rng = random.Random(int(os.environ.get("VKC_FUZZ_SEED", "1")))
    corpus = [base.data] + [test_fuzz.mutate(rng, [base, page16])[1] for _ in range(FUZZ_N)]
    stream = b"".join(struct.pack("<Q", len(d)) + d for d in corpus)
    env = {**os.environ, "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:exitcode=86",
           "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1"}
    r = subprocess.run([str(asan_build / "vkc_fuzz")], input=stream, capture_output=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr.decode()[-4000:]
    lines = r.stdout.decode().splitlines()
    assert len(lines) == len(corpus)
    counts, mismatches = {"ACCEPT": 0, "REJECT": 0}, []
    for i, (line, data) in enumerate(zip(lines, corpus)):
        verdict, check = python_verdict(data)
        c_verdict = line.split()[0]
        c_check = line.split(" ", 2)[2].split(":")[0] if c_verdict == "REJECT" else ""
        counts[c_verdict] += 1
        if (verdict, check) != (c_verdict, c_check):
            mismatches.append((i, verdict, check, line[:300]))
    print(f"\nnative fuzz: {len(corpus)} bundles, C accepted {counts['ACCEPT']}, rejected {counts['REJECT']}, "
          "same verdicts as the Python reader")
    assert lines[0] == "ACCEPT 0"
    assert not mismatches, mismatches[:10]


def test_soak_flat_rss(build, bundles):
    path = bundles[("mlp", "generic")]
    r = subprocess.run([str(build / "vkc_soak"), str(path), str(SOAK_N), "--reloads", "20"], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    f = r.stdout.split()
    start, end = int(f[f.index("rss_start_kb") + 1]), int(f[f.index("rss_end_kb") + 1])
    print(f"\nnative soak: {SOAK_N} runs + 20 reloads, RSS {start} -> {end} KiB")
    assert end - start < 4096, r.stdout  # flat: under 4 MiB for thousands of runs and 20 load/free cycles


def test_asan_full_load_and_run(asan_build, bundles, tmp_path):
    """The Vulkan half under ASan/UBSan too (a leak check inside the driver is out of our hands)."""
    from runtime_min import load
    for key in (("small_cnn", "lavapipe"), ("gather_int64", "generic")):
        with load(str(bundles[key])) as model:
            feeds = feeds_for(model)
        r = vkcrun(asan_build, bundles[key], feeds, tmp_path / key[0],
                   env={"ASAN_OPTIONS": "detect_leaks=0", "UBSAN_OPTIONS": "halt_on_error=1"})
        assert r.returncode == 0, r.stderr[-4000:]


def test_summary():
    """Prints the agreement table (pytest -s shows it)."""
    for name, n, worst, same in RESULTS:
        print(f"{name:28s} outputs={n} max_rel_l2={worst:.3g} bit_identical={same}")


# ---- Android -----------------------------------------------------------------------------------

def test_jni_layer_compiles(build, tmp_path):
    jni = sorted(glob.glob("/usr/lib/jvm/*/include/jni.h"))
    if not jni:
        pytest.skip("no JDK with jni.h")
    inc = Path(jni[0]).parent
    r = subprocess.run([os.environ.get("CC", "cc"), "-std=c11", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared",
                        f"-I{inc}", f"-I{inc / 'linux'}", f"-I{NATIVE / 'include'}", "-DVKC_JNI_DESKTOP",
                        str(NATIVE / "android" / "vkc_jni.c"), str(build / "libvkc.a"), "-ldl", "-lpthread", "-lm",
                        "-o", str(tmp_path / "libvkc_jni.so")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
