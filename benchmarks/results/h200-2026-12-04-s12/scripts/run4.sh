#!/bin/bash
# device call 4 (session 12): final float32 transformer table (issue 10); coopmat2 at ViT b8 and ResNet-50 b32 shapes
source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
mkdir -p /opt/trixie; for f in .gl/trixie/*.deb; do dpkg -x "$f" /opt/trixie; done
R=/opt/trixie; printf '#!/bin/sh\nexec %s --library-path %s %s "$@"\n' $R/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 $R/usr/lib/x86_64-linux-gnu:$R/lib/x86_64-linux-gnu $R/usr/bin/glslc > /tmp/glslc2; chmod +x /tmp/glslc2
timeout 380 python3 benchmarks/h200/transformers.py --models vit,bert,gpt2 --batches 8,1 --repeat 30 --json $OUT/tf_fp32.json > $OUT/tf_fp32.txt 2>&1; grep -A8 "model  batch" $OUT/tf_fp32.txt; grep "vkc GPU\|attention" $OUT/tf_fp32.txt | head -12
S=128x768x3072,1576x2304x768,1576x3072x768,1576x768x3072,256x6272x2304,64x100352x576
GLSLC=/tmp/glslc2 timeout 120 python3 benchmarks/h200/coopmat2_probe.py $S 128x256x32x256:u8c2 128x128x32x128:u8c2 64x128x32x128:u8c2 64x64x32x128:u8c2 > $OUT/cm2.txt 2>&1; cut -c1-200 $OUT/cm2.txt | tail -24
