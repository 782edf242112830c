source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
python3 benchmarks/h200/coopmat.py check --coopmat2 0 2>&1 | grep "cm2_\|gemm_512\|check:\|FAIL\|Error" | cut -c1-200 | tee $OUT/check_cm2.txt
python3 .bench/s13_cm2_variants2.py 2>&1 | tail -6 | cut -c1-260 | tee $OUT/variants.txt
python3 benchmarks/h200/coopmat.py gemm 8192,1576x2304x768 coopmat2 2>&1 | grep gemm | cut -c1-330 | tee $OUT/gemm_cm2.txt
python3 .bench/tune_bert.py 2>&1 | tail -40 | tee $OUT/tune_bert.txt
