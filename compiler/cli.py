"""The `vkc` command line: compile, check, inspect, run, bench, verify, devices, package, serve."""
from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import List, Optional

import numpy as np
import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from bundles import BundleError, read_bundle
from bundles.manifest import variant_views
from bundles.variants import exclusive_bytes, shapes_label, used_modules
from bundles.spirv import CAPABILITIES, Module, device_requirements
# The commands that run a bundle (run, bench, verify, devices) use the runtime directly; the
# compiler proper reaches a device only through compiler/host.py.
from runtime_min import VkcRuntimeError, list_devices, load
from runtime_min.generate import Sampler, argmax_output, top_k_output

from . import verify_layers
from .check import check_model
from .compile import compile_model, target_list
from .targets import DEFAULT_TARGETS
from .tokenizer import DEFAULT_NAME as DEFAULT_TOKENIZER, encode, load_tokenizer, tokenizer_path
from .errors import CompileError
from .frontend import load_model, one_line
from .output_file import OutputError, check_output, write_atomically
from .package_android import PackageError, package_android
from .passes.precision import Precision
from .tune import tune as run_tuner
from .tuning_cache import tuning_path

try:
    from typer._click import exceptions as click_errors  # typer >= 0.20 carries its own click
except ImportError:  # pragma: no cover
    from click import exceptions as click_errors

# Piped output (CI logs, files) gets wide tables instead of rich's 80-column default.
console = Console(width=None if sys.stdout.isatty() else 140)
# Errors: one line on stderr, never wrapped.
err_console = Console(stderr=True, soft_wrap=True)


def _error_line(message: str) -> None:
    err_console.print(Text.assemble(("error:", "bold red"), " ", message), highlight=False)


def _fail(message: str) -> None:
    _error_line(message)
    raise typer.Exit(1)


class _Commands(typer.core.TyperGroup):
    """vkc's commands, whose usage errors (a bad option value, a missing file) are one line on
    stderr like every other error, instead of a usage box."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click_errors.NoArgsIsHelpError:  # the help was printed
            sys.exit(2)
        except click_errors.ClickException as exc:
            ctx = getattr(exc, "ctx", None)
            hint = f" (`{ctx.command_path} --help` lists the options)" if ctx is not None else ""
            _error_line(" ".join(exc.format_message().split()) + hint)
            sys.exit(exc.exit_code)
        except getattr(click_errors, "Abort", ()):  # typer's own click (>= 0.20) has none
            _error_line("aborted.")
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(add_completion=False, no_args_is_help=True, cls=_Commands,
                  help="vkc: compile ONNX models into Vulkan compute bundles (.vkb) and run them.")


def _parse_shapes(specs: list[str] | None, flag: str = "--input-shape") -> dict[str, list[int]]:
    """NAME=DIMxDIM... specs (each may hold several, joined by commas) as {name: shape}."""
    shapes = {}
    for spec in (part for given in specs or [] for part in given.split(",")):
        name, sep, dims = spec.strip().rpartition("=")
        try:
            shapes[name] = [int(d) for d in dims.lower().split("x")]
        except ValueError:
            name = ""
        if not sep or not name:
            _fail(f"{flag} '{spec}' is not NAME=DIMxDIMx...; e.g. input=1x3x224x224.")
    return shapes


def _variants(input_shape, variant) -> dict:
    """compile_model's shape arguments from --input-shape (one set) or --variant (one set each)."""
    if input_shape and variant:
        _fail("give --input-shape (one set of input shapes) or --variant (one per set), not both.")
    if variant:
        return {"variants": [_parse_shapes([v], "--variant") for v in variant]}
    return {"input_shapes": _parse_shapes(input_shape)}


def _output_ok(path: Path, inputs, flag: str) -> None:
    try:
        check_output(path, inputs, flag)
    except OutputError as exc:
        _fail(str(exc))


def _write(path: Path, content, inputs, flag: str) -> None:
    try:
        write_atomically(path, content, inputs, flag)
    except OutputError as exc:
        _fail(str(exc))


def _mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB"


def _compile(model: Path, input_shape, target: str | None, variant=None, **precision) -> bytes:
    try:
        return compile_model(model, target=target or DEFAULT_TARGETS, **_variants(input_shape, variant),
                             **precision)
    except (CompileError, ValueError) as exc:
        _fail(str(exc))


def _load(bundle, device, target=None):
    try:
        return load(bundle, device=device, target=target)
    except (BundleError, VkcRuntimeError) as exc:
        _fail(str(exc))


def _random_feeds(model, seed: int, shapes: dict | None = None) -> dict[str, np.ndarray]:
    """Random inputs for the model's first variant, or of the given {name: shape}."""
    rng = np.random.default_rng(seed)
    shape = lambda t: shapes[t.name] if shapes else t.shape
    return {t.name: rng.standard_normal(shape(t)).astype(t.dtype) if t.dtype.kind == "f"
            else rng.integers(0, 4, shape(t)).astype(t.dtype) for t in model.inputs}


def _summary(name: str, a: np.ndarray) -> str:
    if a.size == 0:
        return f"{name}: {a.dtype}{list(a.shape)} (empty)"
    flat = a.reshape(-1)
    top = np.argsort(flat)[::-1][:5] if a.dtype.kind == "f" else []
    text = (f"{name}: {a.dtype}{list(a.shape)} min {flat.min():.4g} max {flat.max():.4g} "
            f"mean {flat.mean():.4g}")
    if len(top) and a.ndim == 2 and a.shape[0] == 1:
        text += " top-5 " + ", ".join(f"{i}:{flat[i]:.4g}" for i in top)
    return text


