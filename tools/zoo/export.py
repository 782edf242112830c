"""Export the zoo's models to ONNX as users do (run with the export venv, tools/zoo/requirements.txt).

    python tools/zoo/export.py torchvision [--out /tmp/zoo/exports] [--only NAME ...] [--limit N]
    python tools/zoo/export.py hf-default | hf-random
    python tools/zoo/export.py torchvision --exporter dynamo

Sources: every torchvision classification, segmentation and video model (library-default init,
eval mode, the smallest input of a short ladder that the architecture takes); every class of
transformers' MODEL_MAPPING_NAMES built from a shrunk config (hf-default: library-default init;
hf-random: every parameter re-drawn normal(0, 0.5), seeded). Each export is
`torch.onnx.export(..., opset_version=17, dynamo=False)` with a dynamic batch axis (a static
export where that fails), the graph left as the exporter wrote it. `--exporter dynamo` exports
with torch's current default instead, `torch.onnx.export(..., dynamo=True)` at its own default
opset, into <out>/<source>-dynamo/, so the two exporters' files never mix.

Each model leaves <out>/<source>/<name>.json (the recipe of its inputs, or why it was not
exported; the opset written) and, when exported, <name>.onnx; a model whose .json exists is not
exported again.
"""
from __future__ import annotations

import argparse
import contextlib
import inspect
import io
import json
import signal
import sys
import time
import traceback
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch

from recipe import EXPORTERS, float_input, folder, ids_input, make_feed, mask_input
from shrink import shrink_config

OPSET = 17  # the torchscript exporter's; the dynamo exporter keeps its own default
EXPORT_SECONDS = 240
MAX_PARAMS = 150_000_000  # the exporter's protobuf limit is 2 GiB; lavapipe's patience is less
SEQ = 16


class ExportTimeout(BaseException):
    """Not an Exception: torch's exporter catches those and goes on, past the alarm."""


def _alarm(signum, frame):
    raise ExportTimeout(f"export took over {EXPORT_SECONDS} s")


def first_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


# ---------------------------------------------------------------------------------------------
# ---------------------------------------------------------------------------------------------
# one export
# ---------------------------------------------------------------------------------------------

class Positional(torch.nn.Module):
    """Call a model with keyword arguments from positional graph inputs; return its tensors as a
    tuple (transformers' models take keywords and return ModelOutput dicts)."""

    def __init__(self, model, names=None, extra=None, outputs=None):
        super().__init__()
        self.model, self.names, self.extra, self.outputs = model, names, dict(extra or {}), outputs

    def forward(self, *args):
        out = (self.model(**dict(zip(self.names, args)), **self.extra) if self.names else
               self.model(*args))
        if isinstance(out, torch.Tensor):
            return out
        items = out.items() if hasattr(out, "items") else enumerate(out)
        tensors = [(str(k), v) for k, v in items if isinstance(v, torch.Tensor)]
        if self.outputs is None:
            self.outputs = [k for k, _ in tensors]
        return tuple(v for _, v in tensors)


def torch_feeds(specs, batch, seed=0):
    rng = np.random.default_rng(seed)
    return [torch.from_numpy(make_feed(s, batch, rng)) for s in specs]


def torch_export(module, args, path: Path, names, outs, dynamic: bool, exporter: str) -> None:
    if exporter == "torchscript":
        axes = {n: {0: "batch"} for n in [*names, *outs]} if dynamic else None
        torch.onnx.export(module, args, str(path), opset_version=OPSET, dynamo=False,
                          input_names=names, output_names=outs, dynamic_axes=axes)
        return
    # dynamo: the batch axis of each positional input by name (the exporter makes it Dim.DYNAMIC;
    # outputs follow); weights inside the .onnx, as the zoo's models are under 2 GiB, so the file
    # is the whole model (its hash, a fixture)
    shapes = tuple({0: "batch"} for _ in names) if dynamic else None
    if shapes and any(p.kind == p.VAR_POSITIONAL for p in inspect.signature(module.forward).parameters.values()):
        shapes = (shapes,)  # torch.export matches them to forward's parameters: *args is one
    torch.onnx.export(module, args, str(path), dynamo=True, external_data=False,
                      input_names=names, output_names=outs, dynamic_shapes=shapes)


