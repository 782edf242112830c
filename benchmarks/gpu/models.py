"""On the GPU machine: export torchvision models (random weights) to ONNX, compile them with vkc
there (the pip shader toolchain carried in .whl), check against torch, and time vkc, ncnn-Vulkan float32 (pnnx-converted)
and torch eager and CUDA graphs, every system host to host, in one run.

    python3 -m benchmarks.gpu.models nvidia mobilenet_v2,resnet18,resnet50,squeezenet1_0 1
    python3 -m benchmarks.gpu.models nvidia resnet50 8,32
    python3 -m benchmarks.gpu.models nvidia+default mobilenet_v2 1   # also the portable default bundle
    python3 -m benchmarks.gpu.models nvidia lraspp_mobilenet_v3_large,unet_small 1

A name is a torchvision classification model, a torchvision.models.segmentation one (its 'out'
map is the output), or unet_small: tests/models/zoo.py's 3-level UNet, the zoo's one model
that torchvision lacks, written here in torch layer for layer.

The first argument is one or more compile targets joined by '+' (each timed in the same run, the
first one profiled and in the table's ratios); 'default' is plain `vkc compile`'s target list
(compiler.targets.DEFAULT_TARGETS: a multi-profile bundle whose runtime picks the profile).
"""
import io, sys, time, statistics, json
from benchmarks.cli import exit_on_help
exit_on_help(__doc__)
import numpy as np, torch, torchvision, onnx
import compiler
from runtime_min import load
from benchmarks.gpu.kernel_table import print_kernel_table
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
targets = (sys.argv[1] if len(sys.argv) > 1 else 'nvidia').split('+')
from compiler.host import warm_up
from compiler.targets import DEFAULT_TARGETS
names = sys.argv[2].split(',') if len(sys.argv) > 2 else ['mobilenet_v2', 'resnet18', 'resnet50', 'squeezenet1_0']
batches = [int(b) for b in sys.argv[3].split(',')] if len(sys.argv) > 3 else [1]

def med(f, n=30, warm=5):
    for _ in range(warm): f()
    ts = []
    for _ in range(n):
        t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
    return statistics.median(ts)

def ncnn_runner(onnx_bytes, shape, workdir):
    """ncnn with Vulkan, float32 (fp16 storage and arithmetic off), model converted by pnnx."""
    import os, subprocess, ncnn, pnnx
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, 'm.onnx')
    open(path, 'wb').write(onnx_bytes)
    r = subprocess.run([pnnx.EXEC_PATH, path, 'inputshape=[%s]' % ','.join(map(str, shape))], cwd=workdir,
                       capture_output=True, text=True, timeout=600)
    if not os.path.exists(os.path.join(workdir, 'm.ncnn.param')):
        raise RuntimeError('pnnx failed: ' + r.stdout[-300:] + r.stderr[-300:])
    net = ncnn.Net()
    net.opt.use_vulkan_compute = True
    net.opt.use_fp16_packed = net.opt.use_fp16_storage = net.opt.use_fp16_arithmetic = False
    net.load_param(os.path.join(workdir, 'm.ncnn.param'))
    net.load_model(os.path.join(workdir, 'm.ncnn.bin'))
    def run(x):
        ex = net.create_extractor()
        ex.input('in0', ncnn.Mat(np.ascontiguousarray(x[0])))
        _, out = ex.extract('out0')
        return np.array(out)
    return run


class UNetSmall(torch.nn.Module):
    """tests/models/zoo.py unet_small (base 16, 2 classes): DoubleConv (Conv 3x3 no bias, BN,
    ReLU) x 2 at H, H/2, H/4; up by ConvTranspose 2x2 s2, then by nearest x2; Concat skips."""
    def __init__(self, b=16, classes=2):
        super().__init__()
        nn = torch.nn
        def double(ci, co):
            return nn.Sequential(nn.Conv2d(ci, co, 3, padding=1, bias=False), nn.BatchNorm2d(co), nn.ReLU(),
                                 nn.Conv2d(co, co, 3, padding=1, bias=False), nn.BatchNorm2d(co), nn.ReLU())
        self.inc, self.down1, self.down2 = double(3, b), double(b, 2 * b), double(2 * b, 4 * b)
        self.up1, self.conv1 = nn.ConvTranspose2d(4 * b, 2 * b, 2, stride=2), double(4 * b, 2 * b)
        self.conv2, self.outc = double(3 * b, b), nn.Conv2d(b, classes, 1)
    def forward(self, x):
        f = torch.nn.functional
        x1 = self.inc(x)
        x2 = self.down1(f.max_pool2d(x1, 2))
        x3 = self.down2(f.max_pool2d(x2, 2))
        y = self.conv1(torch.cat([x2, self.up1(x3)], 1))
        y = self.conv2(torch.cat([x1, f.interpolate(y, scale_factor=2.0, mode='nearest')], 1))
        return self.outc(y)


