"""vkc's compiler: ONNX -> IR -> passes -> lowering -> SPIR-V -> schedule + memory -> .vkb."""
from .compile import compile_model
from .errors import CompileError, UnsupportedOpsError

__all__ = ["compile_model", "CompileError", "UnsupportedOpsError"]
