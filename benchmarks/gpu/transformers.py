#!/usr/bin/env python3
"""On the GPU machine: BERT-base, GPT-2 small and ViT-B/16 (random weights) exported to ONNX, compiled
by vkc there, checked against torch, and timed host to host against torch eager and torch CUDA
graphs (float32, TF32 off), in one run.

    source benchmarks/gpu/setup.sh
    python3 -m benchmarks.gpu.transformers                          # all three, batch 1 and 8
    python3 -m benchmarks.gpu.transformers --models bert --batches 1 --repeat 50
    python3 -m benchmarks.gpu.transformers --tiny                   # hidden 64, 2 layers, seq 16, image 32
    python3 -m benchmarks.gpu.transformers --precision fp16         # vkc --precision fp16, torch .half()

Models (plain nn.Modules with the module structure and forward code of transformers' BertModel and
GPT2Model, eager attention, and torchvision's vit_b_16, so that the TorchScript exporter writes the
op forms of tests/models/fixtures/README.md): BERT-base (hidden 768, 12 layers, 12 heads, FFN 3072,
seq 128, vocab 30522, inputs input_ids + attention_mask with a padded tail, outputs last_hidden_state
and pooler_output), GPT-2 small (768, 12 layers, 12 heads, seq 128, vocab 50257, causal mask and
attention_mask, gelu_new, Conv1D = Gemm), ViT-B/16 (224x224, patch 16, 197 tokens, 768, 12 layers,
12 heads, MLP 3072, 1000 classes; nn.MultiheadAttention). Weights: torch.manual_seed, then
make_transformers.randomize (LayerNorm affine and constant parameters re-drawn with noise).
Export: torch.onnx.export(opset_version=17, dynamo=False) at the fixed batch and shape.

Timing, every system host to host (numpy in, numpy out), median of --repeat after --warmup (vkc first
runs until its GPU time is steady: compiler.host.warm_up):
  vkc     Model.run (Model.bench: inputs copied in, outputs copied out)
  eager   torch.from_numpy(x).cuda() per input, forward under no_grad, .cpu().numpy() per output
  graphs  static GPU input buffers; copy the host inputs in, replay the captured graph, copy out
  (.cpu() synchronizes). rel L2: vkc's worst output against torch on the GPU.
vkc's GPU time per dispatch comes from Model.profile, sorted by benchmarks/transformer_profile.py;
attention GFLOP/s counts 4*B*H*S^2*D per layer (QK^T and PV), matmul GFLOP/s the kernels' own count.
Without CUDA (a developer machine) torch runs on the CPU, graphs are n/a, and the output says so.
One model's failure (export, compile, run) is reported in its row; the others go on. Progress goes
to stderr, the table to stdout, JSON to --json (default $OUT/transformers_h200.json when $OUT is set).
"""
from __future__ import annotations

import argparse
import io
import json
import math
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

from benchmarks.cli import command_line, exit_on_help, vkc_commit

if __name__ == "__main__":
    exit_on_help(__doc__)

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from torch import nn

from benchmarks import transformer_profile as tp
from tests.models.fixtures.make_transformers import VisionTransformer, randomize

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False

FULL = {"hidden": 768, "layers": 12, "heads": 12, "ffn": 3072, "seq": 128, "image": 224, "patch": 16,
        "classes": 1000, "bert_vocab": 30522, "gpt2_vocab": 50257, "bert_positions": 512, "gpt2_positions": 1024}
TINY = {"hidden": 64, "layers": 2, "heads": 4, "ffn": 256, "seq": 16, "image": 32, "patch": 8,
        "classes": 10, "bert_vocab": 1000, "gpt2_vocab": 1000, "bert_positions": 64, "gpt2_positions": 64}
