"""The same bundle profiled cold (after 3 s idle) and warm (after 0.3 s of runs), with the SM clock
nvidia-smi reports just before each: KHR profile and coopmat2 tiles at 1576x2304x768 and 8192^3."""
import subprocess, sys, time
from dataclasses import replace
from pathlib import Path
R = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(R), str(R / "benchmarks" / "h200"), str(R / "tests"), str(R / "tests" / "models")]
import numpy as np
from onnx import helper
import compiler
from compiler.host import warm_up
from compiler.targets import TARGETS
from coopmat import model
from runtime_min import load
clock = lambda: subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm", "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
base = TARGETS["nvidia"]
for rows, n, depth in ((1576, 2304, 768), (8192, 8192, 8192)):
    m = model([helper.make_node('MatMul', ['X', 'W'], ['Y'])], [('X', [rows, depth]), ('W', [depth, n])], 'Y', (), [rows, n])
    for label, target in (("khr", base), ("cm2 u8", replace(base, coopmat2_tile=(128, 256, 32, 256, 8)))):
        bundle = compiler.compile_model(m, target=target, precision='fp16', io='fp16')
        rng = np.random.default_rng(0)
        feeds = {'X': rng.standard_normal((rows, depth)).astype(np.float16), 'W': (rng.standard_normal((depth, n)) / depth ** 0.5).astype(np.float16)}
        with load(bundle) as vm:
            vm.run(feeds)
            for state in ("cold", "warm", "cold", "warm"):
                if state == "cold":
                    time.sleep(3)
                else:
                    warm_up(vm, feeds)
                c = clock()
                ms = sum(p.seconds for p in vm.profile(feeds, repeat=10)) * 1e3
                print(f"{rows}x{n}x{depth} {label:7s} {state}: {ms:.4f} ms (SM clock before: {c})", flush=True)
