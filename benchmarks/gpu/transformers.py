#!/usr/bin/env python3
"""On the GPU machine: the `transformers` classes themselves, exported as users export them,
compiled by vkc there, checked against torch and timed host to host against torch eager and torch
CUDA graphs, in fp32 and fp16, in one run and one table.

    source benchmarks/gpu/setup.sh
    python3 -m benchmarks.gpu.transformers                      # every model, batch 1 and 8, fp32 and fp16
    python3 -m benchmarks.gpu.transformers --models bert,llama --batches 1 --precision fp16
    python3 -m benchmarks.gpu.transformers --tiny               # 2 layers, hidden 64, seq 16, image 32

Models (configs built in code, no download; the library's default attention implementation, SDPA
where the class has it): bert (BertModel, BERT-base), distilbert (DistilBertModel, base), roberta
(RobertaModel, base), gpt2 (GPT2Model, small), vit (ViTModel, ViT-B/16), swin (SwinModel, Swin-T),
convnext (ConvNextModel, ConvNeXt-T), whisper (WhisperModel(...).encoder, Whisper-base widths: d_model
512, 6 layers, 8 heads, 80 mel bins x 3000 frames), llama (LlamaModel at Llama-3.2-1B widths, 4
layers: hidden 2048, 32 heads, 8 KV heads, FFN 8192, vocab 128256), qwen2 (Qwen2Model at
Qwen2.5-0.5B widths, 4 layers: hidden 896, 14 heads, 2 KV heads, FFN 4864, vocab 151936), t5
(T5EncoderModel, t5-small). Text: input_ids and an attention_mask whose last seq/8 positions are
padding, seq 128; images 224x224. --tiny: 2 layers (2 stages for Swin and ConvNeXt), hidden 64 where
the class takes one width, seq 16, image 32, vocab 1000.
Weights: torch.manual_seed(0), the class's own init, then tests/models/fixtures/make_transformers.py's
randomize(model, 0) (norm affine pairs and constant parameters re-drawn); inputs from
numpy.random.default_rng(0). Export: the model called with keyword inputs through the fixtures' HFWrap,
torch.onnx.export(opset_version=17, dynamo=False, do_constant_folding=True) at the fixed batch and
shape; the graph is compiled as exported.

Timing, every system host to host (numpy in, numpy out), median of --repeat after --warmup:
  vkc     Model.bench (inputs copied in, outputs copied out), after compiler.host.warm_up;
          fp32 is vkc's default, fp16 is --precision fp16
  eager   torch.from_numpy(x).cuda() per input, forward under no_grad, .cpu().numpy() per output
  graphs  static GPU inputs; copy the host inputs in, replay the captured CUDA graph, copy out
torch runs fp32 with TF32 off and fp16 as model.half() (float inputs cast on the GPU). graphs/vkc =
torch graphs ms / vkc ms (above 1: vkc faster). rel L2: vkc's worst output against torch fp32's eager
output, fp16 rows too (the JSON's torch_rel_l2: torch fp16's, for scale). dispatches: vkc's per run.
The profile table is Model.profile's GPU time sorted by benchmarks/transformer_profile.py. Without
CUDA (a developer machine) torch runs on the CPU, graphs are n/a and vkc runs on the host's Vulkan
device (lavapipe).
One model's failure (export, compile, run, capture) is reported in its row; the others go on.
Progress goes to stderr, the tables to stdout, JSON with everything to --json (default
$OUT/transformers.json when $OUT is set).
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path

from benchmarks.cli import command_line, exit_on_help, vkc_commit

if __name__ == "__main__":
    exit_on_help(__doc__)

import numpy as np
import onnx
import torch

from benchmarks import transformer_profile as tp
from tests.models.fixtures.make_transformers import HFWrap, randomize

SEED = 0
SEQ, IMAGE, TINY_SEQ, TINY_IMAGE = 128, 224, 16, 32


@dataclass
class Spec:
    """A transformers model class, its config at full size and --tiny, and what it takes and gives."""
    model: str
    config: str
    full: dict
    tiny: dict
    inputs: str = "text"                   # text, image or audio
    outputs: tuple = ("last_hidden_state",)
    part: str | None = None                # a submodule to export (Whisper's encoder)


TINY_TEXT = dict(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256)
TINY_DECODER = dict(TINY_TEXT, num_key_value_heads=2, max_position_embeddings=64, use_cache=False)
POOLED = ("last_hidden_state", "pooler_output")
MODELS = {
    "bert": Spec("BertModel", "BertConfig",
                 dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                      intermediate_size=3072),
                 dict(TINY_TEXT, max_position_embeddings=64), outputs=POOLED),
    "distilbert": Spec("DistilBertModel", "DistilBertConfig",
                       dict(vocab_size=30522, dim=768, n_layers=6, n_heads=12, hidden_dim=3072),
                       dict(vocab_size=1000, dim=64, n_layers=2, n_heads=4, hidden_dim=256, max_position_embeddings=64)),
    "roberta": Spec("RobertaModel", "RobertaConfig",
                    dict(vocab_size=50265, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                         intermediate_size=3072, max_position_embeddings=514, type_vocab_size=1, pad_token_id=1),
                    dict(TINY_TEXT, max_position_embeddings=64, type_vocab_size=1, pad_token_id=1), outputs=POOLED),
    "gpt2": Spec("GPT2Model", "GPT2Config",
                 dict(vocab_size=50257, n_embd=768, n_layer=12, n_head=12, n_positions=1024, use_cache=False),
                 dict(vocab_size=1000, n_embd=64, n_layer=2, n_head=4, n_positions=64, use_cache=False,
                      bos_token_id=0, eos_token_id=0)),
    "vit": Spec("ViTModel", "ViTConfig",
                dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                     image_size=224, patch_size=16),
                dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
                     image_size=TINY_IMAGE, patch_size=8), inputs="image", outputs=POOLED),
    "swin": Spec("SwinModel", "SwinConfig",
                 dict(image_size=224, patch_size=4, embed_dim=96, depths=[2, 2, 6, 2], num_heads=[3, 6, 12, 24],
                      window_size=7),
                 dict(image_size=TINY_IMAGE, patch_size=4, embed_dim=32, depths=[1, 1], num_heads=[2, 4],
                      window_size=4), inputs="image", outputs=POOLED),
    "convnext": Spec("ConvNextModel", "ConvNextConfig",
                     dict(image_size=224, hidden_sizes=[96, 192, 384, 768], depths=[3, 3, 9, 3]),
                     dict(image_size=TINY_IMAGE, num_stages=2, hidden_sizes=[32, 64], depths=[1, 1]),
                     inputs="image", outputs=POOLED),
    "whisper": Spec("WhisperModel", "WhisperConfig",
                    dict(d_model=512, encoder_layers=6, encoder_attention_heads=8, encoder_ffn_dim=2048,
                         decoder_layers=6, decoder_attention_heads=8, decoder_ffn_dim=2048, num_mel_bins=80,
                         max_source_positions=1500, vocab_size=51865),
                    dict(d_model=64, encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=256,
                         decoder_layers=1, decoder_attention_heads=4, decoder_ffn_dim=256, num_mel_bins=80,
                         max_source_positions=TINY_SEQ, vocab_size=1000, pad_token_id=1, bos_token_id=2,
                         eos_token_id=2, decoder_start_token_id=3),
                    inputs="audio", part="encoder"),
    "llama": Spec("LlamaModel", "LlamaConfig",
                  dict(vocab_size=128256, hidden_size=2048, num_hidden_layers=4, num_attention_heads=32,
                       num_key_value_heads=8, intermediate_size=8192, max_position_embeddings=2048, use_cache=False),
                  TINY_DECODER),
    "qwen2": Spec("Qwen2Model", "Qwen2Config",
                  dict(vocab_size=151936, hidden_size=896, num_hidden_layers=4, num_attention_heads=14,
                       num_key_value_heads=2, intermediate_size=4864, max_position_embeddings=2048, use_cache=False),
                  TINY_DECODER),
    "t5": Spec("T5EncoderModel", "T5Config",
               dict(vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8),
               dict(vocab_size=1000, d_model=64, d_kv=16, d_ff=256, num_layers=2, num_heads=4)),
}


@dataclass
class Case:
    """One model at one batch: the wrapped module (float32, eval), its inputs and output names."""
    name: str
    batch: int
    net: torch.nn.Module
    feeds: dict
    outputs: list
    attention: str = ""


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def new_model(name: str, tiny: bool = False) -> torch.nn.Module:
    """MODELS[name] with seeded weights (the docstring's recipe), float32, on the CPU."""
    import transformers
    spec = MODELS[name]
    torch.manual_seed(SEED)
    config = getattr(transformers, spec.config)(**(spec.tiny if tiny else spec.full))
    model = getattr(transformers, spec.model)(config)
    model = getattr(model, spec.part) if spec.part else model
    randomize(model, SEED)
    return model


def build(name: str, batch: int, tiny: bool = False, model: torch.nn.Module | None = None) -> Case:
    """MODELS[name] (`model` when given: new_model's, reused across batches) and seeded inputs at `batch`."""
    model = (model if model is not None else new_model(name, tiny)).cpu()
    spec, config = MODELS[name], model.config
    feeds = inputs(spec.inputs, config, batch, tiny)
    net = HFWrap(model, list(feeds), list(spec.outputs)).eval()
    return Case(name, batch, net, feeds, list(spec.outputs), getattr(config, "_attn_implementation", "") or "")


def inputs(kind: str, config, batch: int, tiny: bool) -> dict:
    rng = np.random.default_rng(SEED)
    if kind == "image":
        size = TINY_IMAGE if tiny else IMAGE
        return {"pixel_values": rng.standard_normal((batch, 3, size, size)).astype(np.float32)}
    if kind == "audio":   # the encoder's fixed input: twice its positions, after the stride-2 conv
        frames = 2 * config.max_source_positions
        return {"input_features": rng.standard_normal((batch, config.num_mel_bins, frames)).astype(np.float32)}
    seq = TINY_SEQ if tiny else SEQ
    mask = np.ones((batch, seq), np.int64)
    mask[:, seq - seq // 8:] = 0
    ids = rng.integers(3, config.vocab_size, (batch, seq)).astype(np.int64)   # 0-2: special tokens
    return {"input_ids": ids, "attention_mask": mask}


def export(case: Case) -> onnx.ModelProto:
    """torch.onnx.export as a user calls it (grad enabled, to a file so that past 2 GiB the weights go
    to external data), loaded back with its weights."""
    args = tuple(torch.from_numpy(v) for v in case.feeds.values())
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the legacy exporter's and the tracer's, the same for every model
        path = os.path.join(tmp, "model.onnx")
        torch.onnx.export(case.net, args, path, opset_version=17, dynamo=False, do_constant_folding=True,
                          input_names=list(case.feeds), output_names=case.outputs)
        return onnx.load(path)


def median_s(f, warmup: int, repeat: int) -> float:
    for _ in range(warmup):
        f()
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def rel_l2(got, ref) -> float:
    got, ref = np.asarray(got, np.float64).ravel(), np.asarray(ref, np.float64).ravel()
    return float(np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30))


def load_model(bundle):
    from runtime_min import load
    try:
        return load(bundle, validation=False)
    except Exception as exc:  # noqa: BLE001  the first Vulkan instance after the machine starts sometimes fails: retry once
        log(f"    load failed ({type(exc).__name__}: {str(exc)[:120]}); retrying once")
        return load(bundle, validation=False)


def run_vkc(row: dict, proto, case: Case, precision: str, args) -> dict:
    """Compile, run once, time and profile; returns the outputs by name."""
    import compiler
    from compiler.host import warm_up
    t = time.perf_counter()
    bundle = compiler.compile_model(proto, target=args.target, precision=precision)
    row["compile_s"] = time.perf_counter() - t
    row["bundle_mb"] = len(bundle) / 2**20
    log(f"    vkc {precision}: compiled in {row['compile_s']:.1f} s ({row['bundle_mb']:.0f} MiB)")
    m = load_model(bundle)
    del bundle
    try:
        row["vkc_device"] = m.device_name
        got = m.run(case.feeds)
        warm_up(m, case.feeds)   # the GPU idled while the model exported and compiled
        row["vkc_ms"] = statistics.median(m.bench(case.feeds, warmup=args.warmup, repeat=args.repeat)) * 1e3
        log(f"    vkc {precision}: {row['vkc_ms']:.3f} ms")
        try:
            dispatches = m.profile(case.feeds, repeat=args.profile_repeat)
            row["dispatches"] = len(dispatches)
            row["profile"] = tp.summarize(dispatches, tp.attention_nodes(proto))
        except Exception as exc:  # noqa: BLE001  a failed profile still leaves the timings
            row["profile"] = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
        return {k: got[k] for k in case.outputs}
    finally:
        m.close()


def torch_reference(case: Case, dev) -> list:
    """torch fp32 (TF32 off) eager outputs on `dev`: what every row's rel L2 is measured against."""
    return forward(case.net.to(dev), case.feeds, dev, half=False)


def at_precision(net, precision: str):
    return copy.deepcopy(net).half() if precision == "fp16" else net


def to_device(feeds: dict, dev, half: bool) -> list:
    ts = [torch.from_numpy(v).to(dev) for v in feeds.values()]
    return [t.half() if half and t.is_floating_point() else t for t in ts]


def forward(net, feeds: dict, dev, half: bool) -> list:
    """Host to host: inputs to the device, the model, outputs back as float32 numpy."""
    with torch.no_grad():
        return [o.float().cpu().numpy() for o in net(*to_device(feeds, dev, half))]


def time_eager(net, feeds: dict, dev, half: bool, args) -> float:
    return median_s(lambda: forward(net, feeds, dev, half), args.warmup, args.repeat) * 1e3


def time_graphs(net, feeds: dict, dev, half: bool, args) -> float:
    """Capture the forward into a CUDA graph over static inputs; time copy in, replay, copy out."""
    with torch.no_grad():
        static_in = to_device(feeds, dev, half)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                net(*static_in)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = net(*static_in)
    host = [torch.from_numpy(v) for v in feeds.values()]

    def graphed():
        for dst, src in zip(static_in, host):
            dst.copy_(src)
        graph.replay()
        return [o.float().cpu().numpy() for o in static_out]

    return median_s(graphed, args.warmup, args.repeat) * 1e3


def run_torch(row: dict, case: Case, ref: list, precision: str, dev, args) -> None:
    """torch eager and CUDA-graph times at `precision`, each failure in its own key; at fp16 also
    torch fp16's rel L2 against `ref` (torch fp32), to judge vkc's fp16 figure by."""
    half = precision == "fp16"
    net = at_precision(case.net, precision).to(dev)
    timers = [("eager", time_eager)] + ([("graphs", time_graphs)] if dev.type == "cuda" else [])
    try:
        if half:
            row["torch_rel_l2"] = max(rel_l2(o, r) for o, r in zip(forward(net, case.feeds, dev, half), ref))
        for what, timer in timers:
            row[f"{what}_ms"] = timer(net, case.feeds, dev, half, args)
            log(f"    torch {what} {precision}: {row[f'{what}_ms']:.3f} ms")
    except Exception as exc:  # noqa: BLE001  a failed capture still leaves eager's figure
        traceback.print_exc()
        row["torch_error"] = short(exc)


def short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}"