ShapeOpt = typer.Option(None, "--input-shape", help="Pin a dynamic input: NAME=1x3x224x224 (repeatable).")
ContextOpt = typer.Option(None, "--max-context", min=2, help="A decoder whose KV cache grows each run (optimum's "
                          "text-generation-with-past export): compile it to a cache of this many rows kept on the "
                          "device, inputs input_ids and position (give the run lengths: --variant input_ids=1x16 "
                          "--variant input_ids=1x1); or onnxruntime-genai's model builder's export: its caches and "
                          "attention_mask pinned to this many rows, inputs input_ids and attention_mask.")
VariantOpt = typer.Option(None, "--variant", help="One full set of input shapes, NAME=1x32[,NAME2=...] "
                          "(repeatable: one shape variant each; the runtime picks by the inputs' shapes).")
TargetOpt = typer.Option(None, "--target",
                         help="Device profiles, joined by commas: nvidia, mobile, lavapipe, generic, or host "
                              f"(the local device). Default: {','.join(DEFAULT_TARGETS)} (the runtime picks "
                              "the device's).")
RunTargetOpt = typer.Option(None, "--target", help="Run this profile of a multi-variant bundle (default: "
                            "the one the runtime picks for the device).")
DeviceOpt = typer.Option(None, "--device", help="Device index or name substring (default: best, or VKC_DEVICE).")
SeedOpt = typer.Option(0, min=0, help="Seed for random inputs.")


@app.command()
def compile(model: Path = typer.Argument(..., exists=True, dir_okay=False, help="The ONNX model."),
            output: Path = typer.Option(..., "-o", "--output", help="Where to write the .vkb bundle."),
            input_shape: Optional[List[str]] = ShapeOpt, variant: Optional[List[str]] = VariantOpt,
            target: Optional[str] = TargetOpt, max_context: Optional[int] = ContextOpt,
            tune_first: bool = typer.Option(False, "--tune", help="Run `vkc tune` on the local "
                                            "device first (implies --target host): slower compile, faster kernels."),
            precision: str = typer.Option("fp32", "--precision", help="fp32; fp16: weights and "
                                          "activations stored as float16, accumulated in float32; "
                                          "fp16-matmul: only MatMul, Gemm and Conv take float16 "
                                          "operands (tensor cores, as TF32 on CUDA), the rest stays fp32."),
            io: Optional[str] = typer.Option(None, "--io", help="fp16: inputs and outputs float16 at "
                                             "the runtime API too (default: float32)."),
            keep_fp32: Optional[str] = typer.Option(None, "--keep-fp32", help="With --precision fp16(-matmul): "
                                                    "node names (NAME,...) that stay float32."),
            state: str = typer.Option("auto", "--state", help="Inputs kept on the device between runs, each "
                                      "fed by an output (a KV cache): auto (the caches TensorScatter writes in "
                                      "place), none, or INPUT=OUTPUT,..."),
            weights: Optional[str] = typer.Option(None, "--weights", help="Quantize float MatMul/Gemm weights "
                                                  "and the token embedding block-wise along K, as MatMulNBits "
                                                  "stores them: int8 (symmetric), int4 (zero points) or int4-sym."),
            weights_block: Optional[int] = typer.Option(None, "--weights-block", help="With --weights: values "
                                                        "a block (a power of two from 16; default 32)."),
            kv_cache: Optional[str] = typer.Option(None, "--kv-cache", help="int8: the KV caches kept on the device "
                                                   "as int8 with a float32 scale per row (about half a float16 "
                                                   "cache's memory); default: the model's float type."),
            argmax_output: Optional[str] = typer.Option(None, "--argmax-output", help="An output (logits): also "
                                                        "output NAME_argmax, its last row's argmax computed on the "
                                                        "device, so greedy `vkc generate` copies back one token id "
                                                        "a step instead of the logits."),
            top_k_output: Optional[str] = typer.Option(None, "--top-k-output", help="NAME:K (logits:40): also "
                                                       "output NAME_topk_values and NAME_topk_indices, the K largest "
                                                       "of its last row and their ids computed on the device, so "
                                                       "`vkc generate --top-k` up to K copies back 2K numbers a step "
                                                       "instead of the logits.")):
    """Compile an ONNX model into a .vkb bundle."""
    start = time.perf_counter()
    _output_ok(output, [model], "-o")
    if tune_first:  # a growing cache's products tuned at its first variant's run length
        tune(model, input_shape=input_shape or (variant[:1] if max_context else None), target="host",
             precision=precision, device=None, repeat=5, max_context=max_context)
        target = "host"
    keep = [n for n in (keep_fp32 or "").split(",") if n]
    data = _compile(model, input_shape, target, variant, precision=precision, io=io, keep_fp32=keep, state=state,
                    weights=weights, weights_block=weights_block, argmax_output=argmax_output,
                    top_k_output=top_k_output, max_context=max_context, kv_cache=kv_cache)
    _write(output, data, [model], "-o")
    m = read_bundle(data).manifest
    views = variant_views(m)
    what = (f"{len(m['dispatches'])} dispatches" if len(views) == 1 else
            f"{len(views)} variants ({', '.join(v.get('name', '?') for v in views)})")
    console.print(f"wrote {output} ({_mib(len(data))}) in {time.perf_counter() - start:.2f} s: {what}, "
                  f"{len(m['modules'])} SPIR-V modules, arena {_mib(max(v['memory']['arena_bytes'] for v in views))}, "
                  f"weights {_mib(views[0]['memory']['weights_bytes'])}", highlight=False)


