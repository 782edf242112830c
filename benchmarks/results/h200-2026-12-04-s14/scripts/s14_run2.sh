source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
timeout 330 python3 .bench/s14_tune_matrix.py bert:1,gpt2:1,vit:1,resnet50:1,resnet18:1,mobilenet_v2:1 "[dict(coopmat_short_k=0)]" > $OUT/short_k_matrix.txt 2> $OUT/short_k_matrix.err
timeout 200 python3 benchmarks/h200/transformers.py --models bert,gpt2 --batches 1 --precision fp16 --repeat 50 > $OUT/transformers_fp16_b1.txt 2> $OUT/transformers_fp16_b1.err
tail -5 $OUT/short_k_matrix.err; tail -15 $OUT/transformers_fp16_b1.txt
