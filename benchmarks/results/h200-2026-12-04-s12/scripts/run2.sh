#!/bin/bash
# device call 2 (session 12): coopmat2 probe round 2 (unclamped layouts, unrolled K); fp32 matmul_tiled with its K-step loop unrolled ([[unroll]]) against without
source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
mkdir -p /opt/trixie; for f in .gl/trixie/*.deb; do dpkg -x "$f" /opt/trixie; done
R=/opt/trixie; printf '#!/bin/sh\nexec %s --library-path %s %s "$@"\n' $R/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 $R/usr/lib/x86_64-linux-gnu:$R/lib/x86_64-linux-gnu $R/usr/bin/glslc > /tmp/glslc2; chmod +x /tmp/glslc2
GLSLC=/tmp/glslc2 timeout 150 python3 benchmarks/h200/coopmat2_probe.py 4096,8192 128x256x32x256 128x256x32x256:u8c0 128x256x64x256:u4c0 128x256x16x256:u8c0 128x128x64x256:u4c0 128x128x32x128:u8c0 256x128x64x256:u4c0 64x256x64x128:u4c0 > $OUT/cm2.txt 2>&1; cut -c1-230 $OUT/cm2.txt
timeout 100 python3 benchmarks/h200/gemm_shapes.py run out/gemm_shapes_base out/gemm_shapes > $OUT/gemm_shapes.txt 2>&1; tail -16 $OUT/gemm_shapes.txt
timeout 100 python3 benchmarks/h200/transformers.py --models vit --batches 8 --repeat 30 > $OUT/vit_unroll.txt 2>&1; grep -E "vkc|torch" $OUT/vit_unroll.txt
sed -i 's/^        \[\[unroll\]\] for (int kk = 0; kk < BK; ++kk) {$/        for (int kk = 0; kk < BK; ++kk) {/' templates/matmul_tiled.comp.j2; git diff --stat
timeout 100 python3 benchmarks/h200/transformers.py --models vit --batches 8 --repeat 30 > $OUT/vit_base.txt 2>&1; grep -E "vkc|torch" $OUT/vit_base.txt
