#!/bin/bash
# device call 3 (session 12): coopmat2 GEMM (edge tiles clamped, K unrolled) against vkc's KHR kernel and cuBLAS at model shapes; fp16 BERT/GPT-2 b1
source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
mkdir -p /opt/trixie; for f in .gl/trixie/*.deb; do dpkg -x "$f" /opt/trixie; done
R=/opt/trixie; printf '#!/bin/sh\nexec %s --library-path %s %s "$@"\n' $R/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 $R/usr/lib/x86_64-linux-gnu:$R/lib/x86_64-linux-gnu $R/usr/bin/glslc > /tmp/glslc2; chmod +x /tmp/glslc2
S=8192,4096,128x2304x768,128x768x768,128x3072x768,128x768x3072,1576x2304x768,1576x3072x768,1576x768x3072,256x6272x2304,64x100352x576
GLSLC=/tmp/glslc2 timeout 200 python3 benchmarks/h200/coopmat2_probe.py $S 128x256x32x256:u8c2 128x128x32x128:u8c2 64x64x32x128:u8c2 64x128x32x128:u8c2 32x64x32x128:u8c2 > $OUT/cm2.txt 2>&1; cut -c1-200 $OUT/cm2.txt
timeout 150 python3 benchmarks/h200/coopmat.py gemm $S > $OUT/gemm.txt 2>&1; cut -c1-260 $OUT/gemm.txt
timeout 200 python3 benchmarks/h200/transformers.py --precision fp16 --models bert,gpt2 --batches 1 --repeat 50 --json $OUT/tf_fp16.json > $OUT/tf_fp16.txt 2>&1; grep -A4 "model  batch" $OUT/tf_fp16.txt
