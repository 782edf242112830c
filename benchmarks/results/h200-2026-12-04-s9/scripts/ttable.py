"""Per-dispatch profile of a transformer (profile_sweep.transformer) at a precision on nvidia."""
import sys
from pathlib import Path
R = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(R), str(R / "benchmarks" / "h200"), str(R / "tests" / "models")]
from profile_sweep import transformer
from compiler.compile import compile_with_kernels
from runtime_min import load
from kernel_table import print_kernel_table
name, batch, precision = sys.argv[1], int(sys.argv[2]), sys.argv[3]
m, feeds = transformer(name, batch)
bundle, ks = compile_with_kernels(m, target="nvidia", precision=precision)
with load(bundle) as vm:
    prof = vm.profile(feeds, repeat=10)
print(name, batch, precision)
print_kernel_table(prof, top=12)
seen = set()
for p, k in zip(prof, ks):
    key = (p.kernel, k.groups, k.problem)
    if key in seen:
        continue
    seen.add(key)
    print(f"   {p.seconds*1e6:7.1f} us {p.kernel[:44]:44s} g{k.groups} {k.problem} BM{k.params.get('BM')} BN{k.params.get('BN')} BK{k.params.get('BK')} split{k.params.get('split_k')} {k.nodes[0][-40:]}")
