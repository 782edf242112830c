#!/bin/bash
# device call 1 (session 11): tiled attention with ragged last blocks skipped (fp32, fp16 tiled); ViT fp32 whole model
source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
timeout 120 python3 benchmarks/h200/attention_tiles.py --variants default > $OUT/att_fp32.txt 2>&1; tail -8 $OUT/att_fp32.txt
timeout 200 python3 benchmarks/h200/transformers.py --models vit --batches 8,1 --repeat 20 > $OUT/tf_vit.txt 2>&1; grep -A3 "model  batch" $OUT/tf_vit.txt; grep -A12 "vit b8:" $OUT/tf_vit.txt
