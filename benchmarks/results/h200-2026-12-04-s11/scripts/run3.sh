#!/bin/bash
# device call 3 (session 11): A-tile swizzle in matmul_tiled, per GEMM shape and whole fp32 models
source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
timeout 100 python3 benchmarks/h200/gemm_shapes.py run out/gemm_shapes out/gemm_shapes_noswz > $OUT/gemm.txt 2>&1; grep -v "^statistics" $OUT/gemm.txt | cut -c1-150
timeout 400 python3 benchmarks/h200/profile_variants.py fp32 vit:8,bert:8,resnet50:32,resnet50:1 default,a-plain > $OUT/pv_fp32.txt 2>&1; cut -c1-220 $OUT/pv_fp32.txt
