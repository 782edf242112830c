"""Every `vkc tune` candidate (KHR only: no VKC_COOPMAT2_GLSLC) timed on each matmul problem of
the given transformers at batch 1, fp16, nvidia profile: one JSON line per problem with each
candidate's ms, the profile's own first."""
import json, os, sys
from pathlib import Path
R = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(R), str(R / "benchmarks" / "h200")]
os.environ.pop("VKC_COOPMAT2_GLSLC", None)
from profile_sweep import cnn, transformer
from compiler.targets import TARGETS
from compiler.tune import candidates, measure
base = TARGETS["nvidia"]
for spec in sys.argv[1].split(","):
    name, batch = spec.split(":")
    m, _ = transformer(name, int(batch)) if name in ("bert", "gpt2", "vit") else cnn(name)
    fields = [{}] + (candidates(base, "fp16", log=lambda _: None) if len(sys.argv) < 3 else eval(sys.argv[2]))
    _, measured = measure(m, base, fields, precision="fp16", repeat=7, log=lambda s: print(s, file=sys.stderr))
    for problem in measured[0]:
        print(json.dumps({"model": spec, "problem": problem,
                          "ms": [[str(f or "profile"), round(mm[problem] * 1e3, 4)] for f, mm in zip(fields, measured)]}),
              flush=True)
