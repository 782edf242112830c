"""GLSL compute templates (`*.comp.j2`) and shared macros; this module only locates them."""
from pathlib import Path

TEMPLATE_DIR = Path(__file__).resolve().parent
