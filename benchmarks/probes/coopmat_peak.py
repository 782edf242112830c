"""On the GPU machine: how fast can a Vulkan kernel multiply on the tensor cores at all? The
ceiling under vkc's fp16 GEMM (issue 11 asks for 60 % of cuBLAS at 8192^3; this says what the
cooperative-matrix extensions allow), measured three ways, each float16 x float16 -> float32:

    khr:SMxSN[:T]          VK_KHR_cooperative_matrix, 16x16x16 at subgroup scope: every subgroup
                           multiplies SM A by SN B fragments held in registers into SM x SN
                           accumulators, ITER times; no memory traffic but the final store
    khr-shared:WMxWNxSMxSN the same products with the fragments loaded from shared memory at every
                           K step as vkc's matmul_coopmat kernel does (WM x WN subgroups, tiles of
                           (WM*SM*16) x 64 A and 64 x (WN*SN*16) B, rows padded by 8): the ceiling of
                           that kernel's inner loop with global memory taken away
    nv:BMxBNxBK[:T]        VK_NV_cooperative_matrix2, one BM x BN x BK workgroup-scope product,
                           operands loaded once, ITER times

    GLSLC=... python3 -m benchmarks.probes.coopmat_peak khr:4x2 khr:4x4 khr-shared:2x4x4x2 nv:128x256x32

T is invocations a workgroup (default 256). Each line: TFLOP/s and its share of cuBLAS fp16 8192^3
timed in the same run (cublas_timing.cublas_ms, a CUDA graph of 20 products). Uses
coopmat2_probe.py's device (both extensions enabled) and its $GLSLC (glslang >= 15 for nv:).
"""
import json, os, sys, tempfile

import vulkan as vk

from benchmarks.cli import exit_on_help
from benchmarks.probes.coopmat2_probe import Gpu, compile_glsl, timer

HEAD = """#version 450
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_cooperative_matrix : require
{extra}
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint ITER = 1;
layout(std430, binding = 0) readonly buffer A_buf {{ float16_t A[]; }};
layout(std430, binding = 1) readonly buffer B_buf {{ float16_t B[]; }};
layout(std430, binding = 2) writeonly buffer C_buf {{ float C[]; }};
layout(std430, binding = 0) readonly buffer A_vec {{ uvec4 AV[]; }};
"""
FRAG_A = "coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>"
FRAG_B = "coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>"
ACC = "coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>"


def khr_source(sm: int, sn: int, shared: tuple | None) -> str:
    """SM x SN accumulators a subgroup; `shared` = (WM, WN): fragments reloaded from shared tiles
    of a WM x WN subgroup workgroup at every 16-deep step of a 64-deep K step."""
    accs = [(i, j) for i in range(sm) for j in range(sn)]
    body = [HEAD.format(extra="")]
    if shared:
        wm, wn = shared
        bm, bn, bk, pad = wm * sm * 16, wn * sn * 16, 64, 8
        a_stride, b_stride = (bk + pad) // 8, (bn + pad) // 8  # in uvec4s (8 float16)
        body.append(f"shared uvec4 As[{bm * a_stride}];\nshared uvec4 Bs[{bk * b_stride}];\n")
    body.append("void main() {\n    const uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;\n"
                "    const uint g = gl_WorkGroupID.x * gl_NumSubgroups + sg;\n")
    body += [f"    {ACC} acc_{i}_{j} = {ACC}(0.0);\n" for i, j in accs]
    if shared:
        body.append(f"    for (uint t = gl_LocalInvocationID.x; t < {bm * a_stride}; t += gl_WorkGroupSize.x) As[t] = AV[t % 64];\n"
                    f"    for (uint t = gl_LocalInvocationID.x; t < {bk * b_stride}; t += gl_WorkGroupSize.x) Bs[t] = AV[t % 64];\n"
                    f"    barrier();\n    const uint wm = sg / {wn}, wn = sg % {wn};\n"
                    "    for (uint it = 0; it < ITER; ++it) {\n"
                    f"        for (uint kk = 0; kk < {bk}; kk += 16) {{\n")
        for i in range(sm):
            body.append(f"            {FRAG_A} a_{i}; coopMatLoad(a_{i}, As, ((wm * {sm} + {i}) * 16 * {a_stride * 8} + kk) / 8, "
                        f"{a_stride}, gl_CooperativeMatrixLayoutRowMajor);\n")
        for j in range(sn):
            body.append(f"            {FRAG_B} b_{j}; coopMatLoad(b_{j}, Bs, (kk * {b_stride * 8} + (wn * {sn} + {j}) * 16) / 8, "
                        f"{b_stride}, gl_CooperativeMatrixLayoutRowMajor);\n")
        body += [f"            acc_{i}_{j} = coopMatMulAdd(a_{i}, b_{j}, acc_{i}_{j});\n" for i, j in accs]
        body.append("        }\n    }\n")
    else:
        body += [f"    {FRAG_A} a_{i}; coopMatLoad(a_{i}, A, {256 * i}, 16, gl_CooperativeMatrixLayoutRowMajor);\n"
                 for i in range(sm)]
        body += [f"    {FRAG_B} b_{j}; coopMatLoad(b_{j}, B, {256 * j}, 16, gl_CooperativeMatrixLayoutRowMajor);\n"
                 for j in range(sn)]
        body.append("    for (uint it = 0; it < ITER; ++it) {\n")
        body += [f"        acc_{i}_{j} = coopMatMulAdd(a_{i}, b_{j}, acc_{i}_{j});\n" for i, j in accs]
        body.append("    }\n")
    body += [f"    coopMatStore(acc_{i}_{j}, C, (g * {sm * sn} + {i * sn + j}) * 256, 16, gl_CooperativeMatrixLayoutRowMajor);\n"
             for i, j in accs]
    body.append("}\n")
    return "".join(body)