@app.command()
def tune(model: Path = typer.Argument(..., exists=True, dir_okay=False),
         input_shape: Optional[List[str]] = ShapeOpt, max_context: Optional[int] = ContextOpt,
         target: str = typer.Option("host", "--target", help="The profile whose tiles are tuned."),
         precision: str = typer.Option("fp32", "--precision", help="fp32, fp16 or fp16-matmul (on a device "
                                       "with cooperative matrices: their workgroup tiles and K step)."),
         device: Optional[str] = DeviceOpt, repeat: int = typer.Option(5, min=1, help="Profiled runs per candidate.")):
    """Time candidate tile sizes of every matmul/conv on the local device; keep the fastest in the
    tuning cache that `--target host` compiles read."""
    shapes = _parse_shapes(input_shape)
    try:  # the arguments, before any device work
        Precision.parse(precision)
        target_list(target)
        proto = load_model(model)
    except ValueError as exc:
        _fail(str(exc))
    try:
        choice = run_tuner(proto, target=target, device=_device_arg(device), precision=precision,
                           input_shapes=shapes, repeat=repeat, max_context=max_context,
                           log=lambda line: console.print(line, highlight=False))
    except (ValueError, VkcRuntimeError) as exc:  # CompileError, a target without candidates
        _fail(str(exc))
    console.print(f"tuned {len(choice)} matmul problems; stored in {tuning_path()}")


@app.command()
def check(model: Path = typer.Argument(..., exists=True, dir_okay=False),
          input_shape: Optional[List[str]] = ShapeOpt, max_context: Optional[int] = ContextOpt,
          target: str = typer.Option("generic", "--target", help="The profile to check against "
                                     "(as `vkc compile --target`).")):
    """Every op of a model: folded, supported, or not (and why), as `vkc compile` would decide,
    without generating code."""
    try:
        proto = load_model(model)
        report = check_model(proto, _parse_shapes(input_shape), target, max_context)
    except ValueError as exc:  # CompileError, an unknown target
        _fail(str(exc))
    table = Table(title=f"{model.name}: opset {report.opset}, {len(proto.graph.node)} nodes")
    for col in ("op", "since", "nodes", "supported"):
        table.add_column(col)
    problems = []
    for v in report.ops:
        if v.all_folded:
            verdict = "[green]folded[/] (computed from constants at compile time)"
        elif not v.supported:
            verdict = "[red]no[/] (no kernel)"
            problems.append(f"{v.op}: {', '.join(n for n in v.nodes if n not in v.folded)}")
        elif v.refused:
            verdict = f"[red]no[/] ({len(v.refused)} of {len(v.nodes)} nodes)"
            problems += [why for why in dict.fromkeys(v.refused.values()) if why not in problems]
        else:
            verdict = "[green]yes[/]" + (f" ({len(v.folded)} folded)" if v.folded else "")
        table.add_row(v.op, v.since, str(len(v.nodes)), verdict)
    console.print(table)
    if report.error:
        problems.append(report.error)
    if problems:
        console.print("[red]unsupported:[/]\n  " + "\n  ".join(problems), highlight=False)
        raise typer.Exit(1)
    console.print("[green]every op is supported.[/]")


@app.command()
def inspect(bundle: Path = typer.Argument(..., exists=True, dir_okay=False),
            as_json: bool = typer.Option(False, "--json", help="Print the manifest and computed facts (sections, "
                                         "checksums verified, device requirements) as JSON."),
            variant: Optional[int] = typer.Option(None, "--variant", help="Of a bundle with variants: show this "
                                                  "one's inputs, kernels, schedule and memory plan (by #).")):
    """Show a bundle's variants, inputs, outputs, kernels, schedule and memory plan."""
    if as_json:
        _inspect_json(bundle)
        return
    try:
        b = read_bundle(bundle)
    except BundleError as exc:
        _fail(str(exc))
    views = variant_views(b.manifest)
    if variant is not None and not 0 <= variant < len(views):
        _fail(f"--variant {variant}: the bundle has variants 0..{len(views) - 1}.")
    m = views[variant or 0]
    t = m["tensors"]
    what = f"target {m['target']['name']}" if len(views) == 1 else f"{len(views)} variants"
    console.print(f"[bold]{bundle}[/]: model '{m['model']['name']}' opset {m['model']['opset']}, "
                  f"{what}, format {b.version[0]}.{b.version[1]}")
    if len(views) > 1:
        _variants_table(b, views)
        if variant is None:
            console.print("`vkc inspect --variant N` shows variant N's kernels, schedule and memory plan.")
            return
        console.print(f"[bold]variant {variant}[/]: {m.get('name', '')}", highlight=False)
    io = Table(title="inputs and outputs")
    for col in ("", "name", "dtype", "shape"):
        io.add_column(col)
    for kind in ("inputs", "outputs"):
        for e in m[kind]:
            io.add_row(kind[:-1], e["name"], t[e["tensor"]]["dtype"], str(t[e["tensor"]]["shape"]))
    console.print(io)
    used = used_modules(m) if len(views) > 1 else range(len(m["modules"]))
    mods = Table(title=f"{len(used)} SPIR-V modules, {len(m['kernels'])} pipelines")
    for col in ("module", "name", "bindings", "local size", "shared bytes", "SPIR-V bytes", "pipelines"):
        mods.add_column(col)
    for i in used:
        mod, uses = m["modules"][i], sum(k["module"] == i for k in m["kernels"])
        mods.add_row(str(i), mod["name"], str(mod["bindings"]), "x".join(map(str, mod["local_size"])),
                     str(mod["shared_memory_bytes"]), str(len(b.spirv[i])), str(uses))
    console.print(mods)
    sched = Table(title=f"schedule: {len(m['dispatches'])} dispatches, "
                        f"{sum(d['barrier'] for d in m['dispatches'])} barriers")
    for col in ("#", "kernel", "groups", "barrier", "MFLOP", "nodes"):
        sched.add_column(col)
    for i, d in enumerate(m["dispatches"]):
        sched.add_row(str(i), m["kernels"][d["kernel"]]["name"], "x".join(map(str, d["groups"])),
                      "yes" if d["barrier"] else "", f"{d.get('flops', 0) / 1e6:.2f}",
                      ", ".join(d.get("nodes", []))[:60])
    console.print(sched)
    for e in m.get("float32_nodes", []):
        console.print(f"kept float32: {e['node']}: {e['why']}", highlight=False)
    check = m.get("float16_check")
    if check:
        console.print(f"float16 check: not run: {check['not_run']}" if "not_run" in check else
                      f"float16 check: float16 weights move output '{check['output']}' by {check['moved']:.2g} "
                      "(relative L2, float32 arithmetic)", highlight=False)
    if "quantized_weights" in m:
        _quantized_lines(m["quantized_weights"])
    mem = m["memory"]
    console.print(f"memory plan: arena {mem['arena_bytes']:,} bytes ({_mib(mem['arena_bytes'])}); "
                  f"sum of intermediates {mem['intermediates_sum_bytes']:,}; lower bound "
                  f"{mem['lower_bound_bytes']:,} (arena / lower bound = "
                  f"{mem['arena_bytes'] / max(mem['lower_bound_bytes'], 1):.3f}); "
                  f"weights {mem['weights_bytes']:,}")
    if m.get("state"):   # kept on the device between runs (a KV cache): not among the inputs
        tensors = m["tensors"]
        held = ", ".join(f"{s['name']} {tensors[s['tensor']]['dtype']}{tensors[s['tensor']]['shape']}"
                         for s in m["state"][:6]) + (f", ... ({len(m['state'])} in all)" if len(m["state"]) > 6 else "")
        console.print(f"state: {mem['state_bytes']:,} bytes ({_mib(mem['state_bytes'])}): {held}", highlight=False)
    req = m["requirements"]
    console.print(f"requires: Vulkan {'.'.join(map(str, req['vulkan_api'][:2]))}; features "
                  f"{', '.join(req['features']) or 'none'}; extensions "
                  f"{', '.join(req['extensions']) or 'none'}")


