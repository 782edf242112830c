"""vkc's peers for benchmarks/bench.py: each runs an ONNX model its own way, on the same device.

    peer = PEERS["ncnn"]()                       # or make_peer("iree", vulkan_target="llvmpipe")
    runner = peer.prepare(model, workdir)        # convert / compile; raises PeerError with the reason
    outputs = runner(feeds)                      # {ONNX output name: np.ndarray}, one blocking call

Peers (all optional: `pip install -e .[bench]`; a missing one raises PeerError("not installed")):

  ort   onnxruntime, CPUExecutionProvider (all cores): the reference every system is checked against.
  ncnn  ncnn with Vulkan compute. ``pnnx model.onnx inputshape=[...] fp16=0`` converts the model
        (fp16=0 keeps fp32 weights; pnnx's default stores fp16 weights, ~3e-4 rel L2 off; models
        below opset 13 are upgraded first, as pnnx reads opset-13 semantics); the net
        runs with fp16/bf16 storage and arithmetic off, so it computes in fp32 as vkc does. A runner
        call is what pnnx's generated script does: a fresh extractor, input, extract. ncnn has no
        batch axis: a batch-B model is converted at batch 1 and run B times per call.
  iree  IREE, HAL target device vulkan (the vulkan-spirv backend): ``iree-import-onnx`` then
        ``iree-compile --iree-hal-target-device=vulkan [--iree-vulkan-target=T]`` (models below
        opset 17 are upgraded by the importer's ``--opset-version 17``: torch-mlir legalizes
        BatchNormalization only from opset 15), run with the
        iree.runtime vulkan driver. On lavapipe T must be ``llvmpipe`` (chosen automatically when the
        Vulkan device is llvmpipe): IREE's default target gives wrong results there. A runner call
        copies the inputs to the device, invokes the entry function and copies every output back.

The converters run as subprocesses with a time limit, so a hung or crashing conversion is reported
(PeerError) rather than taking the benchmark down.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable, Mapping

import numpy as np
import onnx

Runner = Callable[[Mapping[str, np.ndarray]], dict]


class PeerError(RuntimeError):
    """A peer cannot run this model (not installed, conversion failed, ...): str(e) is the reason."""


def _tool(name: str) -> str:
    """An executable installed next to this interpreter (the venv's bin/) or on PATH."""
    here = Path(sys.executable).parent / name
    if here.exists():
        return str(here)
    found = shutil.which(name)
    if not found:
        raise PeerError(f"{name} not installed")
    return found


def _run_tool(cmd: list, cwd: Path, timeout_s: float, what: str) -> str:
    try:
        proc = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise PeerError(f"{what} timed out after {timeout_s:.0f} s") from None
    log = proc.stdout + proc.stderr
    (cwd / f"{Path(cmd[0]).name}.log").write_text(log)
    if proc.returncode != 0:
        lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
        err = next((ln for ln in reversed(lines) if "error" in ln.lower()), lines[-1] if lines else "")
        raise PeerError(f"{what} failed (exit {proc.returncode}): {err[:160]}")
    return log


def graph_inputs(model: onnx.ModelProto) -> list:
    inits = {t.name for t in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in inits]


def input_shapes(model: onnx.ModelProto) -> list[list[int]]:
    shapes = []
    for vi in graph_inputs(model):
        dims = [d.dim_value if d.HasField("dim_value") else 0 for d in vi.type.tensor_type.shape.dim]
        if any(d <= 0 for d in dims):
            raise PeerError(f"input {vi.name} has no static shape")
        shapes.append(dims)
    return shapes


def output_names(model: onnx.ModelProto) -> list[str]:
    return [o.name for o in model.graph.output]


def without_initializer_inputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with initializers dropped from graph.input (IR < 4 models list them there; pnnx
    then takes a weight for the first input), IR version raised to 4 where needed."""
    inits = {t.name for t in model.graph.initializer}
    if not any(vi.name in inits for vi in model.graph.input):
        return model
    m = onnx.ModelProto()
    m.CopyFrom(model)
    keep = [vi for vi in m.graph.input if vi.name not in inits]
    del m.graph.input[:]
    m.graph.input.extend(keep)
    m.ir_version = max(m.ir_version, 4)
    return m


def upgrade_opset(model: onnx.ModelProto, opset: int) -> onnx.ModelProto:
    """Models below `opset` converted up (onnx.version_converter). pnnx reads ops with opset-13
    semantics: an opset-9 Softmax(axis=1) over [1, 1000, 1, 1] (light_squeezenet) becomes a
    softmax over a size-1 axis, all ones."""
    current = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=opset)
    if current >= opset:
        return model
    from onnx import version_converter
    try:
        return version_converter.convert_version(model, opset)
    except Exception as exc:  # noqa: BLE001
        raise PeerError(f"onnx version converter {current} -> {opset}: {exc}") from None


def with_batch_one(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with every input's and output's leading dimension set to 1 (intermediate shapes
    dropped, so converters infer them again)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for vi in list(graph_inputs(m)) + list(m.graph.output):
        dims = vi.type.tensor_type.shape.dim
        if len(dims):
            dims[0].ClearField("dim_param")
            dims[0].dim_value = 1
    del m.graph.value_info[:]
    return m


def rel_l2(got: np.ndarray, ref: np.ndarray) -> float:
    got = np.asarray(got, dtype=np.float64).reshape(-1)
    ref = np.asarray(ref, dtype=np.float64).reshape(-1)
    if got.size != ref.size:
        return float("inf")
    return float(np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30))


def worst_rel_l2(outputs: Mapping[str, np.ndarray], reference: Mapping[str, np.ndarray]) -> float:
    """The largest relative L2 error over the reference's outputs (inf for a missing or misshapen one)."""
    worst = 0.0
    for name, ref in reference.items():
        got = outputs.get(name)
        if got is None or np.asarray(got).size != np.asarray(ref).size:
            return float("inf")
        err = rel_l2(got, ref)
        worst = max(worst, err if np.isfinite(err) else float("inf"))
    return worst


# ---------------------------------------------------------------------------------------------

class Peer:
    name = "?"
    label = "?"
    probe = False

    def version(self) -> str:
        return "?"

    def prepare(self, model: onnx.ModelProto, workdir: Path) -> Runner:
        raise NotImplementedError


class OnnxRuntimeCPU(Peer):
    name, label = "ort", "onnxruntime CPU"

    def __init__(self, threads: int = 0):
        self.threads = threads  # 0: onnxruntime's default (every core)

    def version(self) -> str:
        try:
            import onnxruntime
        except ImportError:
            return "not installed"
        return onnxruntime.__version__

    def prepare(self, model: onnx.ModelProto, workdir: Path) -> Runner:
        try:
            import onnxruntime as ort
        except ImportError:
            raise PeerError("onnxruntime not installed") from None
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.intra_op_num_threads = self.threads
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]

        def run(feeds):
            return dict(zip(names, sess.run(names, dict(feeds))))
        return run


