source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
python3 benchmarks/h200/coopmat.py check --coopmat2 2>&1 | cut -c1-400 | tee $OUT/check_cm2.txt
python3 benchmarks/h200/coopmat.py gemm 8192,4096,128x768x768,128x2304x768,128x3072x768,128x768x3072,1576x2304x768,1576x3072x768,1576x768x3072 coopmat2 2>&1 | grep gemm | cut -c1-300 | tee $OUT/gemm_cm2.txt
