#!/bin/bash
# device call 1 (session 12): VK_NV_cooperative_matrix2 GEMM probe (Debian 13's glslc) vs vkc's KHR kernel and cuBLAS; coopmat_split_first
source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
ldd --version | head -1; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p /opt/trixie; for f in .gl/trixie/*.deb; do dpkg -x "$f" /opt/trixie; done
R=/opt/trixie; printf '#!/bin/sh\nexec %s --library-path %s %s "$@"\n' $R/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 $R/usr/lib/x86_64-linux-gnu:$R/lib/x86_64-linux-gnu $R/usr/bin/glslc > /tmp/glslc2; chmod +x /tmp/glslc2; /tmp/glslc2 --version | head -1
GLSLC=/tmp/glslc2 timeout 170 python3 benchmarks/h200/coopmat2_probe.py 4096,8192 128x128x32x256 128x128x64x256 256x128x32x256 128x256x32x256 256x256x32x256 128x128x32x128 256x128x64x256 > $OUT/cm2.txt 2>&1; cat $OUT/cm2.txt | cut -c1-400
timeout 100 python3 benchmarks/h200/coopmat.py gemm 4096,8192 > $OUT/gemm.txt 2>&1; cut -c1-300 $OUT/gemm.txt
timeout 240 python3 benchmarks/h200/profile_variants.py fp16 resnet50:32,resnet50:1,vit:8,bert:1 default,sf8,sf4 > $OUT/pv_fp16.txt 2>&1; cut -c1-200 $OUT/pv_fp16.txt
