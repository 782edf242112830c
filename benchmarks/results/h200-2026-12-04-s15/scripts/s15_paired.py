"""The profile's own tiles against tune's WIDE_TILE and PAIRED_TILE on every matmul problem of ResNet-50
b32 and ViT-B/16 b8, fp16, nvidia profile (compiler.tune.measure: warm, per problem): whether the
8192^3 gains carry to a model's large products."""
import json, os, sys
from pathlib import Path
R = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(R), str(R / "benchmarks" / "h200"), str(R / "tests" / "models")]
os.environ.pop("VKC_COOPMAT2_GLSLC", None)
from compiler.targets import TARGETS
from compiler.tune import PAIRED_TILE, WIDE_TILE, measure
base = TARGETS["nvidia"]
fields = [{}, WIDE_TILE, PAIRED_TILE]
for spec in sys.argv[1].split(","):
    name, batch = spec.split(":")
    if name == "vit":
        from profile_sweep import transformer
        m, _ = transformer(name, int(batch))
    else:
        import zoo
        m = getattr(zoo, name)(batch=int(batch), fold_bn=True)
    _, measured = measure(m, base, fields, precision="fp16", repeat=7, log=lambda s: print(spec, s, flush=True))
    for problem in measured[0]:
        print(json.dumps({"model": spec, "problem": problem,
                          "ms": [round(mm.get(problem, float("nan")) * 1e3, 4) for mm in measured]}), flush=True)
