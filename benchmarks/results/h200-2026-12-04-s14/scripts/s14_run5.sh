source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
C=benchmarks/h200/coopmat.py
timeout 150 python3 $C gemm 8192,1576x2304x768 coopmat2 1,0 2>&1 | grep '"gemm"' | cut -c1-330 > $OUT/gemm_final.txt
nvidia-smi --query-gpu=clocks.sm --format=csv,noheader >> $OUT/gemm_final.txt
timeout 150 python3 $C gemm 8192 coopmat2 1 2>&1 | grep '"gemm"' | cut -c1-330 >> $OUT/gemm_final.txt
cat $OUT/gemm_final.txt | cut -c1-300