def _quantized_lines(q: dict) -> None:
    """What --weights quantized (by op) and what it left float, and why."""
    ops = {}
    for e in q["quantized"]:
        ops.setdefault(e["op"], []).append(e["node"])
    short = lambda names: ", ".join(names) if len(names) <= 6 else ", ".join(names[:5]) + f", ... {names[-1]}"
    console.print(f"weights {q['scheme']}, blocks of {q['block_size']}: " + "; ".join(
        f"{len(names)} {op} ({short(names)})" for op, names in ops.items()) if ops else
        f"weights {q['scheme']}: nothing quantized", highlight=False)
    for e in q["quantized"]:
        if "tied_to" in e:
            console.print(f"tied: {e['node']} reads the packed table of {e['tied_to']}", highlight=False)
    for e in q["float"]:
        console.print(f"kept float: {e['node']}: {e['why']}", highlight=False)


def _variants_table(b, views: list[dict]) -> None:
    """One row per variant: its profile, the devices it is for, its shapes and what it adds to the size."""
    table = Table(title=f"{len(views)} variants, sharing {sum(map(len, b.spirv)):,} bytes of SPIR-V and "
                        f"{len(b.weights):,} of weights")
    for col in ("#", "name", "target", "for devices", "inputs", "dispatches", "arena", "adds (bytes only it uses)"):
        table.add_column(col)
    for i, (v, own) in enumerate(zip(views, exclusive_bytes(b))):
        match = v["target"].get("match") or {}
        devices = "; ".join(([f"vendor {', '.join(f'0x{x:04X}' for x in match['vendor_ids'])}"]
                             if "vendor_ids" in match else []) + match.get("device_types", [])) or "any"
        table.add_row(str(i), v.get("name", ""), v["target"]["name"], devices, shapes_label(v),
                      str(len(v["dispatches"])), _mib(v["memory"]["arena_bytes"]), f"{own:,}")
    console.print(table)


def _inspect_json(path: Path) -> None:
    """`inspect --json`: {"manifest": ..., "facts": ...}, or {"error": {"check", "detail"}} and exit 1."""
    try:
        b = read_bundle(path)
    except BundleError as exc:
        print(json.dumps({"error": {"check": exc.check, "detail": exc.detail}}, indent=1))
        raise typer.Exit(1)
    with b:
        weights = next((s for s in b.sections if s.kind.name == "WEIGHTS"), None)
        modules = [Module(code) for code in b.spirv]
        size = path.stat().st_size
        facts = {
            "file_bytes": size, "format_version": f"{b.version[0]}.{b.version[1]}", "flags": b.flags,
            # read_bundle verified the header checksum and every section's CRC-32 (or it would have failed)
            "checksums_verified": True,
            "sections": [{"index": s.index, "kind": s.kind.name, "offset": s.offset, "size": s.size, "end": s.end,
                          "alignment": s.alignment, "checksum": f"0x{s.checksum:08x}", "checksum_ok": True}
                         for s in b.sections],
            "padding_bytes": size - 32 - 32 * len(b.sections) - sum(s.size for s in b.sections),
            "spirv": [{"module": i, "bytes": len(code), "version": f"{mod.version[0]}.{mod.version[1]}",
                       "capabilities": [CAPABILITIES.get(c, (str(c),))[0] for c in sorted(set(mod.capabilities))]} for i, (code, mod) in enumerate(zip(b.spirv, modules))],
            "weights": {"offset": weights.offset if weights else 0, "bytes": weights.size if weights else 0,
                        "alignment": weights.alignment if weights else 0,
                        "mmap_aligned_4k": bool(weights) and weights.offset % 4096 == 0,
                        "mmap_aligned_16k": bool(weights) and weights.offset % 16384 == 0},
            "requirements": device_requirements(b),
        }
        print(json.dumps({"manifest": b.manifest, "facts": facts}, indent=1))


