#!/bin/bash
# device call 6 (session 11): P handed over with a subgroup barrier (tiled attention) vs the workgroup's; ViT fp32
source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
timeout 150 python3 benchmarks/h200/attention_tiles.py --variants default,workgroup-p,default,workgroup-p > $OUT/att_fp32.txt 2>&1; tail -17 $OUT/att_fp32.txt
timeout 200 python3 benchmarks/h200/transformers.py --models vit --batches 8,1 --repeat 20 > $OUT/tf_vit.txt 2>&1; grep -A3 "model  batch" $OUT/tf_vit.txt; grep "vkc GPU\|attention_tiled" $OUT/tf_vit.txt
