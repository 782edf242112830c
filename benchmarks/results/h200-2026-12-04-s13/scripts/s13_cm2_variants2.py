"""matmul_coopmat2 at 8192^3 and transformer shapes: the template as it is, with its sizes declared
as unsigned specialization constants (as the probe does), K steps unrolled 1, 4 or 8; plain MatMul
and Gemm with bias + Relu (the epilogue's second pass over the stored tile)."""
import json, re, sys
from dataclasses import replace
sys.path[:0] = ['benchmarks/h200', 'tests']
import compiler
import compiler.assemble as asm
from compiler import codegen
from compiler.targets import TARGETS
from coopmat import model, gemm_case
from onnx import helper
from runtime_min import load
import numpy as np

real = codegen.render
def uint_spec(src):
    return re.sub(r'const int (M|N|K|SA_M|SB_K|SB_N|SC_M) = 1;', r'const uint \1 = 1u;', src)
EDITS = {'as_is': lambda s: s, 'uint_spec': uint_spec}
RUNS = [((1576, 2304, 768), (128, 256, 32, 256, u), kind, 'as_is') for u in (1, 8) for kind in ('matmul', 'gemm_bias_relu')] + \
       [((128, 768, 768), (32, 64, 32, 128, 8), kind, 'as_is') for kind in ('matmul', 'gemm_bias_relu')]
for (m_, n_, k_), tile, kind, edit in RUNS:
    def render(kernel, edit=edit):
        src = real(kernel)
        return EDITS[edit](src) if kernel.template == 'matmul_coopmat2' else src
    asm.render = render
    if kind == 'matmul':
        onnx_model = model([helper.make_node('MatMul', ['X', 'W'], ['Y'])], [('X', [m_, k_]), ('W', [k_, n_])], 'Y', (), [m_, n_])
    else:
        onnx_model = gemm_case(m_, k_, n_, const_b=False)
    b = compiler.compile_model(onnx_model, target=replace(TARGETS['nvidia'], coopmat2_tile=tile), precision='fp16', io='fp16')
    if '--compile' in sys.argv:
        continue
    rng = np.random.default_rng(0)
    names = [i.name for i in onnx_model.graph.input]
    x = rng.standard_normal((m_, k_)).astype(np.float16)
    w = (rng.standard_normal((k_, n_)) / k_ ** .5).astype(np.float16)
    feeds = {names[0]: x, names[1]: w}
    with load(b) as vm:
        got = list(vm.run(feeds).values())[0].astype(np.float32)
        prof = vm.profile(feeds, repeat=10)
    rows = rng.choice(m_, 64, replace=False)
    ref = x[rows].astype(np.float32) @ w.astype(np.float32)
    us = sum(p.seconds for p in prof if 'coopmat2' in p.kernel) * 1e6
    err = float(np.linalg.norm(got[rows] - ref) / np.linalg.norm(ref)) if kind == 'matmul' else None
    print(json.dumps(dict(size=f'{m_}x{n_}x{k_}', tile=tile, kind=kind, edit=edit, us=round(us, 1),
                          tflops=round(2 * m_ * n_ * k_ / us / 1e6, 1), rel_rows=err)), flush=True)