def export(module, specs, path: Path, output_names=None, exporter: str = "torchscript") -> dict:
    """Export with a dynamic batch axis; fall back to a static one when that export fails or
    onnxruntime cannot run it at batch 2. Returns facts for the recipe."""
    names = [s["name"] for s in specs]
    args = tuple(torch_feeds(specs, 1))
    with torch.no_grad():
        expected = module(*args)
    expected = [expected] if isinstance(expected, torch.Tensor) else list(expected)
    outs = output_names or getattr(module, "outputs", None) or [f"output{i}" for i in range(len(expected))]
    attempts = [True, False]
    last = None
    for dynamic in attempts:
        try:
            with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                    contextlib.redirect_stderr(io.StringIO()):
                warnings.simplefilter("ignore")
                torch_export(module, args, path, names, outs, dynamic, exporter)
            sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
            got = sess.run(None, {n: a.numpy() for n, a in zip(names, args)})
            diff = max(float(np.abs(g - e.detach().numpy()).max()) if g.size else 0.0
                       for g, e in zip(got, expected))
            if dynamic:
                sess.run(None, {n: a.numpy() for n, a in zip(names, torch_feeds(specs, 2))})
            opset = next(o.version for o in onnx.load(str(path), load_external_data=False).opset_import
                         if o.domain in ("", "ai.onnx"))
            return {"dynamic_batch": dynamic, "outputs": outs, "torch_vs_ort_max_abs": diff,
                    "exporter": exporter, "opset": opset}
        except Exception as exc:  # noqa: BLE001 - every failure is recorded with its reason
            last = exc
    raise last


def record(out: Path, name: str, facts: dict) -> None:
    (out / f"{name}.json").write_text(json.dumps(facts, indent=1, sort_keys=True))


def export_one(out: Path, name: str, candidates, exporter: str = "torchscript") -> None:
    """candidates() yields builds, each () -> (module, input specs, extra facts), smallest input
    first; the first that exports is kept. Every failure is recorded, not dropped."""
    if (out / f"{name}.json").exists():
        return
    facts = {"name": name, "torch": torch.__version__}
    start = time.perf_counter()
    signal.alarm(EXPORT_SECONDS)
    errors = []
    try:
        for build in candidates():
            stage = "build"
            try:
                torch.manual_seed(0)
                module, specs, extra = build()
                facts.update(extra)
                params = sum(p.numel() for p in module.parameters())
                facts["params"] = params
                if params > MAX_PARAMS:
                    raise RuntimeError(f"{params / 1e6:.0f} M parameters, over the zoo's {MAX_PARAMS / 1e6:.0f} M")
                module.eval()
                stage = "export"
                facts.update(export(module, specs, out / f"{name}.onnx", exporter=exporter))
                facts.update(status="exported", inputs=specs)
                break
            except Exception as exc:  # noqa: BLE001 - try the next candidate
                errors.append((stage, exc))
        else:
            stage, exc = errors[-1]
            raise exc
    except BaseException as exc:  # noqa: BLE001
        if isinstance(exc, KeyboardInterrupt):
            raise
        facts.update(status="not exported", stage=stage, reason=first_line(exc),
                     where=traceback.format_exception(exc, limit=-2)[-3:],
                     tried=[f"{st}: {first_line(e)}" for st, e in errors][:4])
        (out / f"{name}.onnx").unlink(missing_ok=True)
    finally:
        signal.alarm(0)
    facts["export_seconds"] = round(time.perf_counter() - start, 2)
    record(out, name, facts)
    print(f"{name}: {facts['status']} {facts.get('reason', '')} ({facts['export_seconds']} s)", flush=True)


# ---------------------------------------------------------------------------------------------
# torchvision
# ---------------------------------------------------------------------------------------------

IMAGE_LADDER = (64, 96, 128, 224)
VIDEO_LADDER = ((4, 32, 32), (8, 64, 64), (16, 112, 112), (16, 224, 224))
# models whose input size is a constructor argument (position embeddings sized to it)
SIZED = {"vit_": "image_size", "maxvit": "input_size"}


