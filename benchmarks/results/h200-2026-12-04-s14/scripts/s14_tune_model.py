"""vkc tune --precision fp16 on a transformer (argv: name batch) (the tuning cache --target host reads), then the
nvidia and host bundles timed host to host in one process."""
import statistics, sys, time
from pathlib import Path
R = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(R), str(R / "benchmarks" / "h200")]
from profile_sweep import transformer
import compiler
from compiler.tune import tune
from compiler.host import warm_up
from runtime_min import load
m, feeds = transformer(sys.argv[1], int(sys.argv[2]))
t0 = time.time()
choice = tune(m, target="host", precision="fp16", repeat=5)
print(f"tuned {len(choice)} problems in {time.time() - t0:.0f} s")
for problem, fields in sorted(choice.items()):
    print("  ", problem, fields)
for target in ("nvidia", "host", "nvidia", "host"):
    with load(compiler.compile_model(m, target=target, precision="fp16")) as vm:
        warm_up(vm, feeds, 0.5)
        ms = statistics.median(vm.bench(feeds, warmup=5, repeat=50)) * 1e3
        gpu = sum(p.seconds for p in vm.profile(feeds, repeat=5)) * 1e3
    print(f"{target:7s} host-to-host {ms:.3f} ms  GPU {gpu:.3f} ms")
