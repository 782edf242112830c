source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
timeout 200 python3 .bench/s15_diag.py 8192 run5 > $OUT/diag5.txt 2> $OUT/diag5.err
timeout 200 python3 .bench/s15_diag.py 8192 8160 run5 > $OUT/diag5_k8160.txt 2>> $OUT/diag5.err
timeout 60 python3 benchmarks/h200/pipeline_stats.py .bench/g15/d*coherent.vkb .bench/g15/dw48*.vkb .bench/g15/dn48_as_is.vkb > $OUT/stats5.txt 2>&1
cut -c1-110 $OUT/diag5.txt $OUT/diag5_k8160.txt; grep -o "g15/[^ ]* [^ ]* Register Count=[0-9]*" $OUT/stats5.txt; tail -3 $OUT/diag5.err
