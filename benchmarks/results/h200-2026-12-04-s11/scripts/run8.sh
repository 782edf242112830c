#!/bin/bash
# device call 8 (session 11): vkc tune --precision fp16 on BERT-base b1 (more candidates since session 10), then
# --target host (the tuned choices) against torch CUDA graphs, BERT and GPT-2 (the same GEMM shapes) at batch 1
source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
timeout 240 python3 .bench/tune_bert.py > $OUT/tune_bert.txt 2>&1; grep -v "^{" $OUT/tune_bert.txt | tail -14
timeout 150 python3 benchmarks/h200/transformers.py --target host --precision fp16 --models bert,gpt2 --batches 1 --repeat 50 --json $OUT/tf_fp16_host.json > $OUT/tf_fp16_host.txt 2>&1; grep -A4 "model  batch" $OUT/tf_fp16_host.txt
