"""compile_model / `vkc compile` with several profiles and shape variants: the argument forms, the
profiles' match, the portable default, shared weights, the CLI's --target/--variant/inspect/verify."""
import numpy as np
import onnx
import pytest
from typer.testing import CliRunner

from bundles import read_bundle
from compiler import compile_model
from compiler.cli import app
from compiler.targets import DEFAULT_TARGETS, TARGETS
from tests.harness import spirv_validate
from tests.onnx_builders import dynamic_mlp


@pytest.fixture(scope="module")
def model():
    return dynamic_mlp()


def test_profiles_match_their_devices():
    assert TARGETS["nvidia"].match() == {"vendor_ids": [0x10DE], "device_types": ["discrete_gpu", "integrated_gpu"]}
    assert TARGETS["mobile"].match() == {"vendor_ids": [0x13B5, 0x5143, 0x1010, 0x144D]}
    assert TARGETS["lavapipe"].match() == {"device_types": ["cpu"]}
    assert TARGETS["generic"].match() is None
    assert DEFAULT_TARGETS == ("nvidia", "mobile", "lavapipe", "generic")


def test_host_profile_matches_the_local_device():
    from compiler.host import host_target
    from runtime_min import choose_device
    dev = choose_device()
    assert host_target().match() == {"vendor_ids": [dev.vendor_id], "device_types": ["cpu"]}  # lavapipe here


def test_argument_forms(model):
    one = compile_model(model, target="lavapipe", input_shapes={"x": [2, 16]})
    assert read_bundle(one).version == (1, 1)  # one pair: the flat bundle, as before
    assert compile_model(model, target=["lavapipe"], variants=[{"x": [2, 16]}]) == one
    both = read_bundle(compile_model(model, target="lavapipe, generic", input_shapes={"x": [2, 16]}))
    assert [(v["name"], v["target"]) for v in both.manifest["variants"]] == [
        ("lavapipe x=2x16", {"name": "lavapipe", "match": {"device_types": ["cpu"]}}),
        ("generic x=2x16", {"name": "generic"})]
    spirv_validate(bytes(compile_model(model, target="generic,nvidia", variants=[{"x": [1, 16]}, {"x": [3, 16]}])))
    with pytest.raises(ValueError, match="not both"):
        compile_model(model, input_shapes={"x": [1, 16]}, variants=[{"x": [2, 16]}])
    with pytest.raises(ValueError, match="unknown target 'amd'"):
        compile_model(model, target="nvidia,amd", input_shapes={"x": [1, 16]})
    with pytest.raises(ValueError, match="names no profile"):
        compile_model(model, target=",", input_shapes={"x": [1, 16]})


def test_shape_variants_share_the_weights(model):
    """A second shape costs no weight bytes; the kernels specialised to both shapes share modules."""
    single = read_bundle(compile_model(model, target="nvidia", input_shapes={"x": [1, 16]}))
    two = read_bundle(compile_model(model, target="nvidia", variants=[{"x": [1, 16]}, {"x": [64, 16]}]))
    assert len(two.weights) <= len(single.weights)
    assert len(two.spirv) < 2 * len(single.spirv)


def test_cli_compile_inspect_verify(model, tmp_path):
    path, out = tmp_path / "m.onnx", tmp_path / "m.vkb"
    onnx.save(model, str(path))
    r = CliRunner().invoke(app, ["compile", str(path), "-o", str(out), "--target", "lavapipe,generic",
                                 "--variant", "x=1x16", "--variant", "x=4x16"])
    assert r.exit_code == 0, r.output
    assert "4 variants (lavapipe x=1x16, lavapipe x=4x16, generic x=1x16, generic x=4x16)" in " ".join(r.output.split())
    r = CliRunner().invoke(app, ["inspect", str(out)])
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "4 variants" in text and "adds (bytes only it uses)" in text and "cpu" in text
    r = CliRunner().invoke(app, ["inspect", str(out), "--variant", "3"])
    assert r.exit_code == 0 and "variant 3: generic x=4x16" in r.output, r.output
    assert CliRunner().invoke(app, ["inspect", str(out), "--variant", "4"]).exit_code == 1
    r = CliRunner().invoke(app, ["run", str(out), "--target", "generic"])
    assert r.exit_code == 0 and "ran generic on" in r.output, r.output
    r = CliRunner().invoke(app, ["verify", str(path), "--target", "lavapipe", "--variant", "x=1x16",
                                 "--variant", "x=3x16"])
    assert r.exit_code == 0, r.output
    assert "ran lavapipe x=1x16" in r.output and "ran lavapipe x=3x16" in r.output
    assert "agrees with onnxruntime" in r.output


