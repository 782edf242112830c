"""The ONNX reductions, each named once: op type -> the reduction templates/reduce.comp.j2 computes.
lower/reduce.py lowers them and declares what passes know of them."""
from __future__ import annotations

REDUCE_OPS = {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max", "ReduceMin": "min",
              "ReduceProd": "prod", "ReduceL1": "l1", "ReduceL2": "l2",
              "ReduceSumSquare": "sumsquare", "ReduceLogSum": "logsum",
              "ReduceLogSumExp": "logsumexp"}