class NcnnVulkan(Peer):
    name, label = "ncnn", "ncnn Vulkan"

    def __init__(self, fp16: bool = False, timeout_s: float = 600.0):
        self.fp16 = fp16
        self.timeout_s = timeout_s

    def version(self) -> str:
        try:
            import ncnn
        except ImportError:
            return "not installed"
        pnnx = "?"
        try:
            from importlib.metadata import version
            pnnx = version("pnnx")
        except Exception:  # noqa: BLE001
            pass
        return f"{ncnn.__version__} (pnnx {pnnx})"

    def prepare(self, model: onnx.ModelProto, workdir: Path) -> Runner:
        try:
            import ncnn
        except ImportError:
            raise PeerError("ncnn not installed") from None
        if ncnn.get_gpu_count() < 1:
            raise PeerError("ncnn sees no Vulkan device")
        shapes = input_shapes(model)
        # NCHW inputs with batch B: converted at batch 1, run B times. Otherwise a leading 1 is
        # dropped (ncnn's blobs have no batch axis) and other shapes go in whole (GEMM operands).
        batch = shapes[0][0] if all(len(s) == 4 and s[0] == shapes[0][0] for s in shapes) else 1
        strip = all(s and s[0] == 1 for s in shapes)
        one = without_initializer_inputs(with_batch_one(model) if batch != 1 else model)
        one = upgrade_opset(one, 13)
        workdir.mkdir(parents=True, exist_ok=True)
        onnx.save(one, workdir / "model.onnx")
        shape_arg = ",".join("[" + ",".join(map(str, ([1] + s[1:]) if batch != 1 else s)) + "]" for s in shapes)
        _run_tool([_tool("pnnx"), "model.onnx", f"inputshape={shape_arg}", f"fp16={int(self.fp16)}"], workdir,
                  self.timeout_s, "pnnx")
        param, binf = workdir / "model.ncnn.param", workdir / "model.ncnn.bin"
        if not param.exists():
            raise PeerError("pnnx wrote no ncnn model")
        text = param.read_text().split()
        blobs_in = [f"in{i}" for i in range(len(shapes))]
        names_out = output_names(model)
        blobs_out = [f"out{i}" for i in range(len(names_out))]
        missing = [b for b in blobs_in + blobs_out if b not in text]
        if missing:
            raise PeerError(f"ncnn model lacks blobs {missing}")
        # ncnn runs a layer without a Vulkan kernel on the CPU, silently (its MatMul has none):
        # such a run is not a Vulkan figure.
        layer_types = {line.split()[0] for line in param.read_text().splitlines()[2:] if line.split()}
        on_cpu = sorted(t for t in layer_types if t != "Input" and not ncnn.create_layer(t).support_vulkan)
        if on_cpu:
            raise PeerError(f"ncnn has no Vulkan kernel for {', '.join(on_cpu)} and would run it on the CPU")

        net = ncnn.Net()
        net.opt.use_vulkan_compute = True
        if not self.fp16:
            for opt in ("use_fp16_packed", "use_fp16_storage", "use_fp16_arithmetic", "use_bf16_packed",
                        "use_bf16_storage"):
                if hasattr(net.opt, opt):
                    setattr(net.opt, opt, False)
        if net.load_param(str(param)) != 0 or net.load_model(str(binf)) != 0:
            raise PeerError("ncnn could not load the converted model")
        in_names = [vi.name for vi in graph_inputs(model)]
        out_shapes = {}
        for o in model.graph.output:
            dims = [d.dim_value for d in o.type.tensor_type.shape.dim]
            out_shapes[o.name] = ([1] + dims[1:] if batch != 1 else dims) if dims else None

        def run(feeds):
            per_sample = {n: [] for n in names_out}
            for b in range(batch):
                with net.create_extractor() as ex:
                    for blob, name in zip(blobs_in, in_names):
                        x = feeds[name][b] if (batch != 1 or strip) else feeds[name]
                        x = np.ascontiguousarray(x, dtype=np.float32)
                        ex.input(blob, ncnn.Mat(x).clone())
                    for blob, name in zip(blobs_out, names_out):
                        rc, mat = ex.extract(blob)
                        if rc != 0:
                            raise RuntimeError(f"ncnn extract {blob} failed ({rc})")
                        y = np.array(mat)
                        shape = out_shapes[name]
                        if shape and y.size != int(np.prod(shape)):
                            raise RuntimeError(f"ncnn output {blob} has {y.size} values, expected {shape}")
                        per_sample[name].append(y.reshape(shape) if shape else y)
            return {n: v[0] if batch == 1 else np.concatenate(v) for n, v in per_sample.items()}

        run.net = net  # keep the net alive with its runner
        return run


