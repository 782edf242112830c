"""Output files: whole or not at all, never over an input, with the user's usual permissions."""
import os

import pytest

from compiler.output_file import OutputError, write_atomically


def test_replaces_whole(tmp_path):
    out = tmp_path / "m.vkb"
    out.write_bytes(b"old")
    write_atomically(out, b"new bundle")
    assert out.read_bytes() == b"new bundle" and os.listdir(tmp_path) == ["m.vkb"]
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask


def test_failed_write_keeps_the_old_file(tmp_path):
    out = tmp_path / "m.vkb"
    out.write_bytes(b"old")

    def half_then_fail(f):
        f.write(b"half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OutputError, match="No space left"):
        write_atomically(out, half_then_fail)
    assert out.read_bytes() == b"old" and os.listdir(tmp_path) == ["m.vkb"]


def test_never_over_an_input(tmp_path):
    model = tmp_path / "m.onnx"
    model.write_bytes(b"model")
    os.symlink(model, tmp_path / "link.vkb")
    for target in (model, tmp_path / "link.vkb", tmp_path / "." / "m.onnx"):
        with pytest.raises(OutputError, match="destroy the input"):
            write_atomically(target, b"bundle", inputs=[model])
    assert model.read_bytes() == b"model"
