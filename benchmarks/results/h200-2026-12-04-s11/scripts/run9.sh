#!/bin/bash
# device call 9 (session 11): K steps deepened while 3 remain (what vkc tune chose for BERT's out-projection), as a default candidate
source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
timeout 270 python3 benchmarks/h200/profile_variants.py fp16 bert:1,gpt2:1,resnet50:1,mobilenet_v2:1 default,ks3,ks3-cs16 > $OUT/pv_fp16.txt 2>&1; cut -c1-200 $OUT/pv_fp16.txt