TARGETS_MS = {  # from the issue: torch on the H200 (eager b1, graphs b1, graphs b8)
    "bert": {1: (8.3, 3.35), 8: (None, 7.4)},
    "gpt2": {1: (10.2, 2.85), 8: (None, 6.8)},
    "vit": {1: (5.9, 3.2), 8: (None, 9.2)},
}


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def padding_bias(mask_bool: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """transformers 5's eager mask: a bool [B,1,S,S] mask to 0 / the most negative value of the
    model's dtype, added to scores."""
    # The constants live on the mask's device: a CPU scalar would be copied during CUDA-graph capture.
    dev = mask_bool.device
    return torch.where(mask_bool, torch.zeros((), dtype=dtype, device=dev),
                       torch.full((), torch.finfo(dtype).min, dtype=dtype, device=dev))


# --- BERT (transformers' BertModel, eager attention, absolute positions) ---


class BertSelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.heads, self.head_dim = c["heads"], c["hidden"] // c["heads"]
        self.query = nn.Linear(c["hidden"], c["hidden"])
        self.key = nn.Linear(c["hidden"], c["hidden"])
        self.value = nn.Linear(c["hidden"], c["hidden"])
        self.scaling = self.head_dim ** -0.5

    def forward(self, x, bias):
        b, s, _ = x.shape
        shape = (b, s, self.heads, self.head_dim)
        q = self.query(x).view(shape).transpose(1, 2)
        k = self.key(x).view(shape).transpose(1, 2)
        v = self.value(x).view(shape).transpose(1, 2)
        w = torch.matmul(q, k.transpose(2, 3)) * self.scaling + bias
        w = F.softmax(w, dim=-1)
        return torch.matmul(w, v).transpose(1, 2).reshape(b, s, -1)


class BertLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        h = c["hidden"]
        self.attention = BertSelfAttention(c)
        self.attention_dense, self.attention_norm = nn.Linear(h, h), nn.LayerNorm(h, eps=1e-12)
        self.intermediate, self.act = nn.Linear(h, c["ffn"]), nn.GELU()
        self.output, self.output_norm = nn.Linear(c["ffn"], h), nn.LayerNorm(h, eps=1e-12)

    def forward(self, x, bias):
        x = self.attention_norm(self.attention_dense(self.attention(x, bias)) + x)
        return self.output_norm(self.output(self.act(self.intermediate(x))) + x)


class Bert(nn.Module):
    def __init__(self, c):
        super().__init__()
        h = c["hidden"]
        self.word_embeddings = nn.Embedding(c["bert_vocab"], h)
        self.position_embeddings = nn.Embedding(c["bert_positions"], h)
        self.token_type_embeddings = nn.Embedding(2, h)
        self.register_buffer("position_ids", torch.arange(c["bert_positions"]).unsqueeze(0), persistent=False)
        self.register_buffer("token_type_ids", torch.zeros(1, c["bert_positions"], dtype=torch.long), persistent=False)
        self.norm = nn.LayerNorm(h, eps=1e-12)
        self.layers = nn.ModuleList(BertLayer(c) for _ in range(c["layers"]))
        self.pooler = nn.Linear(h, h)

    def forward(self, input_ids, attention_mask):
        b, s = input_ids.shape
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(self.token_type_ids[:, :s].expand(b, s))
        x = self.norm(x + self.position_embeddings(self.position_ids[:, :s]))
        bias = padding_bias(attention_mask[:, None, None, :].to(torch.bool).expand(b, 1, s, s), x.dtype)
        for layer in self.layers:
            x = layer(x, bias)
        return x, torch.tanh(self.pooler(x[:, 0]))


# --- GPT-2 (transformers' GPT2Model, eager attention, Conv1D = addmm) ---


class Conv1D(nn.Module):
    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf).normal_(std=0.02))
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(size_out)


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class GPT2Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        h = c["hidden"]
        self.heads, self.head_dim, self.hidden = c["heads"], h // c["heads"], h
        self.ln_1, self.ln_2 = nn.LayerNorm(h, eps=1e-5), nn.LayerNorm(h, eps=1e-5)
        self.c_attn, self.attn_proj = Conv1D(3 * h, h), Conv1D(h, h)
        self.c_fc, self.mlp_proj = Conv1D(c["ffn"], h), Conv1D(h, c["ffn"])
        self.scaling = self.head_dim ** -0.5

    def forward(self, x, bias):
        b, s, _ = x.shape
        shape = (b, s, self.heads, self.head_dim)
        q, k, v = self.c_attn(self.ln_1(x)).split(self.hidden, dim=2)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        w = torch.matmul(q, k.transpose(-1, -2)) * self.scaling + bias
        w = F.softmax(w, dim=-1).type(v.dtype)
        a = torch.matmul(w, v).transpose(1, 2).reshape(b, s, -1)
        x = x + self.attn_proj(a)
        return x + self.mlp_proj(gelu_new(self.c_fc(self.ln_2(x))))


