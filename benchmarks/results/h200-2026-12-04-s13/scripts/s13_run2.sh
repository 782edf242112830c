source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
python3 benchmarks/h200/pipeline_stats.py .bench/g/sweep*.vkb 2>&1 | tee $OUT/stats.txt
python3 benchmarks/h200/khr_direct_probe.py 8192 2x4x4x2 2x2x4x4 4x2x2x4 2x2x4x2 1x4x4x2 2x4x2x2 4x4x2x2 2>&1 | tee $OUT/direct.txt
python3 benchmarks/h200/coopmat.py gemm 8192 sweep 3,5,6,7,8,11,12,13,14 2>&1 | grep gemm | tee $OUT/sweep.txt
