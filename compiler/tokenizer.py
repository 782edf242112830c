"""Text for `vkc generate`: a Hugging Face tokenizer.json read with the `tokenizers` package (an
optional dependency, `pip install 'vkc[text]'`), the file beside the bundle unless one is named."""
from __future__ import annotations

from pathlib import Path

DEFAULT_NAME = "tokenizer.json"


def tokenizer_path(bundle: Path, named: Path | None) -> Path | None:
    """The tokenizer to use: the one named, else tokenizer.json beside the bundle, else None."""
    if named is not None:
        return named
    beside = bundle.with_name(DEFAULT_NAME)
    return beside if beside.is_file() else None


def load_tokenizer(path: Path):
    """A `tokenizers.Tokenizer`, or ValueError with one line naming the problem and the fix."""
    try:
        from tokenizers import Tokenizer  # optional: only text in and out needs it
    except ImportError:
        raise ValueError(f"reading {path.name} needs the tokenizers package: pip install 'vkc[text]' "
                         "(or give --prompt-ids).") from None
    if not path.is_file():
        raise ValueError(f"--tokenizer {path}: no such file; give the model folder's tokenizer.json.")
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # noqa: BLE001  the package raises its own untyped errors
        reason = " ".join(str(exc).split())[:160]
        raise ValueError(f"--tokenizer {path}: not a tokenizer.json the tokenizers package can read "
                         f"({reason}); give the one saved with the model.") from None


def encode(tokenizer, text: str, vocabulary: int | None) -> list[int]:
    """The prompt's token ids (with the tokenizer's own special tokens, as transformers adds them)."""
    ids = tokenizer.encode(text).ids
    if not ids:
        raise ValueError("--prompt encodes to no tokens; give some text.")
    if vocabulary is not None and max(ids) >= vocabulary:
        raise ValueError(f"the tokenizer gives token id {max(ids)}, but the model's vocabulary has "
                         f"{vocabulary} entries; give the tokenizer saved with this model.")
    return ids
