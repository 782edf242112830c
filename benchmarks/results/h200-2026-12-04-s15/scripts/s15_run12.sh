source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
export VKC_CACHE_DIR=$PWD/.bench/cache; unset VKC_COOPMAT2_GLSLC
timeout 240 python3 .bench/s15_small.py split > $OUT/small_split.txt 2> $OUT/small_split.err
grep -v '"fields"' $OUT/small_split.txt | cut -c1-600; tail -3 $OUT/small_split.err
