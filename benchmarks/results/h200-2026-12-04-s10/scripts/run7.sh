#!/bin/bash
# device call 7 (session 10): the register matmul unrolled (ViT's 8-row last layer, BERT's pooler): transformers fp32
source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
timeout 200 python3 benchmarks/h200/transformers.py --models vit,bert --batches 8,1 --repeat 20 --json $OUT/tf_fp32.json > $OUT/tf_fp32.txt 2>&1; grep -A5 "model  batch" $OUT/tf_fp32.txt; grep -A12 "vit b8: vkc GPU" $OUT/tf_fp32.txt
