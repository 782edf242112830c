source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
timeout 300 python3 .bench/s15_diag.py 8192 run3 > $OUT/diag3.txt 2> $OUT/diag3.err
timeout 60 python3 benchmarks/h200/pipeline_stats.py .bench/g15/d5_load*.vkb .bench/g15/d5_nomul.vkb .bench/g15/d3_load*.vkb .bench/g15/d3_nomul.vkb > $OUT/stats3.txt 2>&1
cut -c1-120 $OUT/diag3.txt; grep -o "g15/[^ ]* [^ ]* Register Count=[0-9]*" $OUT/stats3.txt; tail -3 $OUT/diag3.err
