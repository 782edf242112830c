"""onnxruntime behind the same Serve deployment (serving.deployment.BundleServer's engine): the
peer of the load test. It batches and pads exactly as the vkc engine does, into the same batch
sizes, so the two differ only in what runs a chunk."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort

from serving.batching import Chunk, Layout, Request, fill, variant_shapes


class OrtEngine:
    def __init__(self, onnx_path: str, shapes: list[dict], threads: int = 1):
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = opts.inter_op_num_threads = threads
        self.session = ort.InferenceSession(onnx_path, opts, providers=["CPUExecutionProvider"])
        dtypes = {i.name: np.float32 for i in self.session.get_inputs()}  # the load test's models take float32
        self.layout = Layout.of(shapes, dtypes, [o.name for o in self.session.get_outputs()])
        self.device = f"onnxruntime {ort.__version__} CPU, {threads} thread(s)"
        self.failure = None

    def run(self, chunk: Chunk, requests: list[Request]) -> tuple[dict, None]:
        feeds = {n: np.empty(s, d) for (n, s), d in zip(variant_shapes(chunk, self.layout).items(), self.layout.dtypes)}
        fill(feeds, chunk, requests, self.layout)
        return dict(zip(self.layout.outputs, self.session.run(None, feeds))), None

    def close(self) -> None:
        self.session = None
