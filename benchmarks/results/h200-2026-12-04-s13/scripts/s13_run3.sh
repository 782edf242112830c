source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
python3 benchmarks/h200/coopmat.py gemm 8192,4096 sweep 3,15,16,17,18,5,19,20 2>&1 | grep gemm | cut -c1-330 | tee $OUT/sweep.txt
