source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include

timeout 170 python3 .bench/s14_variants.py > $OUT/variants.txt 2>&1; cut -c1-200 $OUT/variants.txt
timeout 230 python3 benchmarks/h200/transformers.py --precision fp16 --models bert,gpt2,vit --batches 1 --repeat 50 --json $OUT/tf_fp16.json > $OUT/tf_fp16.txt 2>&1; grep -A5 "model  batch" $OUT/tf_fp16.txt
timeout 150 python3 benchmarks/h200/coopmat.py models resnet50:1,mobilenet_v2:1,resnet18:1 > $OUT/models_fp16.txt 2>&1; grep "^{" $OUT/models_fp16.txt | cut -c1-330
