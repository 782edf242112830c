"""benchmarks/h200/coopmat.py gemm with the cooperative-matrix loop unrolls switched on."""
import runpy, sys
from pathlib import Path
R = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(R)]
import compiler.lower.matmul as mm
mm.COOPMAT_UNROLL_LOADS = mm.COOPMAT_UNROLL_EPILOGUE = True
sys.argv = ["coopmat.py", "gemm", sys.argv[1]]
runpy.run_path(str(R / "benchmarks" / "h200" / "coopmat.py"), run_name="__main__")
