"""Compile the GEMM bundles the H200 run times (both operands are inputs, so the bundles stay
small enough to carry): the nvidia profile at 256..4096, and two fixed tilings at 4096 that
show why the profile uses 128x64 tiles. Run here (needs the compiler): writes out/h200/gemm_*.vkb."""
import os
import dataclasses, sys
from onnx import helper
import compiler
from compiler.targets import TARGETS
def chain_model(n, depth):
    nodes, prev = [], 'x'
    for i in range(depth):
        out = 'y' if i == depth - 1 else f'h{i}'
        nodes.append(helper.make_node('MatMul', [prev, 'w'], [out])); prev = out
    g = helper.make_graph(nodes, 'gemm_chain',
        [helper.make_tensor_value_info('x', 1, [n, n]), helper.make_tensor_value_info('w', 1, [n, n])],
        [helper.make_tensor_value_info('y', 1, [n, n])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid('', 13)])
configs = {
  'default': dict(),
  'r128x128x16_8x8': dict(tile_m=128, tile_n=128, reg_m=8, reg_n=8, tile_k=16, min_workgroups=1),
  'r128x64x32_8x4': dict(tile_m=128, tile_n=64, reg_m=8, reg_n=4, tile_k=32, min_workgroups=1),
}
os.makedirs('out/h200', exist_ok=True)
for name, cfg in configs.items():
    t = dataclasses.replace(TARGETS['nvidia'], **cfg)
    for n in ((256, 512, 1024, 2048, 4096) if name == 'default' else (4096,)):
        open(f'out/h200/gemm_{n}_1_{name}.vkb', 'wb').write(compiler.compile_model(chain_model(n, 1), target=t))