def test_cli_shape_errors(model, tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    r = CliRunner().invoke(app, ["compile", str(path), "-o", str(tmp_path / "x.vkb"), "--input-shape", "x=1x16",
                                 "--variant", "x=2x16"])
    assert r.exit_code == 1 and "not both" in r.output
    r = CliRunner().invoke(app, ["compile", str(path), "-o", str(tmp_path / "x.vkb"), "--variant", "x=1xz"])
    assert r.exit_code == 1 and "--variant 'x=1xz' is not NAME=DIMxDIMx" in r.output


def test_default_bundle_runs_the_cpu_profile_here(model):
    """The portable default (no target): every profile of DEFAULT_TARGETS; on lavapipe the runtime
    takes the lavapipe variant."""
    from runtime_min import load
    data = compile_model(model, input_shapes={"x": [2, 16]})
    assert [v["target"]["name"] for v in read_bundle(data).manifest["variants"]] == list(DEFAULT_TARGETS)
    with load(data) as m:
        assert m.target == "lavapipe"
        x = np.ones((2, 16), np.float32)
        assert m.run({"x": x})["y"].shape == (2, 8)


def test_package_and_inspect_json_list_each_variants_requirements(model, tmp_path):
    """The requirements an app checks before loading: one set per variant (the device needs one)."""
    import json
    bundle = tmp_path / "m.vkb"
    bundle.write_bytes(compile_model(model, target="nvidia,lavapipe", input_shapes={"x": [2, 16]}))
    module = tmp_path / "App" / "app"
    module.mkdir(parents=True)
    (tmp_path / "App" / "settings.gradle.kts").write_text('include(":app")\n')
    (module / "build.gradle.kts").write_text("android {\n}\n")
    r = CliRunner().invoke(app, ["package", str(bundle), "--android", str(tmp_path / "App"), "--no-gradle-edit"])
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "nvidia x=2x16: Vulkan 1.1.0" in text and "lavapipe x=2x16: Vulkan 1.1.0" in text, text
    req = json.loads((module / "src/main/assets/m.requirements.json").read_text())
    assert [v["target"]["name"] for v in req["variants"]] == ["nvidia", "lavapipe"]
    assert req["variants"][1]["limits"]["maxTexelBufferElements"] > 0
    r = CliRunner().invoke(app, ["inspect", str(bundle), "--json"])
    assert r.exit_code == 0, r.output
    facts = json.loads(r.output)["facts"]
    assert [v["name"] for v in facts["requirements"]["variants"]] == ["nvidia x=2x16", "lavapipe x=2x16"]


def test_default_bundle_gives_an_nvidia_gpu_the_nvidia_bundles_kernels():
    """What an H200 runs from the portable default is `--target nvidia`'s variant, dispatch for
    dispatch (same SPIR-V, specialization, workgroups and memory plan), so the two can differ in
    time only by the run-to-run noise; the default's other profiles' weights are not uploaded
    (test_run_variants)."""
    from bundles.manifest import variant_views
    from bundles.variants import pick_profile
    from tests.onnx_builders import GraphBuilder
    g = GraphBuilder("conv_mlp", seed=2)
    x = g.input("x", [1, 8, 14, 14])
    c = g.node("Relu", [g.node("Conv", [x, g.const("w", g.rng.standard_normal((16, 8, 3, 3)).astype(np.float32))],
                               pads=[1, 1, 1, 1])])
    flat = g.node("Flatten", [c])
    g.gemm(flat, 16 * 14 * 14, 10)
    g.nodes[-1].output[0] = "y"
    model = g.build(["y"])
    default = read_bundle(compile_model(model))
    nvidia = read_bundle(compile_model(model, target="nvidia"))
    name, ids = pick_profile(default.manifest, 0x10DE, "discrete_gpu", missing=lambda view: None)
    assert name == "nvidia" and len(ids) == 1
    picked, alone = variant_views(default.manifest)[ids[0]], nvidia.manifest

    def kernels(view, spirv):
        return [(bytes(spirv[k["module"]]), k.get("specialization")) for k in view["kernels"]]
    assert kernels(picked, default.spirv) == kernels(alone, nvidia.spirv)
    assert [(d["kernel"], d["groups"]) for d in picked["dispatches"]] == \
        [(d["kernel"], d["groups"]) for d in alone["dispatches"]]
    assert picked["memory"]["arena_bytes"] == alone["memory"]["arena_bytes"]
