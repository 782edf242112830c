#!/bin/bash
# device call 4 (session 10): BERT fp16 b1 per dispatch, default vs cw66-ks12; CNN fp16 under the coopmat rule variants
source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
timeout 120 python3 .bench/ttable2.py bert 1 fp16 default,cw66-ks12 > $OUT/ttable_bert16.txt 2>&1; cat $OUT/ttable_bert16.txt
timeout 300 python3 benchmarks/h200/profile_variants.py fp16 resnet50:1,resnet50:32,mobilenet_v2:1,resnet18:1 default,cw66-ks12,cw66 > $OUT/pv_cnn16.txt 2>&1; cut -c1-200 $OUT/pv_cnn16.txt
