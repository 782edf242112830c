source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
timeout 200 python3 .bench/s15_diag.py 8192 run6 > $OUT/diag6.txt 2> $OUT/diag6.err
timeout 200 python3 .bench/s15_diag.py 8192 8160 run6 > $OUT/diag6_k8160.txt 2>> $OUT/diag6.err
timeout 60 python3 benchmarks/h200/pipeline_stats.py .bench/g15/*.vkb > $OUT/stats6.txt 2>&1
cut -c1-110 $OUT/diag6.txt $OUT/diag6_k8160.txt; grep -o "g15/[^ ]* [^ ]* Register Count=[0-9]*" $OUT/stats6.txt; tail -3 $OUT/diag6.err
