"""Misuse of every command and of the Python API, one row each: a non-zero exit (or the API's
exception type), exactly one line of error naming the problem and the fix (no traceback, no usage
box), and every file in the work folder as it was (no input overwritten, no partial output left).

Rows name files of the `work` fixture as {relu}, {bundle}...: tiny models built with onnx.helper
and one lavapipe bundle, so the whole table runs in seconds."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from compiler import CompileError, compile_model
from compiler.cli import app
from tests.onnx_builders import make_model

ROOT = Path(__file__).resolve().parents[2]
F32 = TensorProto.FLOAT
# A folder no one can create files in: sysfs refuses even root, whom file modes do not stop.
UNWRITABLE = "/sys"


def _model(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return make_model(graph, infer_shapes=False, opset=17)


def _vi(name, shape, elem=F32):
    return helper.make_tensor_value_info(name, elem, shape)


def _build(work: Path) -> dict[str, str]:
    relu = lambda x_shape, y_shape=None, y_type=F32: _model(  # noqa: E731
        [helper.make_node("Relu", ["x"], ["y"], name="act")], [_vi("x", x_shape)], [_vi("y", y_shape or x_shape, y_type)])
    models = {
        "relu": relu([2, 3]),
        "dynamic": relu(["n", 3]),
        "wrong_dtype": relu([2, 3], y_type=TensorProto.INT64),
        "cycle": _model([helper.make_node("Add", ["x", "b"], ["a"], name="add"),
                         helper.make_node("Relu", ["a"], ["b"], name="loop_back")], [_vi("x", [2, 3])], [_vi("a", [2, 3])]),
        "undefined": _model([helper.make_node("Add", ["x", "bias"], ["y"], name="add")], [_vi("x", [2, 3])], [_vi("y", [2, 3])]),
        "reshape1": _model([helper.make_node("Reshape", ["x", "s"], ["y"], name="flatten_to_1")], [_vi("x", ["n", 6])],
                           [_vi("y", [1, 6])], [numpy_helper.from_array(np.array([1, 6], np.int64), "s")]),
    }
    for name, model in models.items():
        onnx.save(model, work / f"{name}.onnx")
    external = _model([helper.make_node("Add", ["x", "w"], ["y"])], [_vi("x", [2, 3])], [_vi("y", [2, 3])],
                      [numpy_helper.from_array(np.ones((2, 3), np.float32), "w")])
    onnx.save(external, work / "external.onnx", save_as_external_data=True, location="external.bin", size_threshold=0)
    (work / "external.bin").unlink()  # the weights file left behind
    (work / "not_onnx.onnx").write_text("a text file, not a model\n")
    (work / "empty.onnx").write_bytes(b"")
    bundle = compile_model(models["relu"], target="lavapipe")
    (work / "relu.vkb").write_bytes(bundle)
    (work / "cut.vkb").write_bytes(bundle[:100])
    np.save(work / "x.npy", np.ones((2, 3), np.float32))
    np.save(work / "x64.npy", np.ones((2, 3), np.float64))
    np.save(work / "x_3x2.npy", np.ones((3, 2), np.float32))
    np.savez(work / "x.npz", x=np.ones((2, 3), np.float32))
    (work / "zero.npy").write_bytes(b"")
    (work / "a_folder").mkdir()
    (work / "App" / "app").mkdir(parents=True)
    files = {p.stem if p.suffix in (".onnx", ".npy", ".npz") else p.name: str(p) for p in work.iterdir()}
    files.update(bundle=str(work / "relu.vkb"), cut=str(work / "cut.vkb"), npz=str(work / "x.npz"),
                 missing=str(work / "no_such_file.onnx"), no_folder=str(work / "no_folder" / "m.vkb"),
                 work=str(work), unwritable=UNWRITABLE)
    return files


def _snapshot(work: Path) -> dict[str, str]:
    return {str(p.relative_to(work)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "folder"
            for p in sorted(work.rglob("*"))}


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    folder = tmp_path_factory.mktemp("misuse")
    saved = {k: os.environ.get(k) for k in ("VKC_VALIDATION", "VKC_CACHE_DIR")}
    os.environ.update(VKC_VALIDATION="1", VKC_CACHE_DIR=str(tmp_path_factory.mktemp("cache")))
    yield folder, _build(folder)
    for k, v in saved.items():
        os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


def _one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line of error, got {len(lines)}:\n{text}"
    return lines[0]


# (arguments, what the error line must contain)
CLI = [
    ("check {not_onnx}", ["not an ONNX model"]),
    ("check {empty}", ["not an ONNX model"]),
    ("check {missing}", ["does not exist"]),
    ("check {relu} --target foo", ["unknown target 'foo'"]),
    ("check {external}", ["external.bin", "copy"]),
    ("check {relu} --input-shape x=0x3", ["1 or more"]),
    ("check {relu} --input-shape x=2", ["rank 1", "rank 2"]),
    ("check {relu} --input-shape y=2x3", ["'y' is not an input", "x"]),
    ("check {relu} --input-shape x=2xa", ["NAME=DIMx"]),
    ("check {dynamic}", ["dynamic shape", "--input-shape x=1x3"]),
    ("check {cycle}", ["cycle", "'loop_back'"]),
    ("check {wrong_dtype}", ["declares 'y'", "int64", "float32"]),
    ("check {undefined}", ["'bias'", "no node, graph input or initializer"]),
    ("compile {relu} -o {relu}", ["would destroy the input"]),
    ("compile {relu} -o {no_folder}", ["does not exist", "mkdir"]),
    ("compile {relu} -o {unwritable}/m.vkb", ["/sys", "writ"]),
    ("compile {relu} -o {a_folder}", ["is a folder"]),
    ("compile {relu} -o {work}/m.vkb --precision fp8", ["precision 'fp8'"]),
    ("compile {relu} -o {work}/m.vkb --io fp16", ["--io fp16", "--precision fp16"]),
    ("compile {relu} -o {work}/m.vkb --target lavapipe,foo", ["unknown target 'foo'"]),
    ("compile {relu} -o {work}/m.vkb --weights int3", ["--weights int3", "int8", "int4"]),
    ("compile {relu} -o {work}/m.vkb --argmax-output logits", ["--argmax-output logits", "no output 'logits'", "y"]),
    ("compile {relu} -o {work}/m.vkb --weights int4 --weights-block 7", ["--weights-block 7", "power of two"]),
    ("compile {relu} -o {work}/m.vkb --weights-block 64", ["without --weights", "--weights int8"]),
    ("compile {relu} -o {work}/m.vkb --input-shape x=2x3 --variant x=2x3", ["not both"]),
    ("compile {dynamic} -o {work}/m.vkb --variant x=1x3 --variant x=0x3", ["1 or more"]),
    ("compile {reshape1} -o {work}/m.vkb --input-shape x=4x6", ["Reshape 'flatten_to_1'", "24 elements"]),
    ("compile {wrong_dtype} -o {work}/m.vkb", ["declares 'y'", "'act'"]),
    ("compile {cycle} -o {work}/m.vkb", ["cycle"]),
    ("compile {relu}", ["Missing option '-o'"]),
    ("inspect {relu}", ["not a .vkb bundle"]),
    ("inspect {cut}", ["bundle check"]),
    ("inspect {bundle} --variant 3", ["--variant 3", "0..0"]),
    ("run {bundle} --input x={zero}", ["not a .npy file", "numpy.save"]),
    ("run {bundle} --input x={x_3x2}", ["expected float32[2, 3]", "float32[3, 2]"]),
    ("run {bundle} --input x={x64}", ["float64", "convert"]),
    ("run {bundle} --input x={npz}", [".npz"]),
    ("run {bundle} --input x={work}/nothing.npy", ["no such file"]),
    ("run {bundle} --input y={x}", ["no input 'y'"]),
    ("run {bundle} --input x", ["NAME=file.npy"]),
    ("run {bundle} --input x={x} --input x={x}", ["twice"]),
    ("run {bundle} --save {x}", ["takes a folder"]),
    ("run {bundle} --save {unwritable}/out", ["--save", "/sys"]),
    ("run {bundle} --seed -1", ["--seed"]),
    ("run {bundle} --target nvidia", ["'nvidia' is not in this bundle", "lavapipe"]),
    ("run {bundle} --device no-such-gpu", ["no-such-gpu", "vkc devices"]),
    ("run {relu}", ["not a .vkb bundle"]),
    ("run {missing}", ["does not exist"]),
    ("bench {bundle} --repeat 0", ["--repeat", "1"]),
    ("bench {bundle} --warmup -1", ["--warmup"]),
    ("bench {bundle} --repeat abc", ["--repeat", "integer"]),
    ("verify {relu} --tolerance -1", ["--tolerance"]),
    ("verify {cycle}", ["cycle"]),
    ("verify {not_onnx}", ["not an ONNX model"]),
    ("verify {relu} --target foo", ["unknown target 'foo'"]),
    ("verify {wrong_dtype} --layers", ["declares 'y'", "int64"]),
    ("package {bundle} --android {no_folder}", ["not a directory"]),
    ("package {bundle} --android {App} --page-size 123", ["page size 123"]),
    ("package {relu} --android {App}", ["not a .vkb bundle"]),
    ("package {bundle} --android {App} --name ../up.vkb", ["plain file name"]),
    ("tune {relu} --repeat 0", ["--repeat"]),
    ("tune {relu} --precision fp8", ["precision 'fp8'"]),
    ("tune {relu} --target foo", ["unknown target 'foo'"]),
    ("tune {not_onnx}", ["not an ONNX model"]),
    ("frobnicate", ["No such command 'frobnicate'"]),
]


@pytest.mark.parametrize("args, words", CLI, ids=[a for a, _ in CLI])
def test_cli(work, args, words):
    folder, files = work
    before = _snapshot(folder)
    r = CliRunner().invoke(app, args.format(**files).split())
    assert r.exit_code != 0, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert "Traceback" not in r.output and "╭" not in r.output, r.output
    line = _one_line(r.stderr)
    assert line.startswith("error: ") and all(w in line for w in words), line
    assert _snapshot(folder) == before, "a file in the work folder changed"


@pytest.fixture(scope="module")
def vkcrun():
    if shutil.which(os.environ.get("CC", "cc")) is None:
        pytest.skip("no C compiler for native/")
    r = subprocess.run(["make", "-s", "-C", str(ROOT / "native"), "build/vkcrun"], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return ROOT / "native" / "build" / "vkcrun"


VKCRUN = [
    ("{bundle} --input x={x} --bench 0", ["--bench", "'0'"]),
    ("{bundle} --input x={x} --bench abc", ["--bench", "'abc'"]),
    ("{bundle} --input x={x} --bench", ["--bench needs a value"]),
    ("{bundle} --input x={x} --in-place", ["--in-place", "--bench N"]),
    ("{bundle} --input x={x} --output-dir {no_folder}", ["--output-dir", "create it"]),
    ("{bundle} --input x={x} --input x={x}", ["twice"]),
    ("{bundle} --input x={zero}", ["zero.npy"]),
    ("{bundle} --input ={x}", ["NAME=FILE.npy"]),
    ("{bundle} --frobnicate", ["unknown option --frobnicate"]),
    ("{bundle} {bundle}", ["one model only"]),
    ("--input x={x}", ["no model given"]),
    ("{missing} --input x={x}", ["cannot open"]),
]


@pytest.mark.parametrize("args, words", VKCRUN, ids=[a for a, _ in VKCRUN])
def test_vkcrun(work, vkcrun, args, words):
    folder, files = work
    before = _snapshot(folder)
    r = subprocess.run([str(vkcrun), *args.format(**files).split()], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and r.stdout == "", r.stdout
    line = _one_line(r.stderr)
    assert line.startswith("vkcrun: ") and all(w in line for w in words), line
    assert _snapshot(folder) == before


@pytest.fixture(scope="module")
def loaded(work):
    from runtime_min import load

    with load(work[1]["bundle"], validation=True) as model:
        yield model


def _closed(files):
    from runtime_min import load

    model = load(files["bundle"])
    model.close()
    return model.run({"x": np.ones((2, 3), np.float32)})


def _runtime_errors():
    from bundles import BundleError
    from runtime_min import VkcRuntimeError
    return BundleError, VkcRuntimeError


X = np.ones((2, 3), np.float32)
# (what, call(files, model), exception type, what its one-line message must contain)
API = [
    ("compile_model(input_shapes=str)", lambda f, m: compile_model(f["dynamic"], input_shapes="x=1x8"), TypeError,
     ["input_shapes must be a dict", "'x': [1, 8]"]),
    ("compile_model(input_shapes={x: str})", lambda f, m: compile_model(f["dynamic"], input_shapes={"x": "1x3"}),
     TypeError, ["list of ints"]),
    ("compile_model(variants=dict)", lambda f, m: compile_model(f["dynamic"], variants={"x": [1, 3]}), TypeError,
     ["variants must be a list"]),
    ("compile_model(int)", lambda f, m: compile_model(123), TypeError, ["onnx.ModelProto", "int"]),
    ("compile_model(missing)", lambda f, m: compile_model(f["missing"]), CompileError, ["no such file"]),
    ("compile_model(bytes)", lambda f, m: compile_model(b"junk bytes"), CompileError, ["not an ONNX model"]),
    ("compile_model(target=foo)", lambda f, m: compile_model(f["relu"], target="foo"), ValueError,
     ["unknown target 'foo'"]),
    ("compile_model(target=int)", lambda f, m: compile_model(f["relu"], target=5), TypeError, ["target must be"]),
    ("compile_model(precision)", lambda f, m: compile_model(f["relu"], precision="fp8"), CompileError,
     ["precision 'fp8'"]),
    ("compile_model(weights)", lambda f, m: compile_model(f["relu"], weights="int3"), CompileError,
     ["int3", "int8"]),
    ("compile_model(weights_block)", lambda f, m: compile_model(f["relu"], weights="int8", weights_block=48),
     CompileError, ["48", "power of two"]),
    ("compile_model(both shapes)", lambda f, m: compile_model(f["dynamic"], input_shapes={"x": [1, 3]},
                                                              variants=[{"x": [2, 3]}]), ValueError, ["not both"]),
    ("compile_model(dynamic)", lambda f, m: compile_model(f["dynamic"]), CompileError,
     ["dynamic shape", "input_shapes={'x': [1, 3]}"]),
    ("compile_model(external)", lambda f, m: compile_model(f["external"]), CompileError, ["external.bin"]),
    ("load(int)", lambda f, m: __import__("runtime_min").load(123), TypeError, ["int"]),
    ("load(bytes)", lambda f, m: __import__("runtime_min").load(b"junk"), "BundleError", ["header"]),
    ("load(onnx)", lambda f, m: __import__("runtime_min").load(f["relu"]), "BundleError", ["not a .vkb bundle"]),
    ("load(missing)", lambda f, m: __import__("runtime_min").load(f["missing"]), FileNotFoundError,
     ["no_such_file.onnx"]),
    ("load(device=name)", lambda f, m: __import__("runtime_min").load(f["bundle"], device="no-such-gpu"),
     "VkcRuntimeError", ["no-such-gpu"]),
    ("load(device=float)", lambda f, m: __import__("runtime_min").load(f["bundle"], device=1.5), TypeError,
     ["device must be"]),
    ("load(target=foo)", lambda f, m: __import__("runtime_min").load(f["bundle"], target="foo"), "VkcRuntimeError",
     ["'foo' is not in this bundle"]),
    ("Model.run(ndarray)", lambda f, m: m.run(X), TypeError, ["feeds must be a dict", "'x'"]),
    ("Model.run(list)", lambda f, m: m.run([X]), TypeError, ["feeds must be a dict"]),
    ("Model.run({})", lambda f, m: m.run({}), ValueError, ["missing input 'x'"]),
    ("Model.run(float64)", lambda f, m: m.run({"x": X.astype(np.float64)}), ValueError, ["float64", "float32"]),
    ("Model.run(shape)", lambda f, m: m.run({"x": X.T}), ValueError, ["float32[2, 3]", "float32[3, 2]"]),
    ("Model.run(unknown)", lambda f, m: m.run({"x": X, "z": X}), ValueError, ["unknown input 'z'"]),
    ("Model.run(outputs=str)", lambda f, m: m.run({"x": X}, outputs="y"), TypeError, ["outputs must be a dict"]),
    ("Model.run(outputs shape)", lambda f, m: m.run({"x": X}, outputs={"y": np.empty((3, 2), np.float32)}),
     ValueError, ["output 'y'", "float32[2, 3]"]),
    ("run_async(ndarray)", lambda f, m: m.run_async(X), TypeError, ["feeds must be a dict"]),
    ("input_arrays(list)", lambda f, m: m.input_arrays([2, 3]), TypeError, ["shapes must be a dict"]),
    ("input_arrays(shape)", lambda f, m: m.input_arrays({"x": (9, 9)}), ValueError, ["x=2x3"]),
    ("Model.run after close", lambda f, m: _closed(f), "VkcRuntimeError", ["closed", "load it again"]),
]


@pytest.mark.parametrize("what, call, error, words", API, ids=[a[0] for a in API])
def test_api(work, loaded, what, call, error, words):
    folder, files = work
    if isinstance(error, str):
        error = dict(zip(("BundleError", "VkcRuntimeError"), _runtime_errors()))[error]
    before = _snapshot(folder)
    with pytest.raises(error) as info:
        call(files, loaded)
    msg = _one_line(str(info.value))
    assert all(w in msg for w in words), msg
    assert _snapshot(folder) == before
    # the model still runs after the refusal
    np.testing.assert_array_equal(loaded.run({"x": X})["y"], X)