def torchvision_models() -> list[tuple[str, str]]:
    from torchvision import models
    return [(kind, n) for kind, module in (("classification", models), ("segmentation", models.segmentation),
                                           ("video", models.video))
            for n in models.list_models(module=module)]


def build_torchvision(kind: str, name: str):
    """One candidate per input size of the ladder (the export itself may refuse a small one, as
    adaptive pooling to a size that does not divide the input does)."""
    from torchvision import models

    def at(size):
        def build():
            shape = [1, 3, *size] if kind == "video" else [1, 3, size, size]
            kwargs = {"weights": None}
            if kind == "segmentation":
                kwargs["weights_backbone"] = None
            for prefix, arg in SIZED.items():
                if name.startswith(prefix):
                    kwargs[arg] = size if arg == "image_size" else (size, size)
            model = models.get_model(name, **kwargs).eval()
            with torch.no_grad():
                model(torch.zeros(shape))
            wrapped = Positional(model) if kind == "segmentation" else model
            return wrapped, [float_input("input", shape)], {"source": f"torchvision.models ({kind})",
                                                            "class": type(model).__name__,
                                                            "input_size": list(size) if kind == "video" else size}
        return build
    return lambda: (at(size) for size in (VIDEO_LADDER if kind == "video" else IMAGE_LADDER))


# ---------------------------------------------------------------------------------------------
# transformers
# ---------------------------------------------------------------------------------------------

def hf_models() -> list[tuple[str, str]]:
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES
    seen, rows = set(), []
    for model_type, cls in MODEL_MAPPING_NAMES.items():
        cls = cls[0] if isinstance(cls, (list, tuple)) else cls
        if cls not in seen:
            seen.add(cls)
            rows.append((model_type, cls))
    return rows


def _accepts(fn, name) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind == p.VAR_KEYWORD for p in params.values())


def _setting(config, names, default):
    """The first of `names` the config (or a config nested in it: an encoder's, an audio
    model's) sets to an int."""
    subs = [getattr(config, n) for n in vars(config) if hasattr(getattr(config, n, None), "to_diff_dict")]
    for c in (config, *subs):
        for name in names:
            value = getattr(c, name, None)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
    return default


def hf_inputs(model, config) -> tuple[list[list[dict]], dict]:
    """The layouts the model's main input (ids with a padding mask, pixels, audio features or
    samples) may take at a small size, in the order tried (audio models differ: mel bins before
    or after frames, samples with or without a channel axis); extra keyword arguments."""
    main = getattr(model, "main_input_name", "input_ids")
    forward = model.forward
    extra = {k: False for k in ("use_cache",) if _accepts(forward, k) and "use_cache" in inspect.signature(forward).parameters}
    if main == "input_ids":
        vocab = getattr(config, "vocab_size", None) or getattr(getattr(config, "text_config", None), "vocab_size", 100)
        specs = [ids_input("input_ids", [1, SEQ], min(vocab, 100))]
        if "attention_mask" in inspect.signature(forward).parameters:
            specs.append(mask_input("attention_mask", [1, SEQ]))
        return [specs], extra
    if main == "pixel_values":
        size = getattr(config, "image_size", 32)
        size = size[0] if isinstance(size, (list, tuple)) else size
        if isinstance(size, dict):
            size = size.get("height", 32)
        channels = getattr(config, "num_channels", 3)
        return [[float_input("pixel_values", [1, channels, size, size])]], extra
    mels = _setting(config, ("num_mel_bins", "feature_size", "n_mels", "input_feat_size"), 80)
    if main == "input_features":
        frames = 2 * getattr(config, "max_source_positions", 32) if hasattr(config, "max_source_positions") else 64
        return [[float_input("input_features", [1, mels, frames])],
                [float_input("input_features", [1, frames, mels])]], extra
    if main == "input_values":
        frames = _setting(config, ("max_length",), 64)
        return [[float_input("input_values", [1, 1600])], [float_input("input_values", [1, 1, 1600])],
                [float_input("input_values", [1, frames, mels])]], extra
    if main == "past_values":  # time series: [batch, context, channels]
        context = _setting(config, ("context_length",), SEQ)
        return [[float_input(main, [1, context, _setting(config, ("num_input_channels",), 1)])]], extra
    if main == "inputs" or (isinstance(main, str) and main.endswith("_embeds")):  # embeddings: [batch, seq, width]
        width = _setting(config, ("d_model", "hidden_size"), None)
        if width is not None:
            return [[float_input(main, [1, SEQ, width])]], extra
    raise RuntimeError(f"main input '{main}' has no recipe in the zoo")