_IREE_CONFIG = None


def _iree_config():
    """One iree.runtime Config (one Vulkan device) for the whole process."""
    global _IREE_CONFIG
    if _IREE_CONFIG is None:
        import iree.runtime as rt
        _IREE_CONFIG = rt.Config("vulkan")
    return _IREE_CONFIG


def lavapipe_present() -> bool:
    try:
        from runtime_min import list_devices
        return any("llvmpipe" in d.name.lower() for d in list_devices())
    except Exception:  # noqa: BLE001
        return False


class IreeVulkan(Peer):
    name, label = "iree", "IREE Vulkan"

    # bench.py times this peer's first runs in a child process it can stop: an IREE call cannot be
    # interrupted, and on lavapipe one run of a model can take minutes.
    probe = True

    def __init__(self, vulkan_target: str | None = "auto", timeout_s: float = 900.0, extra_flags=(),
                 min_opset: int = 17):
        self.min_opset = min_opset
        self.vulkan_target = ("llvmpipe" if lavapipe_present() else None) if vulkan_target == "auto" \
            else vulkan_target
        self.timeout_s = timeout_s
        self.extra_flags = list(extra_flags)

    def version(self) -> str:
        try:
            from importlib.metadata import version
            return f"compiler {version('iree-base-compiler')}, runtime {version('iree-base-runtime')}" + (
                f", --iree-vulkan-target={self.vulkan_target}" if self.vulkan_target else "")
        except Exception:  # noqa: BLE001
            return "not installed"

    def prepare(self, model: onnx.ModelProto, workdir: Path) -> Runner:
        try:
            import iree.runtime as rt
        except ImportError:
            raise PeerError("iree-base-runtime not installed") from None
        workdir.mkdir(parents=True, exist_ok=True)
        data = without_initializer_inputs(model).SerializeToString()
        flags = ["--iree-hal-target-device=vulkan"]
        if self.vulkan_target:
            flags.append(f"--iree-vulkan-target={self.vulkan_target}")
        flags += self.extra_flags
        import hashlib
        stamp = hashlib.sha256(data + repr(flags).encode()).hexdigest()
        if (workdir / "model.stamp").exists() and (workdir / "model.stamp").read_text() == stamp \
                and (workdir / "model.vmfb").exists():
            pass  # compiled by an earlier prepare of the same model (bench.py's probe process)
        else:
            self._compile(model, data, flags, workdir)
            (workdir / "model.stamp").write_text(stamp)
        return self._load(model, workdir)

    def _compile(self, model, data: bytes, flags: list, workdir: Path) -> None:
        (workdir / "model.onnx").write_bytes(data)
        # torch-mlir's ONNX import legalizes some ops only from a recent opset on (BatchNormalization
        # from 15): upgrade older models as IREE's importer offers.
        opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
        upgrade = ["--opset-version", str(self.min_opset)] if opset < self.min_opset else []
        _run_tool([_tool("iree-import-onnx"), "model.onnx", *upgrade, "-o", "model.mlir"], workdir,
                  self.timeout_s, "iree-import-onnx")
        _run_tool([_tool("iree-compile"), "model.mlir", *flags, "-o", "model.vmfb"], workdir, self.timeout_s,
                  "iree-compile")
        (workdir / "model.mlir").unlink()  # hundreds of MB for big models

    def _load(self, model, workdir: Path) -> Runner:
        import iree.runtime as rt
        try:
            cfg = _iree_config()
        except Exception as exc:  # noqa: BLE001
            raise PeerError(f"IREE vulkan driver: {exc}") from None
        ctx = rt.SystemContext(config=cfg)
        ctx.add_vm_module(rt.VmModule.copy_buffer(cfg.vm_instance, (workdir / "model.vmfb").read_bytes()))
        mod = ctx.modules.module  # iree-import-onnx names the module "module"
        fnames = [f for f in mod.vm_module.function_names if f != "__init" and not f.endswith("$async")]
        if len(fnames) != 1:
            raise PeerError(f"IREE module has entry points {fnames}")
        fn = mod[fnames[0]]
        device = cfg.device
        in_names = [vi.name for vi in graph_inputs(model)]
        names_out = output_names(model)

        def to_host(arr) -> np.ndarray:
            # DeviceArray.to_host() imports a numpy allocation that lavapipe rejects (not 4096-byte
            # aligned, IREE 3.13): copy through a staging buffer instead, as IREE does without import.
            if isinstance(arr, np.ndarray):
                return arr
            bv = arr._buffer_view
            src = bv.get_buffer()
            host = device.allocator.allocate_buffer(
                memory_type=int(rt.MemoryType.HOST_LOCAL | rt.MemoryType.DEVICE_VISIBLE),
                allowed_usage=int(rt.BufferUsage.TRANSFER_TARGET | rt.BufferUsage.MAPPING_SCOPED),
                allocation_size=src.byte_length())
            sem = device.create_semaphore(0)
            device.queue_copy(src, host, wait_semaphores=rt.HalFence.create_at(sem, 0),
                              signal_semaphores=rt.HalFence.create_at(sem, 1))
            rt.HalFence.create_at(sem, 1).wait()
            return np.array(host.map().asarray(bv.shape, rt.HalElementType.map_to_dtype(bv.element_type)))

        def run(feeds):
            args = [rt.asdevicearray(device, np.ascontiguousarray(feeds[n])) for n in in_names]
            res = fn(*args)
            res = list(res) if isinstance(res, (tuple, list)) else [res]
            return {n: to_host(r) for n, r in zip(names_out, res)}

        run.ctx = ctx
        return run


PEERS: dict[str, type] = {"ort": OnnxRuntimeCPU, "ncnn": NcnnVulkan, "iree": IreeVulkan}


def make_peer(name: str, **kw) -> Peer:
    if name not in PEERS:
        raise ValueError(f"unknown peer {name!r}; choose from {', '.join(PEERS)}")
    return PEERS[name](**kw)