def one_model(name: str, batches: list, precisions: list, dev, args) -> list:
    """The rows of one model: built once, exported at every batch, then vkc and torch at every precision."""
    model, rows = new_model(name, args.tiny), []
    for batch in batches:
        log(f"{name} batch {batch} ...")
        try:
            rows += one_batch(build(name, batch, args.tiny, model), precisions, dev, args)
        except Exception as exc:  # noqa: BLE001  export or reference failure: go on with the next
            traceback.print_exc()
            rows += [{"model": name, "batch": batch, "precision": p, "error": short(exc)} for p in precisions]
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    return rows


def one_batch(case: Case, precisions: list, dev, args) -> list:
    """The rows of one (model, batch): exported once, then vkc and torch at every precision."""
    t = time.perf_counter()
    proto = export(case)
    log(f"    exported in {time.perf_counter() - t:.1f} s ({len(proto.graph.node)} nodes, attention {case.attention})")
    ref = torch_reference(case, dev)
    rows = []
    for precision in precisions:
        row = {"model": case.name, "batch": case.batch, "precision": precision, "attention": case.attention,
               "onnx_nodes": len(proto.graph.node)}
        try:
            got = run_vkc(row, proto, case, precision, args)
            row["rel_l2"] = max(rel_l2(got[k], r) for k, r in zip(case.outputs, ref))
            log(f"    vkc {precision}: rel L2 vs torch fp32 {row['rel_l2']:.1e}")
        except Exception as exc:  # noqa: BLE001  vkc's failure still leaves torch's figures
            traceback.print_exc()
            row["vkc_error"] = short(exc)
        run_torch(row, case, ref, precision, dev, args)
        rows.append(row)
    return rows