@app.command()
def package(bundle: Path = typer.Argument(..., exists=True, dir_okay=False, help="The .vkb bundle."),
            android: Path = typer.Option(..., "--android", help="The Android project (the folder with app/) "
                                         "or its app module."),
            page_size: Optional[int] = typer.Option(None, "--page-size", help="Align the weights to 4096 or "
                                                    "16384 bytes (16384 for 16 KiB-page devices); default: as compiled."),
            name: Optional[str] = typer.Option(None, "--name", help="Asset file name (default: the bundle's)."),
            no_gradle_edit: bool = typer.Option(False, "--no-gradle-edit",
                                                help="Print the Gradle setting instead of adding it."),
            native: bool = typer.Option(False, "--native", help="Also copy the native runtime (C sources, JNI "
                                        "layer, CMakeLists.txt, VkcModel.kt) into the app; prints the Gradle "
                                        "externalNativeBuild block to add.")):
    """Ship a bundle in an Android app: uncompressed asset + device requirements JSON + Gradle noCompress."""
    try:
        r = package_android(bundle, android, page_size=page_size, name=name, edit_gradle=not no_gradle_edit,
                            native=native)
    except (BundleError, PackageError, OSError) as exc:
        _fail(str(exc))
    relaid = f", weights re-laid on {r.weights_alignment}-byte boundaries" if r.relaid else ""
    console.print(f"wrote {r.asset} ({_mib(r.bundle_bytes)}{relaid})", highlight=False)
    for d in r.device.get("variants", [r.device]):  # a bundle with variants: each one's requirements
        console.print(f"wrote {r.requirements} ({d['name'] + ': ' if 'name' in d else ''}Vulkan {d['vulkan_api']}, "
                      f"{len(d['extensions'])} extensions, {len(d['features'])} features)", highlight=False)
    g = r.gradle
    if g.action == "added":
        console.print(f"added to {g.file}:\n{g.added.rstrip()}", highlight=False, markup=False)
    elif g.action == "already":
        console.print(f"{g.file} already stores .vkb assets uncompressed (noCompress)", highlight=False)
    else:
        where = g.file or (r.module / "build.gradle.kts")
        console.print(f"[yellow]did not edit {where}[/]: {g.reason}. Add this to it so the bundle stays "
                      "uncompressed (mmap-able) in the APK:", highlight=False)
        console.print(g.snippet.rstrip(), highlight=False, markup=False)
    if r.native:
        console.print(f"wrote the native runtime ({len(r.native)} files) under {r.module / 'src/main/cpp/vkc'} and "
                      f"{r.module / 'src/main/java/dev/vkc/VkcModel.kt'}; add to the module's Gradle file:",
                      highlight=False)
        console.print(r.native_snippet.rstrip(), highlight=False, markup=False)


@app.command()
def run(bundle: Path = typer.Argument(..., exists=True, dir_okay=False),
        input: Optional[List[str]] = typer.Option(None, "--input", help="NAME=file.npy (repeatable); "
                                                  "inputs not given are random."),
        save: Optional[Path] = typer.Option(None, "--save", help="Write each output to DIR/NAME.npy."),
        seed: int = SeedOpt, device: Optional[str] = DeviceOpt, target: Optional[str] = RunTargetOpt):
    """Run a bundle once and summarize its outputs."""
    given = {}
    for spec in input or []:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            _fail(f"--input '{spec}' is not NAME=file.npy.")
        if name in given:
            _fail(f"--input names '{name}' twice ({given[name]} and {path}); give each input once.")
        given[name] = Path(path)
    if save is not None:
        _save_folder_ok(save)
    model = _load(bundle, _device_arg(device), target)
    with model:
        for name, path in given.items():  # every name checked before any file is read
            if name not in {i.name for i in model.inputs}:
                _fail(f"--input {name}={path}: the model has no input '{name}'; its inputs are: "
                      f"{', '.join(f'{i.name} ({i})' for i in model.inputs)}.")
        feeds = _random_feeds(model, seed)
        for name, path in given.items():
            feeds[name] = _read_npy(f"--input {name}={path}", path)
        try:
            outputs = model.run(feeds)
        except ValueError as exc:
            _fail(str(exc))
        console.print(f"ran {model.target} on {model.device_name}", highlight=False)
        for name, value in outputs.items():
            console.print(_summary(name, value), highlight=False)
            if save:
                _write(save / f"{name.replace('/', '_')}.npy", lambda f, v=value: np.save(f, v),
                       [bundle, *given.values()], "--save")


