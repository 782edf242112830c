"""Plain `vkc compile` (DEFAULT_TARGETS) against --target host on this machine's lavapipe, host to
host: both bundles loaded, three interleaved rounds of 7 runs (median) after one warm-up each."""
import statistics, sys
sys.path[:0] = ["/work/main", "/work/main/tests", "/work/main/tests/models"]
import numpy as np
import zoo
from onnx_builders import mlp
from compiler import compile_model
from compiler.targets import DEFAULT_TARGETS
from runtime_min import load
models = {"mlp": mlp(784, 1024, 1024, 10), "mobilenet_v2": zoo.mobilenet_v2(fold_bn=True),
          "resnet18": zoo.resnet18(fold_bn=True), "shufflenet_v2": zoo.shufflenet_v2(fold_bn=True),
          "unet_small": zoo.unet_small(fold_bn=True)}
print(f"{'model':14s} {'host ms':>9s} {'default ms':>10s} {'default/host':>12s} {'MiB host':>9s} {'MiB default':>11s} picked")
for name, m in models.items():
    bundles = {"host": compile_model(m, target="host"), "default": compile_model(m, target=list(DEFAULT_TARGETS))}
    vms = {k: load(b) for k, b in bundles.items()}
    feeds = {i.name: np.random.default_rng(0).standard_normal(i.shape).astype(i.dtype) for i in vms["host"].inputs}
    times = {k: [] for k in vms}
    for _ in range(3):
        for k, vm in vms.items():
            times[k] += vm.bench(feeds, warmup=1, repeat=7)
    h, d = (statistics.median(times[k]) * 1e3 for k in ("host", "default"))
    print(f"{name:14s} {h:9.2f} {d:10.2f} {d / h:12.3f} {len(bundles['host']) / 2**20:9.2f} "
          f"{len(bundles['default']) / 2**20:11.2f} {vms['default'].target}", flush=True)
    for vm in vms.values():
        vm.close()
