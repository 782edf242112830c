source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
timeout 60 python3 benchmarks/h200/pipeline_stats.py --ir /tmp/ir .bench/g15/d5_as_is.vkb .bench/g15/d16_deep.vkb .bench/g15/d16_deep_fence.vkb .bench/g15/d3_as_is.vkb > $OUT/stats_ir.txt 2>&1
ls -la /tmp/ir >> $OUT/stats_ir.txt 2>&1; (cd /tmp && tar czf $OUT/ir.tgz ir) 2>/dev/null
timeout 300 python3 .bench/s15_diag.py 8192 run2 > $OUT/diag2.txt 2> $OUT/diag2.err
timeout 60 python3 benchmarks/h200/pipeline_stats.py .bench/g15/d5_fence.vkb .bench/g15/d16_*.vkb .bench/g15/d15_*.vkb .bench/g15/d3_fence.vkb > $OUT/stats2.txt 2>&1
cut -c1-150 $OUT/diag2.txt; grep -o "g15/[^ ]* [^ ]* Register Count=[0-9]*" $OUT/stats2.txt; tail -3 $OUT/diag2.err; cat $OUT/stats_ir.txt | cut -c1-300
