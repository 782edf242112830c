#!/usr/bin/env python3
"""Issue 3's per-model table: relative L2 error of vkc against onnxruntime on random inputs, for
every model the issue names, at full size with random weights, on the local Vulkan device.

    python benchmarks/model_errors.py [--targets generic,lavapipe] [--models resnet18,light:vgg19]

Zoo models (tests/models/zoo.py: PyTorch-export graph forms) at 224x224, and the onnx wheel's light
models with their weights made random. Each compiled bundle goes through spirv-val and the runtime
runs under the validation layer (tests/harness.py), so a message from either is a failure too.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "models")]

import zoo  # noqa: E402
from harness import check_against_onnxruntime  # noqa: E402
from onnx_builders import light_model  # noqa: E402

MODELS = {
    "mobilenet_v2": lambda: zoo.mobilenet_v2(),
    "mobilenet_v3_small": lambda: zoo.mobilenet_v3_small(),
    "resnet18": lambda: zoo.resnet18(),
    "resnet50": lambda: zoo.resnet50(),
    "efficientnet_b0": lambda: zoo.efficientnet_b0(),
    "shufflenet_v2": lambda: zoo.shufflenet_v2(),
    "unet_small": lambda: zoo.unet_small(),
    **{f"light:{n}": (lambda n=n: light_model(n)) for n in
       ("squeezenet", "resnet50", "shufflenet", "inception_v1", "inception_v2", "densenet121",
        "bvlc_alexnet", "zfnet512", "vgg19")},
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", default="generic,lavapipe")
    ap.add_argument("--models", default=",".join(MODELS))
    args = ap.parse_args()
    targets = args.targets.split(",")
    print(f"{'model':22s} " + " ".join(f"{t:>12s}" for t in targets) + "   (relative L2 vs onnxruntime)")
    worst = 0.0
    for name in args.models.split(","):
        model = MODELS[name]()
        cells = []
        for target in targets:
            start = time.time()
            errors = check_against_onnxruntime(model, target=target, rtol_l2=1e-4)["errors"]
            err = max(errors.values())
            worst = max(worst, err)
            cells.append(f"{err:12.1e}")
            print(f"  ({name} on {target}: {time.time() - start:.0f} s)", file=sys.stderr)
        print(f"{name:22s} " + " ".join(cells), flush=True)
    print(f"worst {worst:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
