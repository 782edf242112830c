"""onnxruntime's own greedy loops over decoder exports, fed as their exporters' runtimes feed them.

OnnxruntimeLoop: optimum's files (tests/models/fixtures/make_optimum.py), as optimum's
ORTModelForCausalLM feeds them: the past growing from 0 rows, an all-ones attention_mask of past +
new, position_ids past + arange.

GenaiLoop: onnxruntime-genai's model builder's files (tests/models/fixtures/make_genai.py): the
past growing from 0 rows, an all-ones attention_mask of the total length. MatMulNBits'
accuracy_level is set to 0 (A in float32, as vkc computes; at the builder's 4, onnxruntime
quantizes A to int8 and its tokens drift from the float product's)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from compiler.builder_cache import head_size

# Longer than any sequence the tests run
WINDOW_PAST = 1024


class OnnxruntimeLoop:
    """optimum's form (the module's docstring)."""

    def __init__(self, path: Path):
        self.sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        self.names = [o.name for o in self.sess.get_outputs()]
        self.takes = {i.name for i in self.sess.get_inputs()}   # Gemma's export takes no position_ids
        self.reset()

    def reset(self):
        self.past = {i.name: np.zeros((1, i.shape[1], 0, i.shape[3]), np.float32)
                     for i in self.sess.get_inputs() if i.name.startswith("past_key_values")}
        self.filled = 0

    def run(self, ids: list[int]) -> dict:
        n = len(ids)
        feeds = {"input_ids": np.array([ids], np.int64), "attention_mask": np.ones((1, self.filled + n), np.int64),
                 "position_ids": np.arange(self.filled, self.filled + n)[None], **self.past}
        out = dict(zip(self.names, self.sess.run(None, {k: v for k, v in feeds.items() if k in self.takes})))
        self.filled += n
        self.past = {k: out[k.replace("past_key_values", "present")] for k in self.past}
        return out

    def greedy(self, prompt: list[int], steps: int) -> list[int]:
        self.reset()
        out, tokens = self.run(prompt), []
        for _ in range(steps):
            tokens.append(int(np.argmax(out["logits"][0, -1])))
            out = self.run(tokens[-1:])
        return tokens


class GenaiLoop(OnnxruntimeLoop):
    """onnxruntime-genai's model builder's form (the module's docstring)."""

    def __init__(self, path: Path):
        model = onnx.load(path)
        for node in model.graph.node:
            for a in node.attribute:
                if a.name == "accuracy_level":
                    a.i = 0
            # A sliding window (Gemma-2's 4096) past every sequence run here masks nothing, and
            # onnxruntime's kernel takes one only with a cache of the window's length
            window = next((a for a in node.attribute if a.name == "local_window_size"), None)
            if window is not None and window.i >= WINDOW_PAST:
                window.i = -1
                for a in node.attribute:
                    if a.name == "sliding_window_cache":
                        a.i = 0
        self.sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        self.names = [o.name for o in self.sess.get_outputs()]
        gqa = next(n for n in model.graph.node if n.op_type == "GroupQueryAttention")
        size = head_size(model, gqa)
        self.empty = {i.name: np.zeros((1, i.shape[1], 0, size), np.float32)
                      for i in self.sess.get_inputs() if i.name.startswith("past_key_values")}
        self.reset()

    def reset(self):
        self.past, self.filled = dict(self.empty), 0

    def run(self, ids: list[int]) -> dict:
        n = len(ids)
        feeds = {"input_ids": np.array([ids], np.int64), "attention_mask": np.ones((1, self.filled + n), np.int64)}
        out = dict(zip(self.names, self.sess.run(None, {**feeds, **self.past})))
        self.filled += n
        self.past = {k: out[k.replace("past_key_values", "present")] for k in self.past}
        return out
