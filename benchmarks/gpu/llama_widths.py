"""The decoder shapes the decode benchmarks build (benchmarks/gpu/decode.py for vkc,
benchmarks/gpu/llama_cpp.py for llama.cpp): Llama's architecture at a released model's widths,
chosen by --shape, each width also an option of its own; one definition for both."""
import argparse

SHAPES = {
    "llama-3.2-1b": {"hidden": 2048, "layers": 16, "heads": 32, "kv-heads": 8, "ffn": 8192, "vocab": 128256},
    # Qwen2.5-0.5B's widths (its q, k and v biases aside)
    "qwen2.5-0.5b": {"hidden": 896, "layers": 24, "heads": 14, "kv-heads": 2, "ffn": 4864, "vocab": 151936},
}


def add_width_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shape", choices=SHAPES, default="llama-3.2-1b",
                        help="the model's widths (tied embeddings); the options below change one each")
    for name in SHAPES["llama-3.2-1b"]:
        parser.add_argument(f"--{name}", type=int, default=None, help="default: the shape's")


def parse_widths(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """The parsed arguments, each width the shape's unless given."""
    args = parser.parse_args()
    for name, value in SHAPES[args.shape].items():
        attr = name.replace("-", "_")
        if getattr(args, attr) is None:
            setattr(args, attr, value)
    return args
