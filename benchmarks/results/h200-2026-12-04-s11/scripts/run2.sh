#!/bin/bash
# device call 2 (session 11): ragged blocks on a guarded copy of the loops vs full blocks; ViT fp32
source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
timeout 150 python3 benchmarks/h200/attention_tiles.py --variants default,full-blocks > $OUT/att_fp32.txt 2>&1; tail -9 $OUT/att_fp32.txt
timeout 200 python3 benchmarks/h200/transformers.py --models vit --batches 8,1 --repeat 20 > $OUT/tf_vit.txt 2>&1; grep -A3 "model  batch" $OUT/tf_vit.txt; grep -A8 "vkc GPU" $OUT/tf_vit.txt | grep "attention\|GPU"
