source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
timeout 200 python3 .bench/s15_diag.py 8192 run4 > $OUT/diag4.txt 2> $OUT/diag4.err
timeout 100 python3 .bench/s15_diag.py 8192 1024 l2 > $OUT/diag4_l2.txt 2>> $OUT/diag4.err
timeout 60 python3 benchmarks/h200/pipeline_stats.py .bench/g15/d5_pf*.vkb .bench/g15/d3_pf*.vkb > $OUT/stats4.txt 2>&1
cut -c1-110 $OUT/diag4.txt $OUT/diag4_l2.txt; grep -o "g15/[^ ]* [^ ]* Register Count=[0-9]*" $OUT/stats4.txt; tail -3 $OUT/diag4.err
