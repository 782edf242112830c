source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
python3 .bench/s13_cm2_variants2.py 2>&1 | tail -12 | cut -c1-260 | tee $OUT/variants2.txt
python3 benchmarks/h200/coopmat2_probe.py 8192 128x256x32x256:u8c2 2>&1 | grep shape | cut -c1-200 | tee $OUT/probe.txt
for t in 0 4; do python3 benchmarks/h200/coopmat.py check --coopmat2 $t 2>&1 | grep -v "^{\"device\|^host\|^nvidia" | grep "cm2_\|check:\|FAIL\|Error" | cut -c1-200 | tee -a $OUT/check_cm2.txt; done
