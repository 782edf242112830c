"""On the GPU machine: time every out/h200/gemm_*.vkb (host to host, and the kernel alone from
timestamp queries) and cuBLAS SGEMM through torch with TF32 off, in the same run."""
import glob, time, numpy as np, sys, os, collections
from runtime_min import load, list_devices
print([str(d) for d in list_devices()])
res = collections.defaultdict(dict)
for f in sorted(glob.glob('out/h200/gemm_*.vkb')):
    _, n, depth, name = os.path.basename(f)[:-4].split('_', 3)
    n, depth = int(n), int(depth)
    m = load(f)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((n, n)).astype(np.float32)
    W = (rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)
    y = m.run({'x': x, 'w': W})['y']
    if depth == 1 and n <= 2048:
        ref = x @ W; print(f, 'err', np.linalg.norm(y - ref) / np.linalg.norm(ref))
    ts = m.bench({'x': x, 'w': W}, warmup=2, repeat=5)
    prof = m.profile({'x': x, 'w': W}, repeat=5)
    res[(n, name)] = {'h2h': np.median(ts), 'k': sum(p.seconds for p in prof)}
    m.close()
for (n, name), d in sorted(res.items()):
    print(f'{n:5d} {name:22s} host-to-host {d["h2h"]*1e3:8.2f} ms  kernel {d["k"]*1e3:8.3f} ms  {2*n**3/d["k"]/1e12:6.2f} TFLOP/s')
try:
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    for n in (1024, 2048, 4096):
        a = torch.randn(n, n, device='cuda'); b = torch.randn(n, n, device='cuda')
        for _ in range(3): a @ b
        torch.cuda.synchronize(); t = time.perf_counter()
        for _ in range(20): a @ b
        torch.cuda.synchronize(); t = (time.perf_counter() - t) / 20
        print('torch', n, f'{t*1e3:.3f} ms {2*n**3/t/1e12:.2f} TFLOP/s')
except Exception as e:
    print('torch failed', e)
