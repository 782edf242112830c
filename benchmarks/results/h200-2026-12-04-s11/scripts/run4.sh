#!/bin/bash
# device call 4 (session 11): fp32 GEMM K-step configs; per-dispatch BERT fp16 b1 (default vs cs16) and ResNet-50 fp16 b32
source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
timeout 100 python3 benchmarks/h200/gemm_shapes.py run out/gemm_shapes > $OUT/gemm.txt 2>&1; grep -v "^statistics" $OUT/gemm.txt | cut -c1-150
timeout 150 python3 .bench/ttable2.py bert 1 fp16 default,cs16 > $OUT/ttable_bert16.txt 2>&1; cat $OUT/ttable_bert16.txt | cut -c1-150
timeout 150 python3 .bench/ttable2.py resnet50 32 fp16 default > $OUT/ttable_r50_16.txt 2>&1; head -40 $OUT/ttable_r50_16.txt | cut -c1-150