class GPT2(nn.Module):
    def __init__(self, c):
        super().__init__()
        n = c["gpt2_positions"]
        self.wte, self.wpe = nn.Embedding(c["gpt2_vocab"], c["hidden"]), nn.Embedding(n, c["hidden"])
        self.register_buffer("position_ids", torch.arange(n).unsqueeze(0), persistent=False)
        self.register_buffer("causal", torch.tril(torch.ones(n, n, dtype=torch.bool))[None, None], persistent=False)
        self.h = nn.ModuleList(GPT2Block(c) for _ in range(c["layers"]))
        self.ln_f = nn.LayerNorm(c["hidden"], eps=1e-5)

    def forward(self, input_ids, attention_mask):
        b, s = input_ids.shape
        x = self.wte(input_ids) + self.wpe(self.position_ids[:, :s])
        mask = self.causal[:, :, :s, :s] & attention_mask[:, None, None, :].to(torch.bool)
        bias = padding_bias(mask.expand(b, 1, s, s), x.dtype)
        for block in self.h:
            x = block(x, bias)
        return (self.ln_f(x),)


class ViT(nn.Module):
    """torchvision's vit_b_16 structure; returns a tuple like the others."""

    def __init__(self, c):
        super().__init__()
        self.net = VisionTransformer(image_size=c["image"], patch_size=c["patch"], num_layers=c["layers"],
                                     num_heads=c["heads"], hidden_dim=c["hidden"], mlp_dim=c["ffn"],
                                     num_classes=c["classes"])

    def forward(self, x):
        return (self.net(x),)


