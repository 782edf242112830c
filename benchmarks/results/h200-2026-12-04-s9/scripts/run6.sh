#!/bin/bash
# device call 6 (session 9): ViT b8 again and GPT-2 (float32) on the final tree
source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
timeout 85 python3 benchmarks/h200/transformers.py --models vit --batches 8 --repeat 20 > $OUT/tf_vit8.txt 2>&1; grep -A2 "model  batch" $OUT/tf_vit8.txt
timeout 90 python3 benchmarks/h200/transformers.py --models gpt2 --batches 1,8 --repeat 20 > $OUT/tf_gpt2.txt 2>&1; grep -A3 "model  batch" $OUT/tf_gpt2.txt