def fmt(x, spec=".3f"):
    return "-" if x is None else format(x, spec)


def table(rows) -> str:
    head = ["model", "batch", "prec", "vkc ms", "eager ms", "graphs ms", "graphs/vkc", "rel L2", "dispatches"]
    out = [" ".join(f"{h:>10s}" if i else f"{h:10s}" for i, h in enumerate(head))]
    notes = []
    for r in rows:
        v, g = r.get("vkc_ms"), r.get("graphs_ms")
        cells = [r["model"], str(r["batch"]), r.get("precision", "-"), "error" if "vkc_error" in r else fmt(v),
                 fmt(r.get("eager_ms")), fmt(g), fmt(g / v if g and v else None, ".2f"), fmt(r.get("rel_l2"), ".1e"),
                 fmt(r.get("dispatches"), "d")]
        out.append(" ".join(f"{c:>10s}" if i else f"{c:10s}" for i, c in enumerate(cells)))
        notes += [f"{r['model']} b{r['batch']} {r.get('precision', '')} {k}: {r[k]}"
                  for k in ("error", "vkc_error", "torch_error") if k in r]
    return "\n".join(out + notes)


def profile_table(rows) -> str:
    """Per row: vkc's GPU ms over its dispatches, and each category's share and ms."""
    out = [f"{'model':10s} {'batch':>5s} {'prec':>5s} {'GPU ms':>8s} " + " ".join(f"{c:>15s}" for c in tp.CATEGORIES)]
    for r in rows:
        p = r.get("profile")
        if not p or "error" in p:
            continue
        cats = p["categories"]
        cells = [f"{cats[c]['share'] * 100:3.0f}% {cats[c]['ms']:7.3f}" for c in tp.CATEGORIES]
        out.append(f"{r['model']:10s} {r['batch']:5d} {r['precision']:>5s} {p['gpu_ms']:8.3f} "
                   + " ".join(f"{c:>15s}" for c in cells))
    return "\n".join(out)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of: {', '.join(MODELS)}")
    ap.add_argument("--batches", default="1,8", help="comma-separated")
    ap.add_argument("--precision", default="fp32,fp16", help="comma-separated, of: fp32, fp16")
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--profile-repeat", type=int, default=10)
    ap.add_argument("--target", default=None, help="vkc target; default nvidia with CUDA, else host")
    ap.add_argument("--tiny", action="store_true", help="2 layers, hidden 64, seq 16, image 32: for a CPU machine")
    ap.add_argument("--json", default=None, help="default $OUT/transformers.json when $OUT is set")
    args = ap.parse_args()
    args.models, args.batches = args.models.split(","), [int(b) for b in args.batches.split(",")]
    args.precisions = args.precision.split(",")
    for bad, known in ((set(args.models) - set(MODELS), MODELS), (set(args.precisions) - {"fp32", "fp16"}, ("fp32", "fp16"))):
        if bad:
            ap.error(f"unknown {', '.join(sorted(bad))} (known: {', '.join(known)})")
    return args


