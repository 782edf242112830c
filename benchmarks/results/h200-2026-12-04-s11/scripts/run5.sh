#!/bin/bash
# device call 5 (session 11): LayerNorm fused into the producing matmul (row_norm) vs own dispatch
source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
timeout 150 python3 .bench/ttable2.py bert 1 fp16 default,no-rownorm > $OUT/ttable_bert16.txt 2>&1; cut -c1-150 $OUT/ttable_bert16.txt
timeout 240 python3 benchmarks/h200/profile_variants.py fp16 bert:1,gpt2:1,vit:8,bert:8 default,no-rownorm > $OUT/pv_fp16.txt 2>&1; cut -c1-220 $OUT/pv_fp16.txt
timeout 200 python3 benchmarks/h200/profile_variants.py fp32 bert:1,gpt2:1,vit:1 default,no-rownorm > $OUT/pv_fp32.txt 2>&1; cut -c1-220 $OUT/pv_fp32.txt
