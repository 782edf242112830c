"""Text in and out of `vkc generate` (compiler/tokenizer.py): a prompt encoded by a tokenizer.json
gives the tokens its ids give, the tokens come back as text too, the tokenizer beside the bundle
is found by itself, and every mistake is one line naming the fix."""
import shutil
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, decoders
from typer.testing import CliRunner

from compiler.cli import app

FIXTURE = Path(__file__).resolve().parent.parent / "models" / "fixtures" / "llama_tiny_optimum.onnx"
VOCABULARY = 128   # the fixture's


def word_tokenizer(words: int) -> Tokenizer:
    """Token i is the word w<i>."""
    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(words)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")   # joins words with spaces
    return tok


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A model folder: the bundle and its tokenizer.json."""
    root = tmp_path_factory.mktemp("llama")
    r = CliRunner().invoke(app, ["compile", str(FIXTURE), "-o", str(root / "model.vkb"), "--target", "lavapipe",
                                 "--max-context", "32", "--variant", "input_ids=1x4", "--variant", "input_ids=1x1"])
    assert r.exit_code == 0, r.output
    word_tokenizer(VOCABULARY).save(str(root / "tokenizer.json"))
    return root


def generate(*args):
    return CliRunner().invoke(app, ["generate", *map(str, args), "--max-new-tokens", "6"])


def test_text_prompt_gives_the_tokens_of_its_ids_and_text_back(folder, tmp_path):
    by_ids = generate(folder / "model.vkb", "--prompt-ids", "3,17,42,5")
    assert by_ids.exit_code == 0, by_ids.output
    tokens = [int(t) for t in by_ids.output.splitlines()[0].split()]
    alone = tmp_path / "model.vkb"   # no tokenizer beside it: named
    shutil.copy(folder / "model.vkb", alone)
    for args in ([folder / "model.vkb"], [alone, "--tokenizer", folder / "tokenizer.json"]):
        r = generate(*args, "--prompt", "w3 w17 w42 w5")
        assert r.exit_code == 0, r.output
        lines = r.output.splitlines()
        assert [int(t) for t in lines[0].split()] == tokens
        assert lines[1] == " ".join(f"w{t}" for t in tokens)


@pytest.mark.parametrize("args, message", [
    (["--prompt", "w1", "--prompt-ids", "1"], "one of them"),
    ([], "one of them"),
    (["--prompt", "w1", "--tokenizer", "missing.json"], "no such file"),
    (["--prompt", "   "], "encodes to no tokens"),
], ids=["both", "neither", "missing-tokenizer", "empty-prompt"])
def test_mistakes_are_one_line(folder, args, message):
    r = generate(folder / "model.vkb", *args)
    assert r.exit_code != 0 and message in r.output and "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) == 1


def test_prompt_without_a_tokenizer(folder, tmp_path):
    alone = tmp_path / "model.vkb"
    shutil.copy(folder / "model.vkb", alone)
    r = generate(alone, "--prompt", "w1 w2")
    assert r.exit_code != 0 and "--tokenizer PATH" in r.output and len(r.output.strip().splitlines()) == 1


def test_tokenizer_of_another_model(folder, tmp_path):
    bigger = tmp_path / "tokenizer.json"
    word_tokenizer(4 * VOCABULARY).save(str(bigger))
    r = generate(folder / "model.vkb", "--prompt", f"w1 w{3 * VOCABULARY}", "--tokenizer", bigger)
    assert r.exit_code != 0 and "vocabulary has 128 entries" in r.output


def test_not_a_tokenizer(folder, tmp_path):
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{not json")
    r = generate(folder / "model.vkb", "--prompt", "w1", "--tokenizer", bad)
    assert r.exit_code != 0 and "not a tokenizer.json" in r.output and len(r.output.strip().splitlines()) == 1
