#!/bin/bash
# device call 3 (session 9): issue 12's zoo table on the final tree; vkc tune fp16 on BERT b1
source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
timeout 230 python3 benchmarks/h200/models.py nvidia+default mobilenet_v2,resnet18,squeezenet1_0,mnasnet1_0,regnet_y_400mf,mobilenet_v3_large,mobilenet_v3_small,efficientnet_b0,shufflenet_v2_x1_0,resnet50,lraspp_mobilenet_v3_large,unet_small 1 > $OUT/zoo_b1.txt 2>&1
tail -13 $OUT/zoo_b1.txt
timeout 200 python3 .bench/tune_bert.py > $OUT/tune_bert.txt 2>&1; tail -14 $OUT/tune_bert.txt
timeout 60 python3 benchmarks/h200/transformers.py --precision fp16 --models bert --batches 1 --repeat 50 > $OUT/tf_fp16.txt 2>&1; grep -A2 "model  batch" $OUT/tf_fp16.txt
