"""cuBLAS (torch) GEMM time on the GPU machine, for the scripts that set vkc's kernels beside it."""
import statistics


def cublas_ms(m: int, n: int, k: int, dtype="float16", reps: int = 20, rounds: int = 20) -> float:
    """Milliseconds of one [m, k] x [k, n] product: reps products captured in one CUDA graph and
    replayed between two events, median of `rounds` replays. Launched one by one, even 20 products
    time PyTorch's launches at small sizes (18-37 us for 128x768x768). TF32 off for float32."""
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    a = torch.randn(m, k, device="cuda", dtype=getattr(torch, dtype))
    b = torch.randn(k, n, device="cuda", dtype=getattr(torch, dtype))
    side = torch.cuda.Stream()  # warm-up off the capturing stream, as CUDA graph capture wants
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            a @ b
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(reps):
            a @ b
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(rounds):
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / reps)
    return statistics.median(times)
