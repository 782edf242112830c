#!/bin/bash
# device call 9 (session 10): the final tree, fp16 BERT-base and GPT-2 small at batch 1 against torch fp16 CUDA graphs
source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
timeout 150 python3 benchmarks/h200/transformers.py --precision fp16 --models bert,gpt2 --batches 1 --repeat 50 --json $OUT/tf_fp16.json > $OUT/tf_fp16.txt 2>&1; grep -A3 "model  batch" $OUT/tf_fp16.txt; grep -A3 "bert b1: vkc GPU" $OUT/tf_fp16.txt
