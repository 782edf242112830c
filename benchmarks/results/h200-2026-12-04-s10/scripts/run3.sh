#!/bin/bash
# device call 3 (session 10): ViT fp32 with row selections sunk; fp16 coopmat workgroup/K-step rules per GEMM and on whole transformers
source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
timeout 60 python3 benchmarks/h200/gemm_shapes.py run out/gemm_shapes_fp16 > $OUT/gemm_fp16.txt 2>&1; grep -v "^statistics" $OUT/gemm_fp16.txt | cut -c1-110
timeout 150 python3 benchmarks/h200/transformers.py --models vit --batches 1,8 --repeat 20 > $OUT/tf_vit.txt 2>&1; grep -A3 "model  batch" $OUT/tf_vit.txt
timeout 270 python3 benchmarks/h200/profile_variants.py fp16 bert:1,gpt2:1,vit:8 default,cw66,ks12,cw66-ks12 > $OUT/pv_fp16.txt 2>&1; cut -c1-200 $OUT/pv_fp16.txt