class OutMap(torch.nn.Module):
    """A torchvision segmentation model's 'out' map as its one output."""
    def __init__(self, net):
        super().__init__()
        self.net = net
    def forward(self, x):
        return self.net(x)['out']


def build(name):
    if name == 'unet_small':
        return UNetSmall()
    if hasattr(torchvision.models.segmentation, name):
        return OutMap(getattr(torchvision.models.segmentation, name)(weights=None, weights_backbone=None))
    return getattr(torchvision.models, name)(weights=None)


rows = []
for name in names:
    for batch in batches:
        torch.manual_seed(0)
        net = build(name).eval()
        x = torch.randn(batch, 3, 224, 224)
        buf = io.BytesIO()
        try:
            torch.onnx.export(net, x, buf, opset_version=17, dynamo=False, input_names=['input'], output_names=['output'])
        except TypeError:
            torch.onnx.export(net, x, buf, opset_version=17, input_names=['input'], output_names=['output'])
        model = onnx.load_from_string(buf.getvalue())
        xn = x.numpy()
        netc = net.cuda()
        with torch.no_grad():
            ref = netc(x.cuda()).cpu().numpy()
        vkc = {}
        for target in targets:
            t = time.perf_counter()
            bundle = compiler.compile_model(model, target=DEFAULT_TARGETS if target == 'default' else target)
            tc = time.perf_counter() - t
            m = load(bundle)
            got = m.run({'input': xn})['output']
            warm_up(m, {'input': xn})   # the GPU idled while the model compiled
            err = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
            vkc[target] = dict(ms=statistics.median(m.bench({'input': xn}, warmup=5, repeat=30)) * 1e3,
                               compile_s=round(tc, 2), rel_l2=err, bundle_mb=round(len(bundle) / 2**20, 2),
                               profile=getattr(m, 'target', None))
            if target == targets[0]:
                t_vkc, prof = vkc[target]['ms'] / 1e3, None
                try:
                    prof = m.profile({'input': xn})
                except Exception as e:
                    prof = repr(e)
            m.close()
        err, tc = vkc[targets[0]]['rel_l2'], vkc[targets[0]]['compile_s']
        xin = torch.from_numpy(xn).pin_memory()
        def eager():
            with torch.no_grad():
                return netc(xin.cuda(non_blocking=True)).cpu()
        t_eager = med(eager)
        static_in = torch.empty_like(xin, device='cuda')
        s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s), torch.no_grad():
            for _ in range(3): netc(static_in)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g), torch.no_grad():
            static_out = netc(static_in)
        def graphed():
            static_in.copy_(xin, non_blocking=True); g.replay(); return static_out.cpu()
        t_graph = med(graphed)
        t_ncnn, ncnn_err = float('nan'), None
        if batch == 1:
            try:
                run_ncnn = ncnn_runner(buf.getvalue(), list(x.shape), f'/tmp/ncnn_{name}')
                out = run_ncnn(xn).reshape(ref.shape)
                ncnn_err = float(np.linalg.norm(out - ref) / np.linalg.norm(ref))
                t_ncnn = med(lambda: run_ncnn(xn), n=20, warm=3)
            except Exception as e:
                ncnn_err = repr(e)[:200]
        row = dict(model=name, batch=batch, compile_s=round(tc, 2), rel_l2_vs_torch=err, vkc_ms=t_vkc * 1e3,
                   torch_eager_ms=t_eager * 1e3, torch_graph_ms=t_graph * 1e3, ncnn_ms=t_ncnn * 1e3,
                   ncnn_rel_l2=ncnn_err, vkc_targets=vkc)
        rows.append(row)
        print(json.dumps(row), flush=True)
        if isinstance(prof, list):
            print_kernel_table(prof, top=8)
        elif prof:
            print('  profile:', prof)
print(f"{'model':16s} {'batch':>5s} {'vkc ms':>9s} {'ncnn ms':>9s} {'eager ms':>9s} {'graph ms':>9s} {'ncnn/vkc':>9s} {'eager/vkc':>9s} {'graph/vkc':>9s} {'relL2':>9s}")
for r in rows:
    print(f"{r['model']:16s} {r['batch']:5d} {r['vkc_ms']:9.3f} {r['ncnn_ms']:9.3f} {r['torch_eager_ms']:9.3f} {r['torch_graph_ms']:9.3f} "
          f"{r['ncnn_ms']/r['vkc_ms']:9.2f} {r['torch_eager_ms']/r['vkc_ms']:9.2f} {r['torch_graph_ms']/r['vkc_ms']:9.2f} {r['rel_l2_vs_torch']:9.2e}")
