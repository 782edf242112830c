source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > $OUT/smi.txt
timeout 300 python3 .bench/s15_diag.py 8192 > $OUT/diag.txt 2> $OUT/diag.err
timeout 60 python3 benchmarks/h200/pipeline_stats.py .bench/g15/*.vkb > $OUT/stats.txt 2>&1
cat $OUT/diag.txt | cut -c1-200; grep -o "g15/[^ ]* [^ ]* Register Count=[0-9]*" $OUT/stats.txt; tail -3 $OUT/diag.err
