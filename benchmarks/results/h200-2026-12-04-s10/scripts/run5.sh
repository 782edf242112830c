#!/bin/bash
# device call 5 (session 10): cooperative-matrix split-K depth and workgroup target on fp16 models
source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
timeout 330 python3 benchmarks/h200/profile_variants.py fp16 bert:1,gpt2:1,vit:8,resnet50:1,resnet50:32 default,cs16,cw132-cs16 > $OUT/pv_fp16.txt 2>&1; cut -c1-200 $OUT/pv_fp16.txt
