#!/bin/bash
# device call 8 (session 10): two K steps in flight on the cooperative-matrix matmul (pf4: 32x32 tiles, pf8: also 64x64 and 128x128)
source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
timeout 240 python3 benchmarks/h200/profile_variants.py fp16 bert:1,gpt2:1,resnet50:1 default,pf4,pf8 > $OUT/pv_fp16.txt 2>&1; cut -c1-200 $OUT/pv_fp16.txt
