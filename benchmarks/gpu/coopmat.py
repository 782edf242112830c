"""On the GPU machine: the cooperative-matrix (tensor-core) kernels of fp16 bundles (issue 11), on
the `nvidia` profile (the H200's shape list), against float32 references and PyTorch fp16 timed in
the same run (TF32 off for the float32 references).

    python3 -m benchmarks.gpu.coopmat check                  # the device's coopmat list; fp16 GEMM,
                                                              # MatMul, Conv and attention cases vs
                                                              # onnxruntime fp32
    python3 -m benchmarks.gpu.coopmat check --sweep 0        # those cases on SWEEP entry 0's tiles
    python3 -m benchmarks.gpu.coopmat gemm 4096,8192 [sweep] # fp16 GEMM TFLOP/s vs torch (cuBLAS) fp16
                                                              # (sizes N or MxNxK; sweep: each
                                                              # workgroup tile of SWEEP), each kernel
                                                              # timed once the GPU is warm
    python3 -m benchmarks.gpu.coopmat check --coopmat2 [TILES]  # the GEMM and MatMul cases on each
                                                              # VK_NV_cooperative_matrix2 tile `vkc tune`
                                                              # tries, or TILES (VKC_COOPMAT2_GLSLC:
                                                              # glslang >= 15)
    python3 -m benchmarks.gpu.coopmat gemm 8192,128x768x768 coopmat2 [TILES]  # and those tiles' GEMM
                                                              # times (TILES: 0,3 or 128x256x64x256x4)
    python3 -m benchmarks.gpu.coopmat models resnet50:1,resnet50:32,mobilenet_v2:1,resnet18:1
                                                              # (name:batch:N: min_workgroups N)
    python3 -m benchmarks.gpu.coopmat ncnn-params DIR mobilenet_v2,resnet18
                                                              # no device: pnnx (pip) writes DIR/NAME.param
    python3 -m benchmarks.gpu.coopmat compile [models ...]   # no device: compile what `check` (and
        `models ...`) compile, to fill $VKC_CACHE_DIR's SPIR-V here and carry it there

Models are tests/models/zoo.py's (torchvision's architectures as the exporter writes them, BN folded,
random weights), compared with onnxruntime fp32; PyTorch runs torchvision's fp16 model as a CUDA graph,
host to host with float32 input and output as vkc's bundle. Where $NCNN_PARAMS holds NAME.param (pnnx's
conversion of the same ONNX, `ncnn-params` above), ncnn-Vulkan runs it too at batch 1 with its fp16
defaults (fp16 packed storage and arithmetic) on zero weights (DataReaderFromEmpty: the layer graph
alone decides its time), host to host: so the ncnn wheel (11 MB) is all the device needs, beside the
Vulkan and shader-toolchain carry.
"""
import json, os, statistics, sys, time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import compiler  # noqa: E402
from benchmarks.cli import exit_on_help  # noqa: E402
from bundles import read_bundle  # noqa: E402
from benchmarks.gpu.cublas_timing import cublas_ms  # noqa: E402
from benchmarks.gpu.kernel_table import print_kernel_table  # noqa: E402

TARGET = 'nvidia'
rng = np.random.default_rng(0)


def model(nodes, inputs, output, inits=(), out_shape=None):
    g = helper.make_graph(nodes, 'coopmat', [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                          [helper.make_tensor_value_info(output, TensorProto.FLOAT, out_shape)],
                          [numpy_helper.from_array(a, n) for n, a in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 17)])
    m.ir_version = 8
    return m


def w(*shape, scale=None):
    fan = shape[-1] if len(shape) == 2 else int(np.prod(shape[1:]))
    return (rng.standard_normal(shape) * (scale or 1 / np.sqrt(fan))).astype(np.float32)


def gemm_case(M, K, N, trans_a=0, trans_b=0, const_b=True, bias=True, act='Relu'):
    a_shape = [K, M] if trans_a else [M, K]
    b_shape = [N, K] if trans_b else [K, N]
    inputs, inits = [('A', a_shape)], []
    (inits if const_b else inputs).append(('B', w(*b_shape)) if const_b else ('B', b_shape))
    if bias:
        inits.append(('C', w(N, scale=0.1)))
    nodes = [helper.make_node('Gemm', ['A', 'B'] + (['C'] if bias else []), ['Y0'], transA=trans_a, transB=trans_b)]
    nodes.append(helper.make_node(act, ['Y0'], ['Y']) if act else helper.make_node('Identity', ['Y0'], ['Y']))
    return model(nodes, inputs, 'Y', inits, [M, N])