def write_json(path: str, rows: list, args, note: str, started: float) -> None:
    import transformers
    cuda = torch.cuda.is_available()
    meta = {"tiny": args.tiny, "target": args.target, "precisions": args.precisions, "torch": torch.__version__,
            "transformers": transformers.__version__, "cuda": cuda, "note": note,
            "device": torch.cuda.get_device_name(0) if cuda else
            f"torch on the CPU, vkc on {next((r['vkc_device'] for r in rows if 'vkc_device' in r), '?')}", "repeat": args.repeat, "warmup": args.warmup,
            "wall_s": time.time() - started, "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started)),
            "vkc_commit": vkc_commit(), "command": command_line(),
            "configs": {n: MODELS[n].tiny if args.tiny else MODELS[n].full for n in args.models}}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    log(f"wrote {path}")


def main() -> int:
    args = parse_args()
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    args.target = args.target or ("nvidia" if cuda else "host")
    note = (f"torch {torch.__version__} on {torch.cuda.get_device_name(0)} (TF32 off)" if cuda else
            f"torch {torch.__version__} on the CPU: no CUDA here, so torch eager runs on the CPU and CUDA graphs are n/a")
    log(f"{note}; vkc target {args.target}; {'tiny' if args.tiny else 'full'} configs; batches {args.batches}; "
        f"precisions {args.precisions}")
    rows, started = [], time.time()
    for name in args.models:
        try:
            rows += one_model(name, args.batches, args.precisions, dev, args)
        except Exception as exc:  # noqa: BLE001  the class or its config refused: go on with the next
            traceback.print_exc()
            rows += [{"model": name, "batch": b, "precision": p, "error": short(exc)}
                     for b in args.batches for p in args.precisions]
    print(note)
    print(f"vkc --target {args.target}; host to host, median of {args.repeat} after {args.warmup} warm-ups; "
          "graphs/vkc = torch CUDA graphs ms / vkc ms (> 1: vkc faster); rel L2 against torch fp32")
    print(table(rows))
    print("\nWhere vkc's GPU time goes (Model.profile, share and ms per category)")
    print(profile_table(rows))
    path = args.json or (os.path.join(os.environ["OUT"], "transformers.json") if os.environ.get("OUT") else None)
    if path:
        write_json(path, rows, args, note, started)
    return 0 if all(not any(k.endswith("error") for k in r) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
