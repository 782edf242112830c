#!/bin/bash
# device call 2 (session 10): fp16 GEMM at BERT b1 shapes per config vs cuBLAS; LayerNorm variants; BERT fp16 b1
cp -r .bench/clean/. . && rm -f compiler/passes/sink_row_selection.py   # the committed tree (a helper edits passes here)
source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
timeout 150 python3 benchmarks/h200/gemm_shapes.py run out/gemm_shapes_fp16 > $OUT/gemm_fp16.txt 2>&1; grep -v "^statistics" $OUT/gemm_fp16.txt | cut -c1-150
timeout 200 python3 benchmarks/h200/profile_variants.py fp16 bert:1 default,ln-reread,ln-wide,att-tiled > $OUT/pv_fp16.txt 2>&1; cat $OUT/pv_fp16.txt | cut -c1-250
timeout 150 python3 benchmarks/h200/profile_variants.py fp32 vit:8 default,ln-reread,ln-wide > $OUT/pv_fp32.txt 2>&1; cat $OUT/pv_fp32.txt | cut -c1-250