def matmul_case(batch, M, K, N, residual=True):
    nodes = [helper.make_node('MatMul', ['A', 'B'], ['Y0'])]
    if residual:
        nodes += [helper.make_node('Add', ['Y0', 'R'], ['Y1']), helper.make_node('Sigmoid', ['Y1'], ['Y'])]
    else:
        nodes.append(helper.make_node('Identity', ['Y0'], ['Y']))
    inputs = [('A', [batch, M, K]), ('B', [K, N])] + ([('R', [batch, M, N])] if residual else [])
    return model(nodes, inputs, 'Y', (), [batch, M, N])


def conv_case(n, cin, hw, cout, k, stride=1, pad=0, group=1, residual=False):
    o = (hw + 2 * pad - k) // stride + 1
    inits = [('W', w(cout, cin // group, k, k)), ('Bc', w(cout, scale=0.1))]
    nodes = [helper.make_node('Conv', ['X', 'W', 'Bc'], ['Y0'], kernel_shape=[k, k], strides=[stride] * 2,
                              pads=[pad] * 4, group=group)]
    inputs = [('X', [n, cin, hw, hw])]
    if residual:
        inputs.append(('R', [n, cout, o, o]))
        nodes.append(helper.make_node('Add', ['Y0', 'R'], ['Y1']))
        nodes.append(helper.make_node('Relu', ['Y1'], ['Y']))
    else:
        nodes.append(helper.make_node('Relu', ['Y0'], ['Y']))
    return model(nodes, inputs, 'Y', inits, [n, cout, o, o])


CASES = {
    'gemm_512_aligned': lambda: gemm_case(512, 512, 512),
    'gemm_ragged_1000x777x999': lambda: gemm_case(1000, 777, 999),
    'gemm_33x70x100_tiny_edges': lambda: gemm_case(33, 70, 100, act='Tanh'),
    'gemm_transA_transB_inputs': lambda: gemm_case(300, 256, 200, trans_a=1, trans_b=1, const_b=False, bias=False, act=None),
    'gemm_transB_input_ragged': lambda: gemm_case(129, 130, 131, trans_b=1, const_b=False),
    'gemm_splitk_64x4096x1024': lambda: gemm_case(64, 4096, 1024),
    'matmul_batched_residual_sigmoid': lambda: matmul_case(4, 100, 64, 200),
    'matmul_batched_plain_fp16store': lambda: matmul_case(3, 256, 128, 256, residual=False),
    'conv3x3_64_128_56': lambda: conv_case(1, 64, 56, 128, 3, pad=1),
    'conv7x7_s2_3_64_224_b2': lambda: conv_case(2, 3, 224, 64, 7, stride=2, pad=3),
    'conv1x1_256_64_14_residual': lambda: conv_case(1, 256, 14, 64, 1, residual=True),
    'conv1x1_512_2048_7': lambda: conv_case(1, 512, 7, 2048, 1),
    'conv3x3_s2_group2_128_28': lambda: conv_case(2, 128, 28, 128, 3, stride=2, pad=1, group=2),
}

# For the coopmat2 kernel, which needs 16-byte aligned rows: ragged tiles and K steps, B column-major
# (an input), batches; each must take it (`check --coopmat2`), as the GEMM and MatMul cases above
# whose rows allow it.
COOPMAT2_CASES = {
    'cm2_gemm_ragged_1000x776x1000': lambda: gemm_case(1000, 1000, 776),
    'cm2_gemm_transB_input_200x264x96': lambda: gemm_case(200, 96, 264, trans_b=1, const_b=False),
    'cm2_matmul_batched_residual': lambda: matmul_case(4, 100, 64, 200),
    'cm2_bert_out_projection_128x768x768': lambda: gemm_case(128, 768, 768, act=None),
}

# Attention (attention_coopmat.comp.j2) at BERT/GPT-2/ViT shapes and the kernel's other forms:
# additive padding and full masks, causal, head size 128, cross attention with unequal head
# sizes, onnxruntime's contrib Attention with an int32 key-padding mask (mask_kind "keep").
def _attention_cases():
    from tests.attention_models import causal_mask, contrib_attention, core_attention
    return {
        'attention_bert_b1_padding': lambda: core_attention(1, 12, 128, 64, k_transposed=False, mask_shape=[1, 1, 1, 128]),
        'attention_bert_b8_full_mask': lambda: core_attention(8, 12, 128, 64, k_transposed=False, mask_shape=[8, 1, 128, 128]),
        'attention_vit_b1': lambda: core_attention(1, 12, 197, 64, k_transposed=False),
        'attention_vit_b8': lambda: core_attention(8, 12, 197, 64, k_transposed=False),
        'attention_gpt2_causal_b8': lambda: core_attention(8, 12, 128, 64, k_transposed=False, mask_const=causal_mask(128, 128)),
        'attention_causal_d128': lambda: core_attention(2, 4, 100, 128, k_transposed=False, mask_const=causal_mask(100, 100)),
        'attention_cross_sk70_d32_dv48': lambda: core_attention(2, 2, 40, 32, sk=70, dv=48, k_transposed=False),
        'attention_contrib_keep_mask': lambda: contrib_attention(2, 77, 4, 64, mask=True),
    }


CASES.update(_attention_cases())
ZOO_BATCH = {}


def spec_target(spec):
    """'name:batch[:min_workgroups]' -> (name, batch, the nvidia profile, with min_workgroups if given)."""
    from dataclasses import replace
    from compiler.targets import TARGETS
    name, batch, *mw = spec.split(':')
    target = replace(TARGETS[TARGET], min_workgroups=int(mw[0])) if mw else TARGET
    return name, int(batch), target


def zoo_model(name, batch):
    from tests.models import zoo
    return getattr(zoo, name)(batch=batch, fold_bn=True)


def coopmat_modules(bundle):
    names = [m['name'] for m in read_bundle(bundle).manifest['modules']]
    return [n for n in names if n.startswith(('matmul_coopmat', 'attention_coopmat'))], names


def feeds_for(m):
    """Random normal inputs; an int32 mask keeps a prefix of keys per batch (the last batch
    fewer), a float [B, 1, 1, S] mask is 0 / finfo.min padding of the same kind."""
    rng = np.random.default_rng(1)
    feeds = {}
    for i in m.graph.input:
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        keep = (np.arange(shape[-1]) < shape[-1] - 3 * np.arange(shape[0])[:, None]) if i.name == 'mask' else None
        if i.type.tensor_type.elem_type == TensorProto.INT32:
            feeds[i.name] = keep.astype(np.int32)
        elif i.name == 'mask' and shape[1:3] == [1, 1]:
            feeds[i.name] = np.where(keep, 0, np.finfo(np.float32).min).astype(np.float32).reshape(shape)
        else:
            feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def ort(m, feeds):
    import onnxruntime as rt
    s = rt.InferenceSession(m.SerializeToString(), providers=['CPUExecutionProvider'])
    return s.run(None, feeds)[0]


def rel(a, b):
    return float(np.linalg.norm(a.astype(np.float64) - b) / np.linalg.norm(b))


def check(coopmat2=False, tiles='', sweep=None):
    """Every case on the profile's kernels; with coopmat2, the GEMM and MatMul cases on each
    coopmat2 tile instead (tiles: as coopmat2_tiles takes them; each must take a matmul_coopmat2 kernel);
    with sweep, on SWEEP entry `sweep`'s tiles."""
    from dataclasses import replace
    from compiler.host import coopmat2_shapes, host_target
    from runtime_min import list_devices
    for d in list_devices():
        print(json.dumps({'device': d.name, 'api': d.api_version, 'subgroup': d.subgroup_size,
                          'cooperative_matrix': d.cooperative_matrix,
                          'cooperative_matrix2': coopmat2_shapes(d)}), flush=True)
    from compiler.targets import TARGETS
    from runtime_min import load
    print('host profile', host_target(), flush=True)
    print('nvidia profile lists', TARGETS['nvidia'].cooperative_matrix, flush=True)
    runs = [(name, build, sweep_target(sweep) if sweep is not None else TARGET)
            for name, build in CASES.items()] if not coopmat2 else \
        [(f'{name} coopmat2 {"x".join(map(str, t))}', build, replace(TARGETS[TARGET], coopmat2_tile=t))
         for t in coopmat2_tiles(tiles)
         for name, build in {**CASES, **COOPMAT2_CASES}.items()
         if name.startswith(('gemm', 'matmul', 'cm2'))]
    bad = 0
    for name, build, target in runs:
        m = build()
        bundle = compiler.compile_model(m, target=target, precision='fp16')
        coop, names = coopmat_modules(bundle)
        # coopmat2's own cases must take it; the others where their rows allow it
        required = not coopmat2 or name.startswith('cm2_')
        if coopmat2:
            coop = [n for n in coop if n.startswith('matmul_coopmat2')]
        feeds = feeds_for(m)
        with load(bundle) as vm:
            got = vm.run(feeds)[m.graph.output[0].name]
        err = rel(got, ort(m, feeds))
        ok = err < 1e-2 and (bool(coop) or not required)
        bad += not ok
        print(json.dumps({'case': name, 'rel_l2': err, 'ok': ok, 'coopmat': coop,
                          'others': [n for n in names if n not in coop]}), flush=True)
    print('check:', 'all pass' if not bad else f'{bad} FAILED', flush=True)


# Workgroup tiles to compare (`gemm N sweep`): (subgroups along M, along N, accumulators per
# subgroup along M, along N), K step, elements per global load, shared-memory buffers.
SWEEP = [((2, 4, 4, 2), 32, 8, 2), ((4, 2, 2, 4), 32, 8, 2), ((2, 4, 4, 2), 32, 8, 1),
         ((2, 4, 4, 2), 64, 8, 1), ((4, 2, 4, 4), 32, 8, 1), ((2, 4, 4, 4), 32, 8, 1),
         ((2, 2, 4, 4), 64, 8, 1), ((4, 2, 2, 4), 64, 8, 1), ((4, 2, 2, 2), 64, 8, 1),
         ((4, 4, 2, 2), 32, 8, 1), ((2, 2, 2, 2), 64, 8, 1),
         # 11-14: half the invocations a workgroup, for two or more workgroups a core
         ((2, 2, 4, 2), 64, 8, 1), ((2, 2, 2, 4), 64, 8, 1), ((1, 4, 4, 2), 64, 8, 1), ((2, 2, 4, 2), 32, 8, 2),
         # 15-16: two K steps in flight (a Target field) on the large tiles. Tiles walked in groups of
         # 8 or 16 rows for L2 reuse gained 1-2 % at 8192^3 and were dropped.
         ((2, 4, 4, 2), 64, 8, 1, dict(coopmat_deep_prefetch=8)), ((2, 4, 4, 4), 32, 8, 1, dict(coopmat_deep_prefetch=8)),
         # Entry 0 with two K steps in flight, its next step written between its first fragments and
         # the rest (constant buffer indices), took 6.51 ms at 8192^3 against 4.03 for entry 3: dropped.
         # The two-buffer stash sits ahead of the products (entry 0: 166 -> 212 TFLOP/s).
         # 17: four subgroups of 4x4 accumulators, two workgroups an SM (tune's PAIRED_TILE); 18: the
         # 128x256 tile in K steps of 48 (a K that is a multiple of 48 keeps it whole).
         ((2, 2, 4, 4), 32, 8, 1, dict(coopmat_deep_prefetch=8)), ((2, 4, 4, 4), 48, 8, 1),
         ]


def sweep_target(i):
    """The nvidia profile with SWEEP entry i's tiles."""
    from dataclasses import replace
    from compiler.targets import TARGETS
    t, k, v, st, *rest = SWEEP[i]
    return replace(TARGETS[TARGET], coopmat_tiles=(t,), coopmat_k=k, coopmat_load=v, coopmat_stages=st,
                   **(rest[0] if rest else {}))


def sweep_label(i):
    t, k, v, st, *rest = SWEEP[i]
    return f'{t} k{k} load{v} stages{st}' + ''.join(f' {f}={x}' for f, x in (rest[0] if rest else {}).items())


def coopmat2_tiles(spec):
    """`0,3` (entries of COOPMAT2_TILES), `128x256x64x256x4` (BM x BN x BK x invocations x K steps a
    loop iteration) or a mix; empty: all of COOPMAT2_TILES."""
    from compiler.tune import COOPMAT2_TILES
    if not spec:
        return COOPMAT2_TILES
    return [tuple(int(v) for v in t.split('x')) if 'x' in t else COOPMAT2_TILES[int(t)] for t in spec.split(',')]


def gemm(sizes, sweep=False, coopmat2=False):
    import torch
    from dataclasses import replace
    from compiler.host import warm_up
    from compiler.targets import TARGETS
    from runtime_min import load
    torch.backends.cuda.matmul.allow_tf32 = False
    base = TARGETS[TARGET]
    targets = [(sweep_label(i), sweep_target(i)) for i in (range(len(SWEEP)) if sweep is True else sweep)] \
        if sweep else [('profile', base)]
    if coopmat2 is not False:
        targets += [(f'coopmat2 {t}', replace(base, coopmat2_tile=t)) for t in coopmat2_tiles(coopmat2)]
    for size, (label, target) in [(s, t) for s in sizes for t in targets]:
        rows, n, depth = (int(v) for v in size.split('x')) if 'x' in size else (int(size),) * 3
        m = model([helper.make_node('MatMul', ['X', 'W'], ['Y'])], [('X', [rows, depth]), ('W', [depth, n])], 'Y', (),
                  [rows, n])
        bundle = compiler.compile_model(m, target=target, precision='fp16', io='fp16')
        coop, _ = coopmat_modules(bundle)
        g = torch.Generator().manual_seed(0)
        x = torch.randn(rows, depth, generator=g).half()
        wt = (torch.randn(depth, n, generator=g) / depth ** 0.5).half()
        with load(bundle) as vm:
            feeds = {'X': x.numpy(), 'W': wt.numpy()}
            got = vm.run(feeds)['Y']
            warm_up(vm, feeds)
            prof = vm.profile(feeds, repeat=10)
        k = sum(p.seconds for p in prof)
        xc, wc = x.cuda(), wt.cuda()
        ref = (xc.float() @ wc.float()).cpu().numpy()
        err = rel(got.astype(np.float32), ref)
        t = cublas_ms(rows, n, depth) / 1e3
        vk_tf, cu_tf = 2 * rows * n * depth / k / 1e12, 2 * rows * n * depth / t / 1e12
        print(json.dumps({'gemm': size, 'tiles': label, 'kernels': coop, 'rel_l2_vs_torch_fp32': err, 'vkc_ms': k * 1e3,
                          'vkc_tflops': vk_tf, 'cublas_fp16_ms': t * 1e3, 'cublas_tflops': cu_tf,
                          'pct_of_cublas': 100 * vk_tf / cu_tf,
                          'dispatches': [(p.kernel, round(p.seconds * 1e3, 3)) for p in prof]}), flush=True)


def med(f, n=30, warm=5):
    for _ in range(warm):
        f()
    ts = []
    for _ in range(n):
        t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def torch_fp16_graph_ms(name, batch):
    import torch, torchvision
    net = getattr(torchvision.models, name)(weights=None).eval().cuda().half()
    xin = torch.randn(batch, 3, 224, 224).pin_memory()
    static_in = torch.empty(xin.shape, device='cuda')
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), torch.no_grad():
        for _ in range(3):
            net(static_in.half())
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g), torch.no_grad():
        static_out = net(static_in.half()).float()

    def graphed():
        static_in.copy_(xin, non_blocking=True); g.replay(); return static_out.cpu()
    return med(graphed) * 1e3


def ncnn_params(out_dir, names):
    import subprocess, tempfile
    import pnnx
    os.makedirs(out_dir, exist_ok=True)
    for name in names:
        with tempfile.TemporaryDirectory() as work:
            onnx.save(zoo_model(name, 1), os.path.join(work, 'm.onnx'))
            subprocess.run([pnnx.EXEC_PATH, 'm.onnx', 'inputshape=[1,3,224,224]', 'fp16=1'], cwd=work,
                           check=True, capture_output=True, timeout=600)
            os.replace(os.path.join(work, 'm.ncnn.param'), os.path.join(out_dir, f'{name}.param'))
        print('wrote', os.path.join(out_dir, f'{name}.param'), flush=True)


def ncnn_fp16_ms(name, x):
    import ncnn
    param = os.path.join(os.environ.get('NCNN_PARAMS', ''), f'{name}.param')
    if not os.environ.get('NCNN_PARAMS') or not os.path.exists(param):
        return None
    net = ncnn.Net()
    net.opt.use_vulkan_compute = True
    net.opt.use_fp16_packed = net.opt.use_fp16_storage = net.opt.use_fp16_arithmetic = True
    assert net.load_param(param) == 0 and net.load_model(ncnn.DataReaderFromEmpty()) == 0

    def run():
        ex = net.create_extractor()
        ex.input('in0', ncnn.Mat(np.ascontiguousarray(x[0])))
        return np.array(ex.extract('out0')[1])
    assert run().shape == (1000,)
    return med(run) * 1e3


def models(specs):
    from compiler.host import warm_up
    from runtime_min import load
    for spec in specs:
        name, batch, target = spec_target(spec)
        m = zoo_model(name, batch)
        t = time.perf_counter()
        bundle = compiler.compile_model(m, target=target, precision='fp16')
        tc = time.perf_counter() - t
        coop, names = coopmat_modules(bundle)
        feeds = feeds_for(m)
        with load(bundle) as vm:
            got = vm.run(feeds)['output']
            warm_up(vm, feeds)   # the GPU idled while the model compiled
            t_vkc = statistics.median(vm.bench(feeds, warmup=5, repeat=30)) * 1e3
            prof = vm.profile(feeds, repeat=5)
        err = rel(got, ort(m, feeds))
        try:
            t_torch = torch_fp16_graph_ms(name, batch)
        except Exception as e:  # noqa: BLE001
            t_torch = repr(e)[:200]
        try:
            t_ncnn = ncnn_fp16_ms(name, feeds['input']) if batch == 1 else None
        except Exception as e:  # noqa: BLE001
            t_ncnn = repr(e)[:200]
        row = dict(model=name, batch=batch, profile=spec, compile_s=round(tc, 1), rel_l2_vs_ort_fp32=err, vkc_fp16_ms=t_vkc,
                   torch_fp16_graph_ms=t_torch, ncnn_fp16_ms=t_ncnn, coopmat_modules=len(coop), modules=len(names))
        print(json.dumps(row), flush=True)
        print_kernel_table(prof, top=10, flops_unit='TFLOP/s', width=60)


def compile_only(specs):
    for name, build in CASES.items():
        compiler.compile_model(build(), target=TARGET, precision='fp16')
    for spec in specs:
        name, batch, target = spec_target(spec)
        compiler.compile_model(zoo_model(name, batch), target=target, precision='fp16')


if __name__ == '__main__':
    exit_on_help(__doc__)
    what = sys.argv[1] if len(sys.argv) > 1 else 'check'
    arg = sys.argv[2] if len(sys.argv) > 2 else ''
    if what == 'check':
        picks = [a for a in sys.argv[2:] if a[:1].isdigit()]  # `check --coopmat2 2,3`: those tiles only
        at = sys.argv.index('--sweep') if '--sweep' in sys.argv else None  # `check --sweep 0`: entry 0's tiles
        check(coopmat2='--coopmat2' in sys.argv[2:], tiles=picks[0] if picks and at is None else '',
              sweep=int(sys.argv[at + 1]) if at is not None else None)
    elif what == 'gemm':
        picks = sys.argv[4] if len(sys.argv) > 4 and sys.argv[3] == 'sweep' else ''  # `sweep 0,3`: those entries
        gemm((arg or '2048,4096,8192').split(','),
             sweep='sweep' in sys.argv[3:] and ([int(i) for i in picks.split(',')] if picks else True),
             coopmat2=next((sys.argv[i + 1] if i + 1 < len(sys.argv) else '' for i in range(3, len(sys.argv))
                            if sys.argv[i] == 'coopmat2'), False))
    elif what == 'models':
        models((arg or 'resnet50:1,resnet50:32,mobilenet_v2:1,resnet18:1').split(','))
    elif what == 'ncnn-params':
        ncnn_params(arg, sys.argv[3].split(','))
    elif what == 'compile':
        compile_only([s for s in arg.split(',') if s])
    else:
        sys.exit(__doc__)
