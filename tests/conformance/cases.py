"""ONNX's node test cases, run from memory through `compiler.onnx_backend`.

Shared by the pytest module (test_onnx_node_cases.py) and the script that records the results
for docs/SUPPORT.md (run.py). A case is selected when the lowering registry claims every op of
its graph; it then passes, fails, or is skipped (excluded in exclusions.txt with a reason, or
skipped by the backend because it uses an op or dtype vkc does not implement).
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import onnx

HERE = Path(__file__).resolve().parent
EXCLUSIONS = HERE / "exclusions.txt"

# The ops of the CNN-zoo issue and of the end-to-end issue: the 90% goal is over their
# single-node cases.
ISSUE_OPS = (
    "Conv ConvTranspose MaxPool AveragePool GlobalMaxPool LRN HardSigmoid HardSwish LeakyRelu "
    "PRelu Elu Tanh Exp Sqrt Pow Min Max Sum Pad Resize Upsample Transpose Squeeze Unsqueeze "
    "Split Slice Gather ReduceMean ReduceSum ReduceMax LogSoftmax Shape Concat Reshape "
    "Gemm MatMul Add Sub Mul Div Relu Clip Sigmoid BatchNormalization GlobalAveragePool Flatten "
    "Softmax Identity Constant Dropout").split()


@dataclass
class Outcome:
    status: str          # "passed", "failed" or "skipped"
    detail: str = ""


@lru_cache(maxsize=1)
def all_cases() -> dict:
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return {c.name: c for c in collect_testcases(None)}


def single_op(case) -> str | None:
    """The op of a one-node case (None for multi-node and function-expanded cases)."""
    nodes = case.model.graph.node
    return nodes[0].op_type if len(nodes) == 1 else None


def claimed(case) -> bool:
    """Every op of the case is one the registry (or a pass) claims at some opset."""
    from compiler.ops import supported_ops

    ops = set(supported_ops())
    return all(n.domain in ("", "ai.onnx") and n.op_type in ops for n in case.model.graph.node)


@lru_cache(maxsize=1)
def selected_cases() -> list[str]:
    return sorted(name for name, c in all_cases().items() if c.kind == "node" and claimed(c))


@lru_cache(maxsize=1)
def exclusions() -> dict[str, str]:
    """exclusions.txt: blocks of `reason: <one line>` followed by the case names it covers."""
    result, reason = {}, None
    for raw in EXCLUSIONS.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("reason:"):
            reason = line[len("reason:"):].strip()
            continue
        if reason is None:
            raise ValueError(f"{EXCLUSIONS}: case {line!r} comes before any 'reason:' line")
        if line in result:
            raise ValueError(f"{EXCLUSIONS}: case {line!r} is listed twice")
        result[line] = reason
    return result


def _normalize(t):
    return onnx.numpy_helper.to_array(t) if isinstance(t, onnx.TensorProto) else np.asarray(t)


def run_case(name: str) -> Outcome:
    """Prepare and run one case under the validation layer; compare like ONNX's runner does
    (np.testing.assert_allclose with the case's rtol/atol, 1e-3/1e-7 by default)."""
    from onnx.backend.test.runner import BackendIsNotSupposedToImplementIt

    from compiler import onnx_backend
    from runtime_min import clear_validation_messages, validation_messages

    if name in exclusions():
        return Outcome("skipped", f"excluded: {exclusions()[name]}")
    case = all_cases()[name]
    clear_validation_messages()
    rep = None
    try:
        rep = onnx_backend.prepare(case.model, device=os.environ.get("VKC_DEVICE"), validation=True)
        for inputs, ref_outputs in case.data_sets:
            outputs = rep.run([_normalize(x) for x in inputs])
            refs = [_normalize(x) for x in ref_outputs]
            assert len(outputs) == len(refs), f"{len(outputs)} outputs, expected {len(refs)}"
            for i, (got, want) in enumerate(zip(outputs, refs)):
                np.testing.assert_array_equal(got.shape, want.shape, err_msg=f"output {i} shape")
                assert got.dtype == want.dtype, f"output {i}: dtype {got.dtype} != {want.dtype}"
                np.testing.assert_allclose(got, want, rtol=case.rtol, atol=case.atol,
                                           err_msg=f"output {i}")
    except BackendIsNotSupposedToImplementIt as exc:
        return Outcome("skipped", str(exc).splitlines()[0] if str(exc) else "not supported")
    except Exception as exc:  # noqa: BLE001 - every other problem is a failure to report
        return Outcome("failed", f"{type(exc).__name__}: {exc}")
    finally:
        if rep is not None:
            rep.close()
    messages = list(validation_messages())
    if messages:
        return Outcome("failed", f"validation layer: {messages[0]}")
    return Outcome("passed")
