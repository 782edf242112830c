#!/usr/bin/env python3
"""On the GPU machine: the nvidia profile with some fields changed, model by model, to see whether a
profile default should move. Two sweeps:

    python3 benchmarks/h200/profile_sweep.py tiles    # per matmul problem: GPU us of each tile candidate
                                                      # (ViT-B/16 and BERT-base at batch 8; Model.profile)
    python3 benchmarks/h200/profile_sweep.py splitk   # host-to-host ms (Model.bench, median of 40) with
                                                      # splitk_min_steps 4 (the default) and 16, batch 1

Models: torchvision CNNs exported as benchmarks/h200/models.py exports them, and the transformers of
benchmarks/h200/transformers.py (FULL configs), random weights. Candidates are Target fields; a
candidate that fails to compile or run is reported in its row.
"""
import argparse
import io
import statistics
import sys
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]

import onnx  # noqa: E402
import torch  # noqa: E402
import torchvision  # noqa: E402
import transformers as T  # noqa: E402  (benchmarks/h200/transformers.py)

from compiler import compile_model  # noqa: E402
from compiler.compile import compile_with_kernels  # noqa: E402
from compiler.host import time_dispatches  # noqa: E402
from compiler.targets import TARGETS  # noqa: E402
from runtime_min import load  # noqa: E402

TILES = [dict(), dict(tile_m=128, tile_n=128, reg_m=8, reg_n=8), dict(tile_k=32),
         dict(tile_m=128, tile_n=128, reg_m=8, reg_n=8, tile_k=8), dict(tile_m=64, tile_n=128, reg_m=4, reg_n=8)]
SPLITK_STEPS = (4, 16)
CNNS = ("squeezenet1_0", "mobilenet_v2", "resnet18", "resnet50", "efficientnet_b0", "mnasnet1_0")


def transformer(name, batch):
    net, feeds, ins, outs, _ = T.build(name, T.FULL, batch)
    return T.export(net, feeds, ins, outs), feeds


def cnn(name):
    torch.manual_seed(0)
    net = getattr(torchvision.models, name)(weights=None).eval()
    x = torch.randn(1, 3, 224, 224)
    buf = io.BytesIO()
    torch.onnx.export(net, x, buf, opset_version=17, dynamo=False, input_names=["input"], output_names=["output"])
    return onnx.load_from_string(buf.getvalue()), {"input": x.numpy()}


def tiles():
    for name, batch in (("vit", 8), ("bert", 8)):
        model, _ = transformer(name, batch)
        table = {}
        for i, fields in enumerate(TILES):
            try:
                bundle, kernels = compile_with_kernels(model, target=replace(TARGETS["nvidia"], **fields))
                _, times = time_dispatches(bundle, None, 5)
            except Exception as e:  # noqa: BLE001 - a candidate's failure is its row
                print(name, batch, i, fields, "FAILED", repr(e)[:200], flush=True)
                continue
            per = {}
            for k, t in zip(kernels, times):
                if k.problem:
                    per[k.problem] = per.get(k.problem, 0.0) + t.seconds
            print(name, batch, i, fields, f"total {sum(t.seconds for t in times) * 1e3:.3f} ms "
                  f"matmul {sum(per.values()) * 1e3:.3f} ms", flush=True)
            for problem, seconds in per.items():
                table.setdefault(problem, {})[i] = seconds
        for problem, row in table.items():
            print("  ", problem, " ".join(f"{i}:{s * 1e6:.0f}" for i, s in sorted(row.items())), flush=True)


def splitk():
    print("model", *[f"steps{s}" for s in SPLITK_STEPS], "dispatches", flush=True)
    models = [(n, *cnn(n)) for n in CNNS] + [(n, *transformer(n, 1)) for n in ("vit", "bert")]
    for name, model, feeds in models:
        ms, dispatches = [], []
        for steps in SPLITK_STEPS:
            path = f"/tmp/{name}_splitk{steps}.vkb"
            Path(path).write_bytes(bytes(compile_model(model, target=replace(TARGETS["nvidia"], splitk_min_steps=steps))))
            with load(path) as m:
                ms.append(statistics.median(m.bench(feeds, warmup=5, repeat=40)) * 1e3)
                dispatches.append(len(m.profile(feeds, repeat=1)))
        print(name, *[f"{t:.3f}" for t in ms], dispatches, flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sweep", choices=("tiles", "splitk"))
    {"tiles": tiles, "splitk": splitk}[ap.parse_args().sweep]()
