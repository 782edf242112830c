"""`vkc tune`: candidates timed on the local device, the fastest kept per matmul problem, and
compiles read the choice back (Target.tuned), per problem.

Each profile CI compiles for is covered: `--target host` on lavapipe (texel matmuls, tuned for
real on the device), and the GPU profiles' tiled matmuls with a fabricated tuning (no GPU needed:
applying a choice is compile-time work). Every per-kernel loop counts the kernels it checked, so
a profile that stops producing the kernels cannot pass by checking nothing.
"""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from compiler.compile import compile_with_kernels
from compiler.host import resolve_target
from compiler.targets import get_target
from compiler.tune import CANDIDATES, tune
from tests.harness import check_against_onnxruntime
from tests.onnx_builders import mlp, small_cnn


def _spec(kernel) -> dict:
    return {name: value for name, _, value in kernel.spec}


def _tuned(choice: dict[str, dict]) -> tuple:
    """{problem: fields} as Target.tuned holds it (what compiler.tune.load_tuning returns)."""
    return tuple((problem, tuple(sorted(fields.items()))) for problem, fields in choice.items())


def _shape(kernel) -> tuple:
    return kernel.template, kernel.params, kernel.groups, kernel.local_size


def _by_problem(kernels) -> dict[str, list[tuple]]:
    out: dict[str, list[tuple]] = {}
    for k in kernels:
        if k.problem:
            out.setdefault(k.problem, []).append(_shape(k))
    return out