def build_hf(model_type: str, class_name: str, weights: str):
    """One candidate per layout of the model's main input (hf_inputs), the first tried first."""
    import transformers
    from transformers import CONFIG_MAPPING

    layouts = {}

    def build(layout: int):
        config = shrink_config(CONFIG_MAPPING[model_type]())
        cls = getattr(transformers, class_name)
        torch.manual_seed(0)
        model = cls(config)
        part = "model"
        if getattr(config, "is_encoder_decoder", False) and hasattr(model, "get_encoder"):
            model, part = model.get_encoder(), "encoder"
        if weights == "random":
            gen = torch.Generator().manual_seed(0)
            with torch.no_grad():
                for p in model.parameters():
                    p.copy_(torch.empty(p.shape, dtype=p.dtype).normal_(0.0, 0.5, generator=gen))
        model.eval()
        options, extra = hf_inputs(model, config)
        layouts["count"] = len(options)
        specs = options[layout]
        wrapped = Positional(model, [s["name"] for s in specs], extra)
        with torch.no_grad():
            wrapped(*torch_feeds(specs, 1))
        return wrapped, specs, {"source": f"transformers ({weights} weights)", "class": class_name,
                                "part": part, "model_type": model_type,
                                "config": {k: v for k, v in config.to_diff_dict().items()
                                           if isinstance(v, (int, float, str, bool))}}

    def candidates():  # the first build counts the layouts (export_one runs each before the next)
        layout = 0
        while layout < layouts.get("count", 1):
            yield lambda layout=layout: build(layout)
            layout += 1
    return candidates


# Families users export most, checked first; the rest follow in the mapping's order.
HF_FIRST = ["bert", "distilbert", "roberta", "albert", "electra", "xlm-roberta", "deberta", "deberta-v2",
            "mpnet", "camembert", "gpt2", "gpt_neo", "gptj", "opt", "bloom", "llama", "mistral", "qwen2",
            "qwen3", "phi", "phi3", "gemma", "gemma2", "falcon", "t5", "bart", "mbart", "marian", "pegasus",
            "whisper", "wav2vec2", "hubert", "wavlm", "vit", "deit", "beit", "swin", "convnext", "convnextv2",
            "resnet", "regnet", "mobilenet_v2", "mobilevit", "efficientnet", "dinov2", "clip_vision_model",
            "siglip_vision_model", "segformer", "poolformer", "levit", "bit", "dpt", "yolos", "data2vec-vision"]


def order_hf(rows):
    rank = {t: i for i, t in enumerate(HF_FIRST)}
    return sorted(rows, key=lambda r: (rank.get(r[0], len(rank)), 0))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", choices=["torchvision", "hf-default", "hf-random"])
    ap.add_argument("--out", default="/tmp/zoo/exports")
    ap.add_argument("--only", nargs="*", help="model names (torchvision) or model types (transformers)")
    ap.add_argument("--limit", type=int, help="export at most this many (in the zoo's order)")
    ap.add_argument("--exporter", choices=EXPORTERS, default="torchscript",
                    help="torch.onnx.export's dynamo=False (opset 17) or dynamo=True (its default opset)")
    args = ap.parse_args()
    out = Path(args.out) / folder(args.source, args.exporter)
    out.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGALRM, _alarm)
    torch.set_num_threads(1)
    if args.source == "torchvision":
        jobs = [(n, build_torchvision(k, n)) for k, n in torchvision_models()]
    else:
        weights = args.source.split("-")[1]
        jobs = [(t, build_hf(t, c, weights)) for t, c in order_hf(hf_models())]
    if args.only:
        jobs = [j for j in jobs if j[0] in args.only]
    for name, build in jobs[:args.limit]:
        export_one(out, name, build, args.exporter)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