@app.command()
def generate(bundle: Path = typer.Argument(..., exists=True, dir_okay=False),
             prompt_ids: Optional[str] = typer.Option(None, "--prompt-ids", help="The prompt's token ids: ID,ID,..."),
             prompt: Optional[str] = typer.Option(None, "--prompt", help="The prompt as text, encoded by the "
                                                  "tokenizer (needs `pip install 'vkc[text]'`)."),
             tokenizer: Optional[Path] = typer.Option(None, "--tokenizer", dir_okay=False, help="A Hugging "
                                                      "Face tokenizer.json (default: the one beside the bundle, if "
                                                      "any); with it, the tokens are printed as text too."),
             max_new_tokens: int = typer.Option(32, "--max-new-tokens", min=0),
             temperature: float = typer.Option(0.0, "--temperature", min=0.0, help="0: greedy."),
             top_k: int = typer.Option(0, "--top-k", min=0, help="Sample from the k likeliest (0: all)."),
             top_p: float = typer.Option(1.0, "--top-p", min=0.0, max=1.0),
             eos: Optional[int] = typer.Option(None, "--eos", help="Stop after this token id."),
             seed: int = SeedOpt, device: Optional[str] = DeviceOpt, target: Optional[str] = RunTargetOpt):
    """Generate tokens with a decoder bundle whose KV cache is its state; print them (and their text,
    given a tokenizer) and tokens/s."""
    if (prompt is None) == (prompt_ids is None):
        _fail("give the prompt as --prompt TEXT (with a tokenizer.json) or as --prompt-ids ID,ID,..., one of them.")
    tokenizer_file = tokenizer_path(bundle, tokenizer)
    if prompt is not None and tokenizer_file is None:
        _fail(f"--prompt needs a tokenizer: no {DEFAULT_TOKENIZER} beside {bundle.name}; give --tokenizer "
              "PATH (the model folder's) or --prompt-ids.")
    try:
        text = load_tokenizer(tokenizer_file) if tokenizer_file is not None else None
    except ValueError as exc:
        _fail(str(exc))
    if prompt_ids is not None:
        try:
            ids = [int(t) for t in prompt_ids.split(",") if t.strip()]
        except ValueError:
            _fail(f"--prompt-ids {prompt_ids!r} is not a list of integers (ID,ID,...).")
    model = _load(bundle, _device_arg(device), target)
    with model:
        if prompt is not None:
            vocabulary = next((o.shape[-1] for o in model.outputs if o.name == "logits"), None)
            try:
                ids = encode(text, prompt, vocabulary)
            except ValueError as exc:
                _fail(str(exc))
        start, tokens, first = time.perf_counter(), [], None
        try:
            for token in model.generate(ids, max_new_tokens, eos_token_id=eos, temperature=temperature,
                                        top_k=top_k, top_p=top_p or 1.0, seed=seed):
                first = first or time.perf_counter()
                tokens.append(token)
        except ValueError as exc:
            _fail(str(exc))
        end = time.perf_counter()
    console.print(" ".join(map(str, tokens)), highlight=False)
    if text is not None:
        console.print(text.decode(tokens), highlight=False, markup=False)
    if tokens:
        decode = f", decode {(len(tokens) - 1) / (end - first):.1f} tokens/s" if len(tokens) > 1 else ""
        picked = ("argmax on the device" if temperature == 0 and argmax_output(model) else
                  "argmax on the host (compile with --argmax-output logits to pick on the device)"
                  if temperature == 0 else "sampled on the host from the device's top K logits"
                  if top_k_output(model, sampler=Sampler(temperature, top_k, top_p or 1.0)) else "sampled on the host")
        console.print(f"prefill {len(ids)} tokens in {1e3 * (first - start):.1f} ms "
                      f"({len(ids) / (first - start):.1f} tokens/s){decode} on {model.device_name}; "
                      f"{picked}", highlight=False)


def _save_folder_ok(folder: Path) -> None:
    """--save DIR: an existing folder, or one made now (before the run)."""
    if folder.exists() and not folder.is_dir():
        _fail(f"--save {folder} is a file; --save takes a folder, where each output goes as NAME.npy.")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        _fail(f"--save {folder}: cannot create the folder ({exc.strerror or exc}); choose one you can write to.")
    if not os.access(folder, os.W_OK | os.X_OK):
        _fail(f"--save {folder}: the folder is not writable; choose one you can write to.")


def _read_npy(what: str, path: Path) -> np.ndarray:
    """One array from a .npy file, or a one-line error saying why not."""
    try:
        value = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        _fail(f"{what}: no such file.")
    except IsADirectoryError:
        _fail(f"{what}: is a folder; give a .npy file.")
    except (OSError, ValueError, EOFError) as exc:  # EOFError: an empty or cut-off file
        reason = " ".join(str(exc).split()) or "the file is empty or cut off"
        _fail(f"{what}: not a .npy file numpy can read ({reason}); write it with numpy.save.")
    if not isinstance(value, np.ndarray):  # an .npz archive
        value.close()
        _fail(f"{what}: an .npz archive of several arrays; save the one input with numpy.save.")
    return value


def _profile_table(records, title: str) -> Table:
    total = sum(r.seconds for r in records) or 1.0
    table = Table(title=title)
    for col in ("#", "kernel", "ONNX nodes", "ms", "%", "GFLOP/s", "GB/s"):
        table.add_column(col, justify="right" if col in ("#", "ms", "%", "GFLOP/s", "GB/s") else "left")
    for r in sorted(records, key=lambda r: -r.seconds):
        nodes = ", ".join(r.nodes)
        table.add_row(str(r.index), r.kernel, nodes if len(nodes) <= 60 else nodes[:57] + "...",
                      f"{r.seconds * 1e3:.3f}", f"{100 * r.seconds / total:.1f}",
                      f"{r.gflops:.2f}" if r.flops else "-", f"{r.gbps:.2f}" if r.bytes else "-")
    table.add_row("", "total", f"{len(records)} dispatches", f"{total * 1e3:.3f}", "100.0",
                  f"{sum(r.flops for r in records) / total / 1e9:.2f}", f"{sum(r.bytes for r in records) / total / 1e9:.2f}")
    return table


