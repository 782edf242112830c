source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
export VKC_CACHE_DIR=$PWD/.bench/cache
timeout 330 python3 .bench/s15_small.py > $OUT/small.txt 2> $OUT/small.err
timeout 150 python3 benchmarks/h200/coopmat.py check --sweep 0 > $OUT/check_sweep0.txt 2>&1
grep -v '"fields"' $OUT/small.txt | cut -c1-400; tail -3 $OUT/small.err; grep -c '"ok": true' $OUT/check_sweep0.txt; grep "check:\|rror" $OUT/check_sweep0.txt | tail -3
