source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
timeout 400 python3 .bench/s14_tune_model.py vit 8 > $OUT/tune_vit8.txt 2>&1; grep -v "^{" $OUT/tune_vit8.txt | tail -22