def _profile_chart(path: Path, records, manifest: dict, title: str) -> None:
    """PNG: per-dispatch GPU time (slowest first) beside the arena's memory plan over the schedule."""
    import matplotlib  # lazy: an optional dependency, only --chart needs it
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(16, max(5, 0.28 * min(len(records), 40) + 2)))
    top = sorted(records, key=lambda r: -r.seconds)[:40][::-1]
    ax_t.barh([f"{r.index}: {r.kernel}" for r in top], [r.seconds * 1e3 for r in top], color="tab:blue")
    ax_t.set_xlabel("GPU time (ms)")
    ax_t.set_title(f"per-dispatch time ({len(top)} slowest of {len(records)})")
    ax_t.tick_params(axis="y", labelsize=7)
    n, tensors = len(manifest["dispatches"]), manifest["tensors"]
    first, last = {}, {}
    for step, d in enumerate(manifest["dispatches"]):
        for t in d["bindings"]:
            first.setdefault(t, step)
            last[t] = step
    io = {x["tensor"]: "input" for x in manifest["inputs"]} | {x["tensor"]: "output" for x in manifest["outputs"]}
    for t in io:
        first[t] = -1 if io[t] == "input" else first.get(t, -1)
        last[t] = n if io[t] == "output" else last.get(t, n)
    colors = {"input": "tab:green", "output": "tab:red"}
    for t, start in first.items():
        e = tensors[t]
        if e["memory"] != "arena" or not e["nbytes"]:
            continue
        ax_m.add_patch(Rectangle((start - 0.45, e["offset"] / 2**20), last[t] - start + 0.9, e["nbytes"] / 2**20,
                                 facecolor=colors.get(io.get(t), "tab:blue"), edgecolor="black", linewidth=0.3,
                                 alpha=0.6))
    mem = manifest["memory"]
    ax_m.set_xlim(-1.5, n + 0.5)
    ax_m.set_ylim(0, max(mem["arena_bytes"], 1) / 2**20 * 1.02)
    ax_m.axhline(mem["lower_bound_bytes"] / 2**20, color="gray", linestyle="--", linewidth=0.8)
    ax_m.set_xlabel("dispatch (schedule order; -1 = inputs copied in)")
    ax_m.set_ylabel("arena offset (MiB)")
    ax_m.set_title(f"memory plan: arena {mem['arena_bytes'] / 2**20:.2f} MiB, lower bound "
                   f"{mem['lower_bound_bytes'] / 2**20:.2f} MiB (dashed), no reuse "
                   f"{mem['intermediates_sum_bytes'] / 2**20:.2f} MiB", fontsize=9)
    fig.suptitle(title)
    fig.tight_layout()
    _write(path, lambda f: fig.savefig(f, format="png", dpi=110), [], "--chart")
    plt.close(fig)


@app.command()
def bench(bundle: Path = typer.Argument(..., exists=True, dir_okay=False),
          repeat: int = typer.Option(20, min=1, help="Timed runs."),
          warmup: int = typer.Option(3, min=0, help="Untimed runs first."),
          device: Optional[str] = DeviceOpt, target: Optional[str] = RunTargetOpt,
          profile: bool = typer.Option(False, "--profile", help="Also time every dispatch on the GPU (timestamp "
                                       "queries) and print them, slowest first."),
          chart: Optional[Path] = typer.Option(None, "--chart", help="With --profile: write a PNG of the "
                                               "per-dispatch times and the memory plan (needs matplotlib).")):
    """Median latency of repeated runs (inputs copied in, outputs copied out) after a warm-up."""
    if chart is not None:
        try:
            import matplotlib  # noqa: F401  (only the chart needs it; the runtime never does)
        except ImportError:
            _fail("--chart needs matplotlib, which is not installed: `pip install matplotlib`, "
                  "or drop --chart to print the table only.")
        _output_ok(chart, [bundle], "--chart")
    model = _load(bundle, _device_arg(device), target)
    records = None
    with model:
        feeds = _random_feeds(model, 0)
        times = model.bench(feeds, warmup=warmup, repeat=repeat)
        if profile or chart is not None:
            try:
                records = model.profile(feeds, repeat=max(1, min(repeat, 10)))
            except Exception as exc:  # e.g. a device without timestamp queries
                _fail(str(exc))
    ms = sorted(t * 1e3 for t in times)
    console.print(f"{bundle.name} ({model.target}) on {model.device_name}: median {statistics.median(ms):.3f} ms "
                  f"(min {ms[0]:.3f}, max {ms[-1]:.3f}, {repeat} runs after {warmup} warm-up)")
    if records is not None:
        title = f"{bundle.name} on {model.device_name}: GPU time per dispatch (median of {max(1, min(repeat, 10))})"
        console.print(_profile_table(records, title))
    if chart is not None:
        # The variant that ran: the first of the shape set (random inputs take its shapes).
        ran = next(v for v in variant_views(model.manifest)
                   if (v.get("name") or f"{v['target']['name']} {shapes_label(v)}") == model.variants[0])
        _profile_chart(chart, records, ran, f"{bundle.name} on {model.device_name}")
        console.print(f"wrote {chart}")


@app.command()
def verify(model: Path = typer.Argument(..., exists=True, dir_okay=False),
           input_shape: Optional[List[str]] = ShapeOpt, variant: Optional[List[str]] = VariantOpt,
           target: Optional[str] = TargetOpt,
           device: Optional[str] = DeviceOpt, seed: int = SeedOpt,
           tolerance: float = typer.Option(1e-4, min=0.0, help="Largest relative L2 error accepted."),
           layers: bool = typer.Option(False, "--layers", help="Compare every intermediate the bundle "
                                       "computes (one profile, --target or host; one set of shapes) with "
                                       "onnxruntime's, and name the first node outside tolerance.")):
    """Compile, run on Vulkan with random inputs and compare every output with onnxruntime (every
    shape variant of the profile the runtime picks)."""
    if layers:
        return _verify_layers(model, input_shape, target, device, seed, tolerance)
    try:
        import onnxruntime as ort  # lazy: an optional dependency (the test extra), only verify needs it
    except ImportError:
        _fail("verify compares with onnxruntime, which is not installed: `pip install onnxruntime`.")

    start = time.perf_counter()
    data = _compile(model, input_shape, target, variant)
    console.print(f"compiled {model.name} in {time.perf_counter() - start:.2f} s ({_mib(len(data))} bundle)")
    vk_model = _load(data, _device_arg(device))
    runs = []
    with vk_model:
        for shapes in vk_model.shapes:
            feeds = _random_feeds(vk_model, seed, shapes)
            start = time.perf_counter()
            runs.append((feeds, vk_model.run(feeds)))
            console.print(f"ran {vk_model.target} {shapes_label_of(shapes)} on {vk_model.device_name} in "
                          f"{(time.perf_counter() - start) * 1e3:.1f} ms", highlight=False)
    try:
        session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
        refs = [dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds))) for feeds, _ in runs]
    except Exception as exc:  # noqa: BLE001 - onnxruntime's own error types
        _fail(f"onnxruntime cannot run {model}, so there is nothing to compare with: {one_line(exc)}")
    worst = 0.0
    for (_, got), ref in zip(runs, refs):
        err = _compare(got, ref)
        worst = err if np.isnan(err) else max(worst, err)
    if not worst <= tolerance:
        _fail(f"outputs differ from onnxruntime: worst relative L2 error {worst:.2e} > {tolerance:.0e}.")
    console.print(f"[green]agrees with onnxruntime[/] (worst relative L2 error {worst:.2e})")


