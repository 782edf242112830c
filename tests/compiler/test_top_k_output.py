"""compile_model(top_k_output="NAME:K"): the bundle also outputs NAME_topk_values and
NAME_topk_indices, the K largest of the output's last row and their ids, computed on the device:
equal to a stable sort's first K (ties to the lower index) for logits of rank 3, 2 and 1, in
float32 and float16 bundles, beside --argmax-output; the named output stays; what is refused;
`vkc compile --top-k-output` and `vkc generate` saying where it sampled."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from compiler import compile_model
from compiler.errors import CompileError
from compiler.lower.top_k import MAX_K
from tests.compiler.test_argmax_output import relu_model
from tests.harness import run_bundle


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("target", ["lavapipe", "generic"])
@pytest.mark.parametrize("shape, k", [([1, 5, 1000], 40), ([3, 7, 40], 40), ([2, 300], 1), ([64], 8)])
def test_top_k_of_last_row(shape, k, target, precision):
    x = np.random.default_rng(0).integers(-3, 30, shape).astype(np.float32)   # ties within every row
    bundle = compile_model(relu_model(shape), target=target, precision=precision, top_k_output=f"logits:{k}",
                           argmax_output="logits")
    got, io = run_bundle(bundle, {"x": x})
    assert [o[0] for o in io["outputs"]] == ["logits", "logits_argmax", "logits_topk_values", "logits_topk_indices"]
    last = np.maximum(x, 0)[..., -1, :] if len(shape) > 1 else np.maximum(x, 0)
    want = np.argsort(-last, axis=-1, kind="stable")[..., :k]
    assert got["logits_topk_indices"].dtype == np.int64 and got["logits_topk_values"].dtype == np.float32
    np.testing.assert_array_equal(got["logits_topk_indices"], want)
    np.testing.assert_array_equal(got["logits_topk_values"], np.take_along_axis(last, want, -1))
    np.testing.assert_array_equal(got["logits_argmax"].reshape(-1), want[..., 0].reshape(-1))
    np.testing.assert_array_equal(got["logits"], np.maximum(x, 0))


def test_old_opset_takes_k_as_attribute():
    model = relu_model([2, 50])
    model.opset_import[0].version = 9
    x = np.random.default_rng(1).standard_normal([2, 50]).astype(np.float32)
    got, _ = run_bundle(compile_model(model, target="lavapipe", top_k_output="logits:5"), {"x": x})
    np.testing.assert_array_equal(got["logits_topk_indices"], np.argsort(-np.maximum(x[-1], 0), kind="stable")[:5])


@pytest.mark.parametrize("option, words", [
    ("logitz:4", ["no output 'logitz'", "its outputs: logits"]),
    ("logits", ["as NAME:K (logits:40)"]),
    ("logits:0", [f"a K from 1 to {MAX_K}"]),
    (f"logits:{MAX_K + 1}", [f"a K from 1 to {MAX_K}"]),
    ("logits:5", ["K = 5 is more than the 4 entries"]),
    (3, ["as NAME:K"]),
])
def test_refused(option, words):
    with pytest.raises(CompileError) as e:
        compile_model(relu_model([1, 4]), target="lavapipe", top_k_output=option)
    assert all(w in str(e.value) for w in words), str(e.value)


def test_integer_output_refused():
    graph = helper.make_graph([helper.make_node("Abs", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.INT32, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, [1, 4])])
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(CompileError, match="int32 .* name a float output"):
        compile_model(model, target="lavapipe", top_k_output="y:2")


def test_cli(tmp_path):
    """`vkc compile --top-k-output logits:8` on the tiny decoder; `vkc generate --top-k 8` says it
    sampled from the device's top K, `--top-k 9` on the host."""
    import onnx
    from typer.testing import CliRunner
    from compiler.cli import app
    from tests.llm_models import tiny_llama
    onnx.save(tiny_llama(layers=1, context=32), tmp_path / "llama.onnx")
    r = CliRunner().invoke(app, ["compile", str(tmp_path / "llama.onnx"), "-o", str(tmp_path / "llama.vkb"),
                                 "--target", "lavapipe", "--variant", "input_ids=1x1", "--top-k-output", "logits:8"])
    assert r.exit_code == 0, r.output
    for top_k, where in (("8", "sampled on the host from the device's top K logits"), ("9", "sampled on the host")):
        r = CliRunner().invoke(app, ["generate", str(tmp_path / "llama.vkb"), "--prompt-ids", "1,2,3",
                                     "--max-new-tokens", "4", "--temperature", "0.8", "--top-k", top_k])
        assert r.exit_code == 0, r.output
        assert " ".join(r.output.split()).endswith(where), r.output
    r = CliRunner().invoke(app, ["compile", str(tmp_path / "llama.onnx"), "-o", str(tmp_path / "x.vkb"),
                                 "--target", "lavapipe", "--variant", "input_ids=1x1", "--top-k-output", "logits"])
    assert r.exit_code != 0 and "as NAME:K (logits:40)" in r.output