def _assert_texel_follows(kernel, fields: dict) -> None:
    """A matmul_texel kernel's tile is the one cpu_rows / cpu_cols / cpu_lanes give for its
    M x N (compiler/lower/matmul.py, _texel_params): LX lanes a workgroup, TM rows (whole
    texels of four rows in m4 mode, dividing M), TN texel columns (no more than the lanes have)."""
    s, p = _spec(kernel), kernel.params
    M, N = s["M"], s["N"]
    assert kernel.local_size == (fields["cpu_lanes"], 1, 1), (kernel.problem, fields)
    assert p["LX"] == fields["cpu_lanes"], (kernel.problem, fields)
    tm = min(fields["cpu_rows"], M)
    if p["A_MODE"] == "m4":
        while M % tm:
            tm -= 4
    assert p["TM"] == tm, (kernel.problem, fields, p)
    cols = -(-N // p["B_VEC"])
    tn = min(fields["cpu_cols"] if p["B_VEC"] == 4 else 4 * fields["cpu_cols"], -(-cols // p["LX"]))
    assert p["TN"] == tn, (kernel.problem, fields, p)
    assert kernel.groups[:2] == (-(-cols // (p["LX"] * tn)), -(-M // tm)), (kernel.problem, kernel.groups)


def test_tune_stores_one_choice_per_problem_and_host_compiles_use_it(tmp_path, monkeypatch):
    monkeypatch.setenv("VKC_CACHE_DIR", str(tmp_path))
    model = small_cnn()
    base = resolve_target("host")
    choice = tune(model, target="host", repeat=1, log=lambda _: None)

    _, kernels = compile_with_kernels(model, target="host")
    problems = {k.problem for k in kernels if k.problem}
    assert problems and set(choice) == problems
    # {}: the profile's own tiles were the fastest (the tuner measures them too)
    assert all(fields == {} or fields in CANDIDATES[base.matmul] for fields in choice.values())
    stored = json.loads((tmp_path / "tuning.json").read_text())
    assert list(stored) == [base.name.removeprefix("host:")]
    assert sorted(resolve_target("host").tuned) == sorted(_tuned(choice))

    # Each problem's kernels are exactly what its own stored candidate gives when applied to the
    # whole model (how tune() measured it).
    untuned = replace(resolve_target("host"), tuned=())
    direct = {}
    for fields in {json.dumps(f, sort_keys=True) for f in choice.values()}:
        _, ks = compile_with_kernels(model, target=replace(untuned, **json.loads(fields)))
        direct[fields] = _by_problem(ks)
    checked = 0
    host = _by_problem(kernels)
    for problem, shapes in host.items():
        assert shapes == direct[json.dumps(choice[problem], sort_keys=True)][problem], problem
    for kernel in kernels:
        if kernel.problem and kernel.template == "matmul_texel" and choice[kernel.problem]:
            _assert_texel_follows(kernel, choice[kernel.problem])
            checked += 1
    if base.matmul == "texel":  # lavapipe, as on CI
        # (the fabricated tunings below check kernels follow candidates where the profile's own won)
        assert checked >= 1 or not any(choice.values()), \
            f"no matmul_texel kernel on {base.name}: {sorted({k.template for k in kernels})}"
    check_against_onnxruntime(model, target="host")


# ---- applying a tuning without a device: a fabricated Target.tuned -------------------------------

MODELS = {"small_cnn": small_cnn, "mlp_batch32": lambda: mlp(64, 96, 40, 10, batch=32)}


def _fabricate(base, model, candidates) -> tuple[dict[str, dict], list]:
    """A different candidate for each problem of the model (round robin), and the untuned kernels."""
    _, kernels = compile_with_kernels(model, target=base)
    problems = sorted({k.problem for k in kernels if k.problem})
    assert problems, f"{base.name}: no matmul problem in the model"
    return {p: candidates[i % len(candidates)] for i, p in enumerate(problems)}, kernels


@pytest.mark.parametrize("model_name", MODELS)
def test_texel_kernels_follow_a_fabricated_tuning(model_name):
    """lavapipe profile: each problem gets its own texel candidate, none of them the profile's
    own defaults, so a tuning that is ignored (or applied to the wrong problem) shows."""
    base = get_target("lavapipe")
    assert base.matmul == "texel"
    defaults = dict(cpu_rows=base.cpu_rows, cpu_cols=base.cpu_cols, cpu_lanes=base.cpu_lanes)
    candidates = [f for f in CANDIDATES["texel"] if f != defaults]
    choice, untuned_kernels = _fabricate(base, MODELS[model_name](), candidates)
    _, kernels = compile_with_kernels(MODELS[model_name](), target=replace(base, tuned=_tuned(choice)))

    checked = 0
    for kernel in kernels:
        if kernel.problem and kernel.template == "matmul_texel" and choice[kernel.problem]:
            _assert_texel_follows(kernel, choice[kernel.problem])
            checked += 1
    assert checked >= 1, f"no matmul_texel kernel: {sorted({k.template for k in kernels})}"
    # The tuning changed what was built (the lanes at least differ from the defaults somewhere).
    assert _by_problem(kernels) != _by_problem(untuned_kernels)


@pytest.mark.parametrize("profile", ["generic", "nvidia"])
@pytest.mark.parametrize("model_name", MODELS)
def test_tiled_kernels_follow_a_fabricated_tuning(profile, model_name):
    """GPU profiles: a tiled candidate with min_workgroups=1 is taken as is (no shrinking to
    spread small layers, no split K), so each problem's BM x BN tile and TM x TN registers are
    exactly its candidate's, and its workgroup is (BN / TN, BM / TM)."""
    base = get_target(profile)
    assert base.matmul == "tiled"
    candidates = [dict(f, min_workgroups=1) for f in CANDIDATES["tiled"]]
    candidates = [f for f in candidates if (f["tile_m"], f["tile_n"]) != (base.tile_m, base.tile_n)] + \
        [f for f in candidates if (f["tile_m"], f["tile_n"]) == (base.tile_m, base.tile_n)]
    model = MODELS[model_name]()
    choice, untuned_kernels = _fabricate(base, model, candidates)
    _, kernels = compile_with_kernels(model, target=replace(base, tuned=_tuned(choice)))

    checked = 0
    for kernel in kernels:
        if kernel.problem and kernel.template == "matmul_tiled":
            fields, p = choice[kernel.problem], kernel.params
            assert (p["BM"], p["BN"], p["TM"], p["TN"]) == (
                fields["tile_m"], fields["tile_n"], fields["reg_m"], fields["reg_n"]), (kernel.problem, fields, p)
            assert p["BK"] == base.tile_k and not p["split_k"], (kernel.problem, p)
            assert kernel.local_size == (p["BN"] // p["TN"], p["BM"] // p["TM"], 1)
            s = _spec(kernel)
            assert kernel.groups[:2] == (-(-s["N"] // p["BN"]), -(-s["M"] // p["BM"])), kernel.problem
            checked += 1
        elif kernel.problem:
            # A few rows (M <= 8) take the register kernel whatever the tile; nothing to follow.
            assert kernel.template == "matmul_register" and _spec(kernel)["M"] <= 8, (kernel.template, kernel.problem)
    assert checked >= 1, f"no matmul_tiled kernel on {profile}: {sorted({k.template for k in kernels})}"
    assert _by_problem(kernels) != _by_problem(untuned_kernels)


def test_tiled_candidates_as_tune_applies_them():
    """The real CANDIDATES["tiled"] (the profile's min_workgroups kept): a problem tuned to a
    candidate builds the same kernels as compiling the whole model with that candidate's tile
    taken as it is (exact_tile), which is what tune() timed. (generic only: nvidia's min_workgroups=264 shrinks every tile of this
    small model to 32x32 whatever the candidate, so there it could not tell.)"""
    base = get_target("generic")
    model = small_cnn()
    choice, untuned_kernels = _fabricate(base, model, CANDIDATES["tiled"])
    _, kernels = compile_with_kernels(model, target=replace(base, tuned=_tuned(choice)))
    tuned = _by_problem(kernels)
    checked = 0
    for fields in {json.dumps(f, sort_keys=True) for f in choice.values()}:
        _, ks = compile_with_kernels(model, target=replace(base, **json.loads(fields), exact_tile=True))
        direct = _by_problem(ks)
        for problem, f in choice.items():
            if json.dumps(f, sort_keys=True) == fields:
                assert tuned[problem] == direct[problem], (problem, f)
                checked += 1
    assert checked == len(choice) >= 2
    assert tuned != _by_problem(untuned_kernels)


def test_coopmat_candidates_for_float16():
    """fp16 on a profile with cooperative matrices tunes its workgroup tiles (each alone), the
    K step, the split depth and the prefetch depth; fp32 there, and fp16 without them, tune the
    matmul kind's tiles as before."""
    from compiler.tune import COOPMAT_K, PAIRED_TILE, WIDE_TILE, candidates
    nvidia = get_target("nvidia")
    cands = candidates(nvidia, "fp16")
    assert [c["coopmat_tiles"] for c in cands if "coopmat_tiles" in c] == \
        [(t,) for t in nvidia.coopmat_tiles] + [WIDE_TILE["coopmat_tiles"], PAIRED_TILE["coopmat_tiles"]]
    assert [c["coopmat_k"] for c in cands if "coopmat_k" in c and "coopmat_tiles" not in c] == \
        [k for k in COOPMAT_K if k != nvidia.coopmat_k]
    assert dict(coopmat_split_steps=16) in cands and dict(coopmat_deep_prefetch=0) in cands
    assert candidates(nvidia, "fp32") == CANDIDATES["tiled"]
    assert candidates(get_target("lavapipe"), "fp16") == CANDIDATES["texel"]


def test_coopmat_kernels_follow_a_fabricated_tuning(tmp_path):
    """A float16 model on nvidia with each problem tuned to one cooperative-matrix tile, through
    the tuning cache's JSON (lists back as tuples): every coopmat kernel is built on its problem's
    tile, (subgroups along M x N) x (accumulators) x the device's 16x16 shape."""
    from compiler.tuning_cache import load_tuning, store_tuning
    from compiler.tune import candidates
    base = get_target("nvidia")
    model = small_cnn(hw=32)
    tiles = [c for c in candidates(base, "fp16") if "coopmat_tiles" in c]
    _, untuned_kernels = compile_with_kernels(model, target=base, precision="fp16")
    problems = sorted({k.problem for k in untuned_kernels if k.template == "matmul_coopmat"})
    assert problems, sorted({k.template for k in untuned_kernels})
    choice = {p: tiles[-1 - i % 2] for i, p in enumerate(problems)}  # the two smallest tiles, in turn
    store_tuning("dev", choice, tmp_path / "t.json")
    tuned = load_tuning("dev", tmp_path / "t.json")
    assert sorted(tuned) == sorted(_tuned(choice))
    _, kernels = compile_with_kernels(model, target=replace(base, tuned=tuned), precision="fp16")
    checked = 0
    for k in kernels:
        if k.template == "matmul_coopmat":
            (wm, wn, sm, sn), = choice[k.problem]["coopmat_tiles"]
            assert (k.params["BM"], k.params["BN"]) == (wm * sm * 16, wn * sn * 16), (k.problem, k.params)
            checked += 1
    assert checked == len([k for k in untuned_kernels if k.template == "matmul_coopmat"])
    assert _by_problem(kernels) != _by_problem(untuned_kernels)
