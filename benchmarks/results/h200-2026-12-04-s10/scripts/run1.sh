#!/bin/bash
# device call 1 (session 10): cooperative-matrix attention: correctness vs onnxruntime, tile variants, BERT fp16 b1
cp -r .bench/clean/. . && rm -f compiler/passes/sink_row_selection.py   # the committed tree (a helper edits passes here)
source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
timeout 200 python3 benchmarks/h200/coopmat.py check > $OUT/check.txt 2>&1; grep -v '"case": "gemm\|"case": "conv\|"case": "matmul' $OUT/check.txt | tail -14
timeout 150 python3 benchmarks/h200/attention_tiles.py --precision fp16 --variants tiled,default,cm_wq1,cm_wq2,cm_wq4,cm_noprefetch,cm_prefetch,cm_bk32 --shapes bert-b1,bert-b8,vit-b1,vit-b8 > $OUT/att_fp16.txt 2>&1; cat $OUT/att_fp16.txt
timeout 120 python3 benchmarks/h200/transformers.py --precision fp16 --models bert --batches 1 --repeat 50 > $OUT/tf_fp16.txt 2>&1; grep -A2 "model  batch" $OUT/tf_fp16.txt; grep -i "attention\|layernorm" $OUT/tf_fp16.txt | head -8
