source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
python3 .bench/s13_cm2_variants.py 2>&1 | tail -12 | cut -c1-260 | tee $OUT/variants.txt
for t in 2 3 4; do python3 benchmarks/h200/coopmat.py check --coopmat2 $t 2>&1 | grep -v "^{\"device\|^host\|^nvidia" | cut -c1-200 | tee -a $OUT/check_cm2.txt; done
nvidia-smi -q | grep -i -A3 "xid\|retired\|remapp" | head -20 | tee $OUT/smi.txt
