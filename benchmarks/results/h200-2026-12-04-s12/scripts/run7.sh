#!/bin/bash
# device call 7 (session 12): ResNet-50 float32 batch 32 against torch fp32 eager and CUDA graphs, final tree (issue 11's fp32 target)
source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
timeout 200 python3 benchmarks/h200/models.py nvidia resnet50 32 > $OUT/models_fp32_r50_b32.txt 2>&1; tail -8 $OUT/models_fp32_r50_b32.txt