def build(name: str, c: dict, batch: int, seed: int = 0):
    """(module in eval mode, numpy inputs, input names, output names, attention shape (H, S, D))."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    h, d = c["heads"], c["hidden"] // c["heads"]
    if name in ("bert", "gpt2"):
        net = Bert(c) if name == "bert" else GPT2(c)
        s = c["seq"]
        ids = rng.integers(0, 1000, (batch, s)).astype(np.int64)
        mask = np.ones((batch, s), np.int64)
        mask[:, s - s // 8:] = 0  # padded tail
        feeds = {"input_ids": ids, "attention_mask": mask}
        outs = ["last_hidden_state", "pooler_output"] if name == "bert" else ["last_hidden_state"]
    elif name == "vit":
        net = ViT(c)
        s = (c["image"] // c["patch"]) ** 2 + 1
        feeds = {"input": rng.standard_normal((batch, 3, c["image"], c["image"])).astype(np.float32)}
        outs = ["logits"]
    else:
        raise ValueError(f"unknown model {name!r} (bert, gpt2, vit)")
    randomize(net, seed)
    return net.eval(), feeds, list(feeds), outs, (h, s, d)


def export(net, feeds, in_names, out_names) -> onnx.ModelProto:
    # a plain call with grad enabled: under no_grad nn.MultiheadAttention takes its fused fast path,
    # which the TorchScript exporter cannot write
    args = tuple(torch.from_numpy(feeds[n]) for n in in_names)
    buf = io.BytesIO()
    torch.onnx.export(net, args, buf, opset_version=17, dynamo=False, do_constant_folding=True,
                      input_names=in_names, output_names=out_names)
    return onnx.load_from_string(buf.getvalue())


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


def run_vkc(row, proto, feeds, out_names, args, attn_shape, batch, layers):
    import compiler
    from compiler.host import warm_up
    t = time.perf_counter()
    bundle = compiler.compile_model(proto, target=args.target, precision=args.precision)
    row["compile_s"] = time.perf_counter() - t
    row["bundle_mb"] = len(bundle) / 2**20
    log(f"    compiled for {args.target} in {row['compile_s']:.1f} s ({row['bundle_mb']:.0f} MiB)")
    if args.compile_only:
        return None
    m = load_model(bundle)
    try:
        row["vkc_device"] = m.device_name
        got = m.run(feeds)
        warm_up(m, feeds)   # the GPU idled while the model exported and compiled
        t_vkc = statistics.median(m.bench(feeds, warmup=args.warmup, repeat=args.repeat))
        row["vkc_ms"] = t_vkc * 1e3
        log(f"    vkc {row['vkc_ms']:.3f} ms")
        try:
            h, s, d = attn_shape
            prof = m.profile(feeds, repeat=args.profile_repeat)
            row["profile"] = tp.summarize(prof, tp.attention_nodes(proto),
                                          attention_flops=4 * batch * h * s * s * d * layers)
        except Exception as exc:  # noqa: BLE001  a failed profile still leaves the timings
            row["profile"] = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
        return {k: got[k] for k in out_names}
    finally:
        m.close()


def run_torch(row, net, feeds, in_names, dev, args):
    """Reference outputs (float32), eager and CUDA-graph times (host to host; with --precision fp16
    the model in float16, its float inputs cast on the GPU and its outputs cast back to float32,
    as vkc's fp16 bundle takes and gives float32)."""
    net = net.to(dev)
    half = args.precision == "fp16"

    def cast(t):
        return t.half() if half and t.is_floating_point() else t

    with torch.no_grad():
        tf32 = torch.backends.cuda.matmul.allow_tf32   # the reference in float32 whatever is timed
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        ref = [o.cpu().numpy() for o in net(*(torch.from_numpy(feeds[n]).to(dev) for n in in_names))]
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
        if half:
            net = net.half()

        def eager():
            outs = net(*(cast(torch.from_numpy(feeds[n]).to(dev)) for n in in_names))
            return [o.float().cpu().numpy() for o in outs]

        row["eager_ms"] = median_s(eager, args.warmup, args.repeat) * 1e3
        log(f"    torch eager ({dev}) {row['eager_ms']:.3f} ms")
        if dev.type != "cuda":
            row["graphs_ms"] = None
            row["graphs_note"] = "n/a: no CUDA"
            return ref
        static_in = [cast(torch.from_numpy(feeds[n]).to(dev)) for n in in_names]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                net(*static_in)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = net(*static_in)
        host = [torch.from_numpy(feeds[n]) for n in in_names]

        def graphed():
            for dst, src in zip(static_in, host):
                dst.copy_(src)
            graph.replay()
            return [o.float().cpu().numpy() for o in static_out]

        row["graphs_ms"] = median_s(graphed, args.warmup, args.repeat) * 1e3
        row["graphs_rel_l2_vs_eager"] = max(rel_l2(a, b) for a, b in zip(graphed(), ref))
        log(f"    torch CUDA graphs {row['graphs_ms']:.3f} ms")
    return ref


def one(name, batch, c, dev, args) -> dict:
    row = {"model": name, "batch": batch}
    net, feeds, in_names, out_names, attn_shape = build(name, c, batch)
    row["tokens"] = attn_shape[1]
    t = time.perf_counter()
    proto = export(net, feeds, in_names, out_names)
    log(f"    exported in {time.perf_counter() - t:.1f} s ({len(proto.graph.node)} nodes)")
    got = None
    try:
        got = run_vkc(row, proto, feeds, out_names, args, attn_shape, batch, c["layers"])
    except Exception as exc:  # noqa: BLE001  vkc's failure still leaves torch's figures
        traceback.print_exc()
        row["vkc_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
    del proto
    if args.compile_only:
        return row
    ref = run_torch(row, net, feeds, in_names, dev, args)
    if got is not None:
        row["rel_l2"] = max(rel_l2(got[k], r) for k, r in zip(out_names, ref))
        log(f"    vkc rel L2 vs torch {row['rel_l2']:.1e}")
    return row


def fmt(x, spec=".3f"):
    return "-" if x is None else format(x, spec)


def table(rows) -> str:
    out = [(f"{'model':6s} {'batch':>5s} {'vkc ms':>9s} {'eager ms':>9s} {'graphs ms':>9s} {'eager/vkc':>9s} "
            f"{'graphs/vkc':>10s} {'rel L2':>8s}")]
    for r in rows:
        v = r.get("vkc_ms")
        e, g = r.get("eager_ms"), r.get("graphs_ms")
        out.append(f"{r['model']:6s} {r['batch']:5d} {fmt(v) if 'vkc_error' not in r else 'error':>9s} {fmt(e):>9s} "
                   f"{fmt(g):>9s} {fmt(e / v if e and v else None, '.2f'):>9s} "
                   f"{fmt(g / v if g and v else None, '.2f'):>10s} {fmt(r.get('rel_l2'), '.1e'):>8s}")
        if "vkc_error" in r:
            out.append(f"       vkc: {r['vkc_error']}")
        if "error" in r:
            out.append(f"       {r['error']}")
    return "\n".join(out)


def profile_lines(r) -> list[str]:
    p = r.get("profile")
    if not p:
        return []
    if "error" in p:
        return [f"{r['model']} b{r['batch']}: profile failed: {p['error']}"]
    cats = p["categories"]
    lines = [(f"{r['model']} b{r['batch']}: vkc GPU {p['gpu_ms']:.3f} ms over {p['dispatches']} dispatches "
              f"(wall {r['vkc_ms']:.3f} ms)")]
    lines.append("    " + ", ".join(f"{c} {cats[c]['ms']:.3f} ms {cats[c]['share'] * 100:.0f}%" for c in tp.CATEGORIES))
    lines.append(f"    attention {cats['attention']['gflops']:.0f} GFLOP/s (4*B*H*S^2*D per layer), "
                 f"matmul {cats['matmul']['gflops']:.0f} GFLOP/s")
    for k in p["top_kernels"]:
        lines.append(f"      {k['kernel']:48s} x{k['dispatches']:3d} {k['ms']:8.3f} ms {k['gflops']:9.1f} GFLOP/s")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="bert,gpt2,vit")
    ap.add_argument("--batches", default=None, help="comma-separated; default 1,8 (1 with --tiny)")
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--profile-repeat", type=int, default=10)
    ap.add_argument("--target", default=None, help="vkc target; default nvidia with CUDA, else host")
    ap.add_argument("--tiny", action="store_true", help="hidden 64, 2 layers, 4 heads, seq 16, image 32 (patch 8)")
    ap.add_argument("--compile-only", action="store_true", help="export and compile only (no Vulkan, no timing)")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "fp16", "fp16-matmul"],
                    help="vkc compile --precision; fp16 runs torch in float16 too, fp16-matmul torch float32 with "
                         "TF32 on (rel L2 always vs float32 torch)")
    ap.add_argument("--json", default=None, help="default $OUT/transformers_h200.json when $OUT is set")
    args = ap.parse_args()

    cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    # vkc's fp16-matmul (float16 operands in the matrix products of a float32 model) against
    # torch float32 with TF32 matmuls and convolutions, its counterpart on CUDA.
    tf32 = args.precision == "fp16-matmul"
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
    args.target = args.target or ("nvidia" if cuda else "host")
    c = TINY if args.tiny else FULL
    batches = [int(b) for b in (args.batches or ("1" if args.tiny else "1,8")).split(",")]
    note = (f"torch {torch.__version__} on {torch.cuda.get_device_name(0)} (TF32 {'on' if tf32 else 'off'})" if cuda else
            f"torch {torch.__version__} on the CPU: no CUDA here, so torch eager runs on the CPU and "
            "CUDA graphs are n/a")
    log(f"{note}; vkc target {args.target}; {'tiny' if args.tiny else 'full'} configs; batches {batches}; "
        f"precision {args.precision}")

    rows, started = [], time.time()
    for name in args.models.split(","):
        for batch in batches:
            log(f"{name} batch {batch} ...")
            try:
                rows.append(one(name, batch, c, dev, args))
            except Exception as exc:  # noqa: BLE001  export or torch failure: keep going with the next model
                traceback.print_exc()
                rows.append({"model": name, "batch": batch, "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
            if cuda:
                torch.cuda.empty_cache()

    print(note)
    print(f"vkc --target {args.target} --precision {args.precision}; host to host, median of {args.repeat} after {args.warmup} warm-ups; "
          "ratios = torch ms / vkc ms (> 1: vkc faster)")
    if args.compile_only:
        for r in rows:
            print(r)
    else:
        print(table(rows))
        for r in rows:
            for line in profile_lines(r):
                print(line)
        if not args.tiny:
            print("targets (torch on the H200, from the issue): " + "; ".join(
                f"{m} b{b} " + " / ".join(f"{k} {v} ms" for k, v in zip(("eager", "graphs"), t) if v)
                for m, bt in TARGETS_MS.items() for b, t in bt.items()))
    path = args.json or (os.path.join(os.environ["OUT"], "transformers_h200.json") if os.environ.get("OUT") else None)
    if path:
        meta = {"config": c, "tiny": args.tiny, "target": args.target, "precision": args.precision, "torch": torch.__version__, "cuda": cuda,
                "device": torch.cuda.get_device_name(0) if cuda else "cpu", "repeat": args.repeat,
                "warmup": args.warmup, "wall_s": time.time() - started,
                "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started)), "vkc_commit": vkc_commit(),
                "command": command_line()}
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
        log(f"wrote {path}")
    return 0 if all("error" not in r and "vkc_error" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
