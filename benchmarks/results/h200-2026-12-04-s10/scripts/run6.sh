#!/bin/bash
# device call 6 (session 10): the final tree: transformers fp32 (issue 10's table) and fp16 (issue 11's BERT b1 row)
source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
timeout 270 python3 benchmarks/h200/transformers.py --models vit,bert,gpt2 --batches 1,8 --repeat 20 --json $OUT/tf_fp32.json > $OUT/tf_fp32.txt 2>&1; grep -A7 "model  batch" $OUT/tf_fp32.txt
timeout 200 python3 benchmarks/h200/transformers.py --precision fp16 --models bert,gpt2,vit --batches 1,8 --repeat 30 --json $OUT/tf_fp16.json > $OUT/tf_fp16.txt 2>&1; grep -A7 "model  batch" $OUT/tf_fp16.txt
