"""The Llama-3.2-1B-shaped decoder the decode benchmarks build (benchmarks/gpu/decode.py for vkc,
benchmarks/gpu/llama_cpp.py for llama.cpp): its widths as command-line options, one definition."""
import argparse

# hidden 2048, 16 layers, 32 heads, 8 KV heads, FFN 8192, vocabulary 128256
LLAMA_3_2_1B = {"hidden": 2048, "layers": 16, "heads": 32, "kv-heads": 8, "ffn": 8192, "vocab": 128256}


def add_width_arguments(parser: argparse.ArgumentParser) -> None:
    for name, default in LLAMA_3_2_1B.items():
        parser.add_argument(f"--{name}", type=int, default=default)
