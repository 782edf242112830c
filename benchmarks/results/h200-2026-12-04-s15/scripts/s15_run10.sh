source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
timeout 60 python3 .bench/s15_churn.py loads > $OUT/churn_fixed.txt 2>&1; cat $OUT/churn_fixed.txt
C=benchmarks/h200/coopmat.py
timeout 200 python3 $C gemm 8192,8192x8192x8160 sweep 3,16,17,18,0 2>&1 | grep '"gemm"\|Error' > $OUT/gemm_final.txt
timeout 100 python3 $C gemm 8192 coopmat2 1 2>&1 | grep '"gemm"\|Error' >> $OUT/gemm_final.txt
grep -o '"gemm": "[^"]*"\|"tiles": "[^"]*"\|"vkc_tflops": [0-9.]*\|"cublas_tflops": [0-9.]*\|"pct_of_cublas": [0-9.]*' $OUT/gemm_final.txt | paste - - - - -
