"""Write the core attention bundles (vit-b8, bert-b1 shapes) for pipeline_stats.py."""
import sys
from pathlib import Path
sys.path[:0] = [str(Path(__file__).resolve().parents[1])]
sys.path.append(str(Path(__file__).resolve().parents[1] / "tests"))
import compiler
from attention_models import core_attention
out = sys.argv[1]
for name, (b, h, s, d, masked), prec in [("vit8", (8, 12, 197, 64, False), "fp32"),
                                          ("bert1", (1, 12, 128, 64, True), "fp32"),
                                          ("bert1h", (1, 12, 128, 64, True), "fp16")]:
    m = core_attention(b, h, s, d, mask_shape=[b, 1, s, s] if masked else None)
    Path(f"{out}/att_{name}.vkb").write_bytes(compiler.compile_model(m, target="nvidia", precision=prec))
