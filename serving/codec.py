"""HTTP bodies to feeds and outputs to bodies: JSON, or numpy's own binary formats.

- `application/json`: `{"inputs": {"x": [[...], ...]}}` -> `{"outputs": {"y": [[...], ...]}}`. JSON has
  no dtypes, so values are converted to the input's dtype when that loses nothing a JSON number
  says (integers into a float input; never fractions into an integer input).
- `application/x-npz`: `np.savez` of the inputs by name -> `np.savez` of the outputs; dtypes exact.
- `application/x-npy`: one `np.save` array for a bundle of one input -> the outputs as npz, or as
  npy when there is one output.
"""
from __future__ import annotations

import io
import json

import numpy as np

from .batching import Layout, RequestError

JSON, NPZ, NPY = "application/json", "application/x-npz", "application/x-npy"
KINDS = (JSON, NPZ, NPY)


def media_type(content_type: str | None) -> str:
    kind = (content_type or JSON).split(";")[0].strip().lower()
    if kind not in KINDS:
        raise RequestError(f"content type {kind!r} is not served; send one of {', '.join(KINDS)}.", status=415)
    return kind


def decode(body: bytes, kind: str, layout: Layout) -> dict:
    """The feeds of a request body (checked by layout.check after this)."""
    if kind == JSON:
        try:
            doc = json.loads(body)
        except ValueError as exc:
            raise RequestError(f"the body is not JSON ({exc}); send {{\"inputs\": {{name: nested list}}}}.")
        if not isinstance(doc, dict) or not isinstance(doc.get("inputs"), dict):
            raise RequestError("a JSON request is {\"inputs\": {name: nested list, ...}}.")
        return {name: _from_json(name, value, layout) for name, value in doc["inputs"].items()}
    form = "np.savez of the inputs by name" if kind == NPZ else "one np.save array"
    try:
        found = np.load(io.BytesIO(body), allow_pickle=False)
        arrays = found if isinstance(found, np.ndarray) else dict(found)
    except Exception as exc:  # numpy says why: truncated, not numpy's format, object arrays
        raise RequestError(f"the body is not a readable {kind} ({_one_line(exc)}); send {form}.")
    if kind == NPZ:
        if not isinstance(arrays, dict):
            raise RequestError(f"the body is one array, not an npz; send {form}.")
        return arrays
    if not isinstance(arrays, np.ndarray) or len(layout.inputs) != 1:
        raise RequestError(f"{NPY} carries one array, for a bundle of one input; this one takes "
                           f"{', '.join(layout.inputs)}: send {NPZ}.")
    return {layout.inputs[0]: arrays}


def _from_json(name: str, value, layout: Layout) -> np.ndarray:
    if name not in layout.inputs:
        return np.asarray(0)  # layout.check names the unknown input
    dtype = layout.dtypes[layout.inputs.index(name)]
    try:
        a = np.asarray(value)
    except ValueError:
        raise RequestError(f"input {name!r} is a ragged nested list; every row needs the same length.")
    if a.dtype.kind not in "biuf" or (a.dtype.kind == "f" and dtype.kind in "biu"):
        raise RequestError(f"input {name!r} holds {'fractions' if a.dtype.kind == 'f' else a.dtype.kind + ' values'} "
                           f"but the bundle takes {dtype.name}.")
    return a.astype(dtype)


def encode(outputs: dict, kind: str) -> tuple[bytes, str]:
    if kind == JSON:
        return json.dumps({"outputs": {n: a.tolist() for n, a in outputs.items()}}).encode(), JSON
    buf = io.BytesIO()
    if kind == NPY and len(outputs) == 1:
        np.save(buf, next(iter(outputs.values())), allow_pickle=False)
        return buf.getvalue(), NPY
    np.savez(buf, **outputs)
    return buf.getvalue(), NPZ


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
