"""matmul_coopmat2 as it is now: a plain MatMul (no epilogue) and a Gemm with bias and Relu (the
per-element epilogue), at 8192^3 and transformer shapes, on the tiles the probe found best."""
import json, sys
from dataclasses import replace
sys.path[:0] = ['benchmarks/h200', 'tests']
import compiler
from compiler.targets import TARGETS
from coopmat import model, gemm_case
from onnx import helper
from runtime_min import load
import numpy as np

for (m_, n_, k_), tile in [((8192, 8192, 8192), (128, 256, 32, 256, 8)), ((128, 768, 768), (32, 64, 32, 128, 8)),
                           ((1576, 2304, 768), (128, 256, 32, 256, 8)), ((128, 2304, 768), (64, 64, 32, 128, 8))]:
    for kind in ('matmul', 'gemm_bias_relu'):
        if kind == 'matmul':
            onnx_model = model([helper.make_node('MatMul', ['X', 'W'], ['Y'])], [('X', [m_, k_]), ('W', [k_, n_])], 'Y', (), [m_, n_])
        else:
            onnx_model = gemm_case(m_, k_, n_, const_b=False)
        b = compiler.compile_model(onnx_model, target=replace(TARGETS['nvidia'], coopmat2_tile=tile), precision='fp16', io='fp16')
        rng = np.random.default_rng(0)
        names = [i.name for i in onnx_model.graph.input]
        feeds = {names[0]: rng.standard_normal((m_, k_)).astype(np.float16), names[1]: (rng.standard_normal((k_, n_)) / k_ ** .5).astype(np.float16)}
        with load(b) as vm:
            got = vm.run(feeds)
            prof = vm.profile(feeds, repeat=10)
        us = sum(p.seconds for p in prof if 'coopmat2' in p.kernel) * 1e6
        print(json.dumps(dict(size=f'{m_}x{n_}x{k_}', tile=tile, kind=kind, us=round(us, 1),
                              tflops=round(2 * m_ * n_ * k_ / us / 1e6, 1), kernels=[p.kernel for p in prof])), flush=True)
