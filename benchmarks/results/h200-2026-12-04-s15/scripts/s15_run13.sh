source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
timeout 120 python3 .bench/s15_small_diag.py > $OUT/small_diag.txt 2> $OUT/small_diag.err
cut -c1-200 $OUT/small_diag.txt; tail -3 $OUT/small_diag.err
