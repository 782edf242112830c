source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
python3 .bench/s13_cm2_variants.py 2>&1 | tail -20 | tee $OUT/variants.txt
python3 benchmarks/h200/coopmat2_probe.py 8192,128x768x768,1576x2304x768 128x256x32x256:u8c2 32x64x32x128:u8c2 2>&1 | grep shape | cut -c1-200 | tee $OUT/probe.txt
python3 benchmarks/h200/coopmat.py check --coopmat2 2>&1 | cut -c1-300 | tee $OUT/check_cm2.txt
