"""Errors the compiler raises: each message names the problem and the fix."""


class CompileError(ValueError):
    """The model cannot be compiled as given."""


class UnsupportedOpsError(CompileError):
    """The model uses ops vkc does not implement; `ops` maps op type -> node names."""

    def __init__(self, ops: dict[str, list[str]]):
        self.ops = ops
        lines = [f"  {op}: {', '.join(names)}" for op, names in sorted(ops.items())]
        super().__init__(
            f"the model uses {len(ops)} op type(s) vkc does not support "
            f"({sum(len(n) for n in ops.values())} node(s)):\n" + "\n".join(lines)
            + "\nRun `vkc check model.onnx` for the full support table; replace these ops "
            "or file an issue naming them."
        )
