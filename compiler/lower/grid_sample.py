"""GridSample (torch.nn.functional.grid_sample): Y[n, c, h, w] is X[n, c] sampled at the point
grid[n, h, w] = (x, y), normalized to [-1, 1] across X's width and height. 4-D X, bilinear and
nearest modes, zeros, border and reflection padding, both align_corners conventions, as
onnxruntime computes them (templates/grid_sample.comp.j2)."""
from __future__ import annotations

from onnx import helper
from onnx.reference import ReferenceEvaluator

from ..errors import CompileError
from ..dtypes import kernel_types
from ..registry import FLOATS
from .kernel import Kernel, grid_1d, register

MODES = {"bilinear": "linear", "linear": "linear", "nearest": "nearest"}
PADDINGS = ("zeros", "border", "reflection")
LIMITS = "bicubic/cubic mode; 5-D inputs (opset 20's volumetric sampling)"


def _evaluate(node, x, grid):
    """GridSample by onnx's reference at opset 20: its implementation knows only opset 20's mode
    names (linear, cubic), so opset 16's bilinear and bicubic fail there."""
    mode = node.text("mode", "bilinear")
    attrs = {**node.attrs, "mode": {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)}
    graph = helper.make_graph([helper.make_node("GridSample", ["x", "grid"], ["y"], **attrs)], "grid_sample",
                              [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
                               for n, a in (("x", x), ("grid", grid))],
                              [helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(x.dtype), None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    return ReferenceEvaluator(model).run(None, {"x": x, "grid": grid})


@register("GridSample", since=16, dtypes=FLOATS, limits=LIMITS, evaluate=_evaluate)
def lower_grid_sample(node, target):
    x, grid, out = node.inputs[0], node.inputs[1], node.outputs[0]
    mode, padding = node.text("mode", "bilinear"), node.text("padding_mode", "zeros")
    if mode not in MODES:
        raise CompileError(f"GridSample '{node.name}': mode '{mode}' is not built; vkc samples "
                           "bilinear (linear) and nearest. Export with mode='bilinear' or 'nearest'.")
    if padding not in PADDINGS:
        raise CompileError(f"GridSample '{node.name}': padding_mode '{padding}' is not one of "
                           f"{', '.join(PADDINGS)}.")
    if len(x.shape) != 4 or len(grid.shape) != 4 or grid.shape[-1] != 2:
        raise CompileError(f"GridSample '{node.name}': X {list(x.shape)} and grid {list(grid.shape)} are "
                           "not 4-D [N, C, H, W] and [N, H_out, W_out, 2]; vkc samples 2-D images only.")
    if grid.dtype != x.dtype:
        raise CompileError(f"GridSample '{node.name}': grid '{grid.name}' is {grid.dtype}, X is "
                           f"{x.dtype}; vkc samples with a grid of X's type.")
    n, c, ih, iw = x.shape
    oh, ow = grid.shape[1:3]
    align = bool(node.attrs.get("align_corners", 0))
    spec = [("TOTAL", "int32", out.size), ("C", "int32", c), ("IH", "int32", ih), ("IW", "int32", iw),
            ("OH", "int32", oh), ("OW", "int32", ow)]
    local = target.elementwise_local
    if out.size == 0:
        return []
    params = dict(LOCAL=local, mode=MODES[mode], padding=padding, align_corners=align, **kernel_types(out))
    return [Kernel("grid_sample", params, spec, [x, grid, out], writes=[2], groups=grid_1d(out.size, local),
                   local_size=(local, 1, 1), nodes=node.sources, flops=8 * out.size)]
