#!/bin/bash
# device call 2 (session 9): balanced attention row groups; ShuffleNet's split read in place
source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
timeout 100 python3 benchmarks/h200/attention_tiles.py --variants default,unbalanced --shapes vit-b1,vit-b8,bert-b8 > $OUT/att.txt 2>&1; cat $OUT/att.txt
timeout 100 python3 benchmarks/h200/models.py nvidia shufflenet_v2_x1_0,squeezenet1_0,mobilenet_v3_small,regnet_y_400mf,mobilenet_v2 1 > $OUT/zoo.txt 2>&1; tail -6 $OUT/zoo.txt
timeout 150 python3 benchmarks/h200/transformers.py --models vit --batches 8 --repeat 30 > $OUT/tf_vit8.txt 2>&1; grep -A6 "model  batch" $OUT/tf_vit8.txt
timeout 80 python3 .bench/ttable.py bert 1 fp16 > $OUT/ttable_bert16.txt 2>&1; tail -30 $OUT/ttable_bert16.txt | cut -c1-200
timeout 40 python3 benchmarks/h200/host_overhead.py --models mobilenet_v2 --batches 1 > $OUT/host.txt 2>&1; tail -5 $OUT/host.txt
