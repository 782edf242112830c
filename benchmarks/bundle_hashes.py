"""Did a refactor change what the compiler writes? sha256 of the bundles of a fixed set of models
(the test builders' MLP, small CNN and MobileNetV2 block, the onnx wheel's SqueezeNet, and seven
zoo CNNs at 64x64) for every named profile, written as JSON; a second run on another tree, with
--compare, lists the bundles that differ.

    python benchmarks/bundle_hashes.py out/before.json                        # at the old commit
    python benchmarks/bundle_hashes.py out/after.json --compare out/before.json
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "models")]

import onnx_builders as builders  # noqa: E402
import zoo  # noqa: E402
from compiler import compile_model  # noqa: E402

TARGETS = ("generic", "lavapipe", "nvidia", "mobile")
ZOO = ("mobilenet_v2", "efficientnet_b0", "resnet50", "shufflenet_v2", "unet_small",
       "mobilenet_v3_small")


def models() -> dict:
    found = {"mlp": lambda: builders.mlp(64, 128, 10), "small_cnn": builders.small_cnn,
             "mobilenetv2_block": builders.mobilenetv2_block,
             "resnet18_64": lambda: zoo.resnet18(resolution=64),
             "light_squeezenet": lambda: builders.light_model("squeezenet")}
    for name in ZOO:
        found[f"{name}_64"] = lambda make=getattr(zoo, name): make(resolution=64)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="JSON file to write: {model/target: sha256 or error}")
    parser.add_argument("--compare", help="an earlier JSON to compare with")
    args = parser.parse_args()
    hashes = {}
    for name, make in models().items():
        model = make()
        for target in TARGETS:
            try:
                hashes[f"{name}/{target}"] = hashlib.sha256(compile_model(model, target=target)).hexdigest()
            except Exception as exc:  # noqa: BLE001 - recorded: a model that stops compiling is a change
                hashes[f"{name}/{target}"] = f"error: {type(exc).__name__}: {str(exc)[:200]}"
            print(f"{name}/{target} {hashes[f'{name}/{target}'][:16]}", file=sys.stderr, flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(hashes, indent=1, sort_keys=True) + "\n")
    if args.compare:
        before = json.loads(Path(args.compare).read_text())
        differ = sorted(k for k in before.keys() | hashes.keys() if before.get(k) != hashes.get(k))
        print(f"{len(hashes) - len(differ)} of {len(hashes)} bundles byte-identical"
              + (f"; differ: {', '.join(differ)}" if differ else ""))
        return 1 if differ else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
