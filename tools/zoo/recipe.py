"""Input recipes of the zoo's exports and fixtures: what each graph input is fed (fresh values on
every run), kept with the export as JSON, and where each exporter's files go. Only numpy: the
exporter, the checker, the runner, the report and the CI test share it."""
from __future__ import annotations

import numpy as np

EXPORTERS = ("torchscript", "dynamo")


def folder(source: str, exporter: str) -> str:
    """The folder of a source's exports and results: the dynamo exporter's apart."""
    return source if exporter == "torchscript" else f"{source}-{exporter}"


def float_input(name: str, shape) -> dict:
    return {"name": name, "kind": "float", "dtype": "float32", "shape": list(shape)}


def ids_input(name: str, shape, high: int) -> dict:
    return {"name": name, "kind": "ids", "dtype": "int64", "shape": list(shape), "high": int(high)}


def mask_input(name: str, shape) -> dict:
    return {"name": name, "kind": "mask", "dtype": "int64", "shape": list(shape)}


def make_feed(spec: dict, batch: int, rng: np.random.Generator) -> np.ndarray:
    """A fresh value for one input at the given batch size: token ids in [0, high); a padding
    mask (1 = token, each row a random tail of 0s, never more than half); standard normal floats."""
    shape = [batch, *spec["shape"][1:]]
    if spec["kind"] == "ids":
        return rng.integers(0, spec["high"], shape).astype(np.int64)
    if spec["kind"] == "mask":
        mask = np.ones(shape, np.int64)
        for row in mask.reshape(-1, shape[-1]):
            row[shape[-1] - int(rng.integers(0, shape[-1] // 2 + 1)):] = 0
        return mask
    return rng.standard_normal(shape).astype(spec.get("dtype", "float32"))
