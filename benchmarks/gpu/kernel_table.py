"""The per-kernel summary the H200 scripts print after a run: Model.profile's dispatches grouped by
kernel (epilogue variants together), the heaviest first, with their throughput."""


def print_kernel_table(prof, top: int, flops_unit: str = "GFLOP/s", width: int = 55) -> None:
    scale = {"GFLOP/s": 1e9, "TFLOP/s": 1e12}[flops_unit]
    by = {}
    for p in prof:
        entry = by.setdefault(p.kernel.split('_epilogue')[0], [0, 0, 0])
        entry[0] += p.seconds; entry[1] += p.flops; entry[2] += 1
    print(f'  GPU total {sum(p.seconds for p in prof) * 1e3:.3f} ms over {len(prof)} dispatches', flush=True)
    for k, (sec, fl, cnt) in sorted(by.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f'    {k:{width}s} x{cnt:3d} {sec * 1e3:8.3f} ms {fl / max(sec, 1e-12) / scale:9.1f} {flops_unit}', flush=True)
