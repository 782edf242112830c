"""`vkc tune`: candidates timed on the local device, the fastest kept per matmul problem, and
`--target host` compiles read the choice back."""
from __future__ import annotations

import json

from compiler.compile import compile_with_kernels
from compiler.host import resolve_target
from compiler.tune import CANDIDATES, tune
from harness import check_against_onnxruntime
from onnx_builders import small_cnn


def test_tune_stores_one_choice_per_problem_and_host_compiles_use_it(tmp_path, monkeypatch):
    monkeypatch.setenv("VKC_CACHE_DIR", str(tmp_path))
    model = small_cnn()
    choice = tune(model, target="host", repeat=1, log=lambda _: None)

    _, kernels = compile_with_kernels(model, target="host")
    problems = {k.problem for k in kernels if k.problem}
    assert problems and set(choice) == problems
    base = resolve_target("host")
    assert all(fields in CANDIDATES[base.matmul] for fields in choice.values())
    stored = json.loads((tmp_path / "tuning.json").read_text())
    assert list(stored) == [base.name.removeprefix("host:")]

    # Each problem's kernel is built from its own stored candidate.
    for kernel in kernels:
        if kernel.problem and kernel.template == "matmul_register":
            fields = choice[kernel.problem]
            assert kernel.local_size[0] == fields["cpu_lanes"]
    check_against_onnxruntime(model, target="host")
