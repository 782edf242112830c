source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
timeout 200 python3 .bench/s15_diag.py 8192 run7 > $OUT/diag7.txt 2> $OUT/diag7.err
timeout 60 python3 benchmarks/h200/pipeline_stats.py .bench/g15/*.vkb > $OUT/stats7.txt 2>&1
cut -c1-110 $OUT/diag7.txt; grep -o "g15/[^ ]* [^ ]* Register Count=[0-9]*" $OUT/stats7.txt; tail -3 $OUT/diag7.err
