source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
timeout 280 python3 .bench/s15_paired.py resnet50:32,vit:8 > $OUT/paired.txt 2> $OUT/paired.err
grep -v "^{" $OUT/paired.txt; tail -3 $OUT/paired.err
