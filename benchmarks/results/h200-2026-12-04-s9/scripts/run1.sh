#!/bin/bash
# device call 1 (session 9): issue 12's zoo table on the final tree; fp16 BERT b1 K-step variants
source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > $OUT/smi.txt
timeout 200 python3 benchmarks/h200/models.py nvidia+default mobilenet_v2,resnet18,squeezenet1_0,mnasnet1_0,regnet_y_400mf,mobilenet_v3_large,mobilenet_v3_small,efficientnet_b0,shufflenet_v2_x1_0,resnet50,lraspp_mobilenet_v3_large,unet_small 1 > $OUT/zoo_b1.txt 2>&1
tail -16 $OUT/zoo_b1.txt
timeout 150 python3 benchmarks/h200/profile_variants.py fp16 bert:1,gpt2:1 default,ck128,ck256,ck256-mw528,mw528,sk2 > $OUT/pv_fp16.txt 2>&1
grep -h '^{' $OUT/pv_fp16.txt | cut -c1-200
timeout 120 python3 benchmarks/h200/transformers.py --precision fp16 --models bert --batches 1 --repeat 50 > $OUT/tf_fp16.txt 2>&1
tail -5 $OUT/tf_fp16.txt
python3 .bench/att_bundles.py /tmp && python3 benchmarks/h200/pipeline_stats.py /tmp/att_vit8.vkb /tmp/att_bert1.vkb /tmp/att_bert1h.vkb > $OUT/att_stats.txt 2>&1; cat $OUT/att_stats.txt | cut -c1-250
