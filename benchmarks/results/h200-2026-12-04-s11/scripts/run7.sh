#!/bin/bash
# device call 7 (session 11): final tables, float32 transformers (issue 10) and float16 BERT/GPT-2 batch 1 (issue 11)
source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
timeout 330 python3 benchmarks/h200/transformers.py --models vit,bert,gpt2 --batches 8,1 --repeat 30 --json $OUT/tf_fp32.json > $OUT/tf_fp32.txt 2>&1; grep -A8 "model  batch" $OUT/tf_fp32.txt; grep "vkc GPU\|attention_tiled\|matmul_tiled" $OUT/tf_fp32.txt | head -12
timeout 200 python3 benchmarks/h200/transformers.py --precision fp16 --models bert,gpt2 --batches 1 --repeat 50 --json $OUT/tf_fp16.json > $OUT/tf_fp16.txt 2>&1; grep -A4 "model  batch" $OUT/tf_fp16.txt
