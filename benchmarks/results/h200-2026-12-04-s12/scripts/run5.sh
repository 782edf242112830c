#!/bin/bash
# device call 5 (session 12): coopmat2 at the shapes call 4 did not reach (ViT b8 FFN down, ResNet-50 b32 3x3 convolutions as GEMMs)
source benchmarks/h200/setup.sh
mkdir -p /opt/trixie; for f in .gl/trixie/*.deb; do dpkg -x "$f" /opt/trixie; done
R=/opt/trixie; printf '#!/bin/sh\nexec %s --library-path %s %s "$@"\n' $R/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 $R/usr/lib/x86_64-linux-gnu:$R/lib/x86_64-linux-gnu $R/usr/bin/glslc > /tmp/glslc2; chmod +x /tmp/glslc2
GLSLC=/tmp/glslc2 timeout 200 python3 benchmarks/h200/coopmat2_probe.py 1576x768x3072,256x6272x2304,64x100352x576 128x128x32x128:u8c2 64x128x32x128:u8c2 64x64x32x128:u8c2 > $OUT/cm2.txt 2>&1; cut -c1-250 $OUT/cm2.txt | tail -9