def nv_source(bm: int, bn: int, bk: int) -> str:
    wg = lambda use, r, c: f"coopmat<float16_t, gl_ScopeWorkgroup, {r}, {c}, {use}>"
    acc = f"coopmat<float, gl_ScopeWorkgroup, {bm}, {bn}, gl_MatrixUseAccumulator>"
    return HEAD.format(extra="#extension GL_NV_cooperative_matrix2 : require") + f"""
void main() {{
    tensorLayoutNV<2> ta = createTensorLayoutNV(2), tb = createTensorLayoutNV(2), tc = createTensorLayoutNV(2);
    ta = setTensorLayoutDimensionNV(ta, {bm}, {bk});
    tb = setTensorLayoutDimensionNV(tb, {bk}, {bn});
    tc = setTensorLayoutDimensionNV(tc, {bm} * gl_NumWorkGroups.x, {bn});
    {wg("gl_MatrixUseA", bm, bk)} a;
    {wg("gl_MatrixUseB", bk, bn)} b;
    coopMatLoadTensorNV(a, A, 0, sliceTensorLayoutNV(ta, 0, {bm}, 0, {bk}));
    coopMatLoadTensorNV(b, B, 0, sliceTensorLayoutNV(tb, 0, {bk}, 0, {bn}));
    {acc} c = {acc}(0.0);
    for (uint it = 0; it < ITER; ++it)
        c = coopMatMulAdd(a, b, c);
    coopMatStoreTensorNV(c, C, 0, sliceTensorLayoutNV(tc, gl_WorkGroupID.x * {bm}, {bm}, 0, {bn}));
}}
"""


def measure(gpu, code, threads: int, groups: int, iters: int, flops_per_group_iter: int, reps: int = 5) -> dict:
    bufs = [gpu.buffer(size, host=False)[0] for size in (1 << 20, 1 << 20, groups * (threads // 32) * 16 * 256 * 4 + (64 << 20))]
    pipe, layout, dset = gpu.pipeline(code, [threads, iters], 3)
    gpu.bind(dset, bufs)
    record, last_ms = timer(gpu, pipe, layout, dset, (groups, 1))
    for b in bufs[:2]:  # small finite operands (0x2000: 2^-7 in every float16)
        gpu.submit(lambda cmd, b=b: vk.lib.vkCmdFillBuffer(cmd, b, 0, 1 << 20, 0x20002000))
    gpu.submit(lambda cmd: record(cmd, 2))  # warm (clocks up)
    gpu.submit(lambda cmd: record(cmd, reps))
    ms = last_ms(reps)
    return dict(ms=ms, tflops=groups * iters * flops_per_group_iter / (ms * 1e-3) / 1e12)


def main(argv):
    specs = argv or ["khr:4x2", "khr:4x4", "khr-shared:2x4x4x2", "nv:128x256x32"]
    gpu = Gpu(coopmat2=True)
    try:
        from benchmarks.gpu.cublas_timing import cublas_ms
        cu_tflops = 2 * 8192 ** 3 / (cublas_ms(8192, 8192, 8192) * 1e-3) / 1e12
    except ImportError:
        cu_tflops = None
    print(json.dumps(dict(device=gpu.name, cublas_fp16_8192_tflops=cu_tflops)), flush=True)
    groups = 132 * 8  # several workgroups on each of the H200's 132 SMs
    for spec in specs:
        kind, _, rest = spec.partition(":")
        dims, _, t = rest.partition(":")
        dims = [int(v) for v in dims.split("x")]
        threads = int(t) if t else 256
        if kind == "khr":
            sm, sn = dims
            src, per_iter = khr_source(sm, sn, None), (threads // 32) * sm * sn * 2 * 16 ** 3
        elif kind == "khr-shared":
            wm, wn, sm, sn = dims
            threads = wm * wn * 32
            src, per_iter = khr_source(sm, sn, (wm, wn)), wm * wn * sm * sn * 2 * 16 ** 3 * 4  # 4 steps of 16 in K 64
        else:
            bm, bn, bk = dims
            src, per_iter = nv_source(bm, bn, bk), 2 * bm * bn * bk
        iters = max(64, int(4e12 / (groups * per_iter)))  # about 4 ms at 1000 TFLOP/s
        with tempfile.NamedTemporaryFile("w", suffix=".comp", delete=False) as f:
            f.write(src)
        try:
            r = measure(gpu, compile_glsl(f.name), threads, groups, iters, per_iter)
        except Exception as e:  # a shape the device or compiler refuses: say so and go on
            r = dict(error=f"{type(e).__name__}: {e}")
        finally:
            os.unlink(f.name)
            gpu.release()
        if cu_tflops and "tflops" in r:
            r["pct_of_cublas"] = 100 * r["tflops"] / cu_tflops
        print(json.dumps(dict(spec=spec, threads=threads, iters=iters, **r)), flush=True)


if __name__ == "__main__":
    exit_on_help(__doc__)
    main(sys.argv[1:])