def _verify_layers(model: Path, input_shape, target, device, seed: int, tolerance: float) -> None:
    """verify --layers (compiler/verify_layers.py): one run of a bundle that keeps every
    intermediate, each compared with onnxruntime's value of the same tensor."""
    data = _compile(model, input_shape, target or "host", keep_intermediates=True)
    vk_model = _load(data, _device_arg(device))
    with vk_model:
        feeds = _random_feeds(vk_model, seed)
        got = vk_model.run(feeds)
    proto = load_model(model)
    want = verify_layers.reference_values(proto, feeds)
    found = verify_layers.compare_layers(proto, read_bundle(data).manifest, got, want, tolerance)
    console.print(f"{model.name}: every intermediate of {vk_model.target} on {vk_model.device_name} "
                  "against onnxruntime, in graph order", highlight=False)
    for line in verify_layers.report(proto, found, want, feeds):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    if verify_layers.first_bad(found) is not None:
        raise typer.Exit(1)


def shapes_label_of(shapes: dict) -> str:
    return ",".join(f"{n}={'x'.join(map(str, s))}" for n, s in shapes.items())


def _compare(got: dict, ref: dict) -> float:
    """Print each output's summary and error against onnxruntime's; the worst relative L2 error."""
    worst = 0.0
    for name, value in got.items():
        err = float(np.linalg.norm((value - ref[name]).astype(np.float64)) /
                    max(np.linalg.norm(ref[name].astype(np.float64)), 1e-30))
        worst = err if np.isnan(err) else max(worst, err)  # NaN disagrees: it must not pass
        console.print(_summary(name, value), highlight=False)
        agree = "same top-1" if value.ndim == 2 and value.shape[0] == 1 and \
            np.argmax(value) == np.argmax(ref[name]) else ""
        console.print(f"  vs onnxruntime: relative L2 error {err:.2e} {agree}", highlight=False)
    return worst


@app.command()
def devices():
    """List the Vulkan devices and the limits bundles care about."""
    try:
        found = list_devices()
    except VkcRuntimeError as exc:
        _fail(str(exc))
    table = Table(title="Vulkan devices")
    for col in ("#", "name", "type", "Vulkan", "shared", "invocations", "subgroup", "max binding",
                "features", "extensions"):
        table.add_column(col)
    for d in found:
        table.add_row(str(d.index), d.name, d.type, ".".join(map(str, d.api_version)),
                      f"{d.max_shared_memory_bytes // 1024} KiB", str(d.max_workgroup_invocations),
                      str(d.subgroup_size), _mib(d.max_storage_buffer_range), ", ".join(d.features),
                      ", ".join(d.extensions))
    console.print(table)


@app.command()
def serve(bundle: Path = typer.Argument(..., exists=True, dir_okay=False, help="The .vkb bundle."),
          replicas: int = typer.Option(1, "--replicas", min=1, help="Replicas, each loading the bundle once: "
                                       "one GPU each where Ray has GPUs, else one CPU each (lavapipe)."),
          max_batch: Optional[int] = typer.Option(None, "--max-batch", min=1, help="Rows per run at most "
                                                  "(default: the bundle's largest batch size)."),
          address: Optional[str] = typer.Option(None, "--address", help="A running Ray cluster (ray://HEAD:10001 "
                                                "or auto); default: a local Ray instance."),
          host: str = typer.Option("127.0.0.1", "--host", help="Where Serve's HTTP proxy listens."),
          port: int = typer.Option(8000, "--port"),
          batch_wait_ms: float = typer.Option(0.0, "--batch-wait-ms", help="How long a batch waits for more requests "
                                              "(0: it takes those that queued while the run before it ran)."),
          tokenizer: Optional[Path] = typer.Option(None, "--tokenizer", dir_okay=False, help="A Hugging Face "
                                                   "tokenizer.json for a decoder's POST /generate {\"prompt\": text} "
                                                   "and text pieces (default: the one beside the bundle, if any).")):
    """Serve a bundle over HTTP and Ray handles behind Ray Serve, batching requests into its shape
    variants; a decoder bundle whose KV cache is its state (e.g. --max-context N) streams generated tokens
    from POST /generate instead, as newline-delimited JSON (needs `pip install 'vkc[serve]'`;
    docs/SERVING.md)."""
    try:  # Ray is an optional dependency: import the serving package only for this command
        from serving.app import ServingError, serve_forever
    except ImportError as exc:
        _fail(f"vkc serve needs Ray Serve ({exc}); install it with `pip install 'vkc[serve]'`.")
    tokenizer_file = tokenizer_path(bundle, tokenizer)
    try:
        text = load_tokenizer(tokenizer_file) if tokenizer_file is not None else None
    except ValueError as exc:
        _fail(str(exc))
    try:
        serve_forever(bundle, replicas=replicas, max_batch=max_batch, address=address, host=host, port=port,
                      batch_wait_ms=batch_wait_ms, tokenizer=text,
                      say=lambda line: console.print(line, highlight=False))
    except ServingError as exc:
        _fail(str(exc))


def _device_arg(device: str | None):
    return int(device) if device is not None and device.isdigit() else device


def main() -> None:  # python -m compiler.cli
    app(prog_name="vkc")


if __name__ == "__main__":
    sys.exit(main())
