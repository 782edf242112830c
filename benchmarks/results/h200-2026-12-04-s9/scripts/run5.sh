#!/bin/bash
# device call 5 (session 9): attention with the next key block prefetched; transformers and ResNet-50 b32 on the final tree
source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
timeout 60 python3 benchmarks/h200/attention_tiles.py --variants default,noprefetch,rows1,rows2 --shapes vit-b1,vit-b8,bert-b1,bert-b8 > $OUT/att_fp32.txt 2>&1; cat $OUT/att_fp32.txt
timeout 30 python3 benchmarks/h200/attention_tiles.py --precision fp16 --variants default,noprefetch --shapes bert-b1,vit-b8 > $OUT/att_fp16.txt 2>&1; cat $OUT/att_fp16.txt
timeout 190 python3 benchmarks/h200/transformers.py --models vit,bert --batches 1,8 --repeat 20 > $OUT/tf_fp32.txt 2>&1; grep -A6 "model  batch" $OUT/tf_fp32.txt
timeout 60 python3 benchmarks/h200/transformers.py --precision fp16 --models bert --batches 1 --repeat 50 > $OUT/tf_fp16.txt 2>&1; grep -A2 "model  batch" $OUT/tf_fp16.txt
timeout 70 python3 benchmarks/h200/models.py nvidia resnet50 32 > $OUT/r50_b32.txt 2>&1; tail -2 $OUT/r50_b32.txt
