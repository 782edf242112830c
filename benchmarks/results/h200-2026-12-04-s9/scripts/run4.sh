#!/bin/bash
# device call 4 (session 9): cooperative-matrix kernel with its fetch/stash and epilogue loops unrolled
source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
V=default,default+unroll,default+unrollep,default+unroll+unrollep,ck128+unroll+unrollep,ck256+unroll+unrollep
timeout 260 python3 benchmarks/h200/profile_variants.py fp16 bert:1,gpt2:1,vit:8 $V > $OUT/pv_unroll.txt 2>&1
grep -h '^{' $OUT/pv_unroll.txt | cut -c1-200
timeout 60 python3 benchmarks/h200/coopmat.py gemm 4096,8192 > $OUT/gemm_default.txt 2>&1; tail -3 $OUT/gemm_default.txt
timeout 60 python3 .bench/gemm_unroll.py 4096,8192 > $OUT/gemm_unroll.txt 2>&1; tail -3 $OUT/gemm_unroll.txt
timeout 90 python3 benchmarks/h200/profile_variants.py fp16 resnet50:1,resnet50:32 default,default+unroll+unrollep > $OUT/pv_unroll_r50.txt 2>&1
grep -h '^{' $OUT/pv_unroll_r50.txt | cut -c1-200
