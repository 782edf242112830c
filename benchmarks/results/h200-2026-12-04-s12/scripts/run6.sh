#!/bin/bash
# device call 6 (session 12): issue 11's model table in one run (vkc fp16 vs torch fp16 CUDA graphs and ncnn-Vulkan fp16); BERT-base fp16 b1 tuned (vkc tune) vs graphs
source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
python3 -m pip install -q --no-index --no-deps --target /tmp/site .ncnn/*.whl 2>/dev/null
NCNN_PARAMS=.ncnn/params timeout 220 python3 benchmarks/h200/coopmat.py models resnet50:1,resnet50:32,mobilenet_v2:1,resnet18:1 > $OUT/models_fp16.txt 2>&1; grep "^{" $OUT/models_fp16.txt | cut -c1-330
timeout 150 python3 .bench/tune_bert.py > $OUT/tune_bert.txt 2>&1; grep -v "^{" $OUT/tune_bert.txt | tail -10
timeout 120 python3 benchmarks/h200/transformers.py --target host --precision fp16 --models bert,gpt2 --batches 1 --repeat 50 --json $OUT/tf_fp16_host.json > $OUT/tf_fp16_host.txt 2>&1; grep -A4 "model  batch" $OUT/tf_fp16_host.txt
