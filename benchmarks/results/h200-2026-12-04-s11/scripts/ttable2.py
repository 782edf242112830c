"""Per-dispatch GPU time of a transformer per profile variant (profile_variants.VARIANTS), grouped by kernel and shape."""
import sys, collections, statistics
from pathlib import Path
R = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(R), str(R / "benchmarks" / "h200"), str(R / "tests" / "models")]
from profile_variants import model_and_feeds, variant_target
from compiler.compile import compile_with_kernels
from runtime_min import load
name, batch, precision = sys.argv[1], int(sys.argv[2]), sys.argv[3]
m, feeds = model_and_feeds(name, batch)
for v in sys.argv[4].split(","):
    bundle, ks = compile_with_kernels(m, target=variant_target(v), precision=precision)
    with load(bundle) as vm:
        runs = [vm.profile(feeds, repeat=1) for _ in range(10)]
        wall = statistics.median(vm.bench(feeds, warmup=5, repeat=30))
    per = [statistics.median(r[i].seconds for r in runs) for i in range(len(runs[0]))]
    groups = collections.OrderedDict()
    for sec, p, k in zip(per, runs[0], ks):
        key = (p.kernel[:40], k.groups, k.params.get('BK'), k.params.get('split_k'))
        groups.setdefault(key, []).append(sec)
    print(f"== {name} b{batch} {precision} {v}: wall {wall*1e3:.3f} ms, GPU {sum(per)*1e3:.3f} ms, {len(per)} dispatches")
    for key, secs in sorted(groups.items(), key=lambda kv: -sum(kv[1])):
        print(f"   {len(secs):3d} x {statistics.median(secs)*1e6:6.1f} us = {sum(secs)*1e6:7.1f}  {key}")
