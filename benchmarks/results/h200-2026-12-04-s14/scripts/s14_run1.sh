source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
{ echo "VKC_COOPMAT2_GLSLC=$VKC_COOPMAT2_GLSLC"; $VKC_COOPMAT2_GLSLC --version 2>&1 | head -3; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; } > $OUT/setup.txt 2>&1
C=benchmarks/h200/coopmat.py
timeout 100 python3 $C gemm 8192 sweep 3,0,17,18,19 2>&1 | grep '"gemm"\|Error\|error' | cut -c1-330 > $OUT/gemm_sweep.txt
for R in 0 1; do
  VKC_ROBUST=$R timeout 110 python3 $C gemm 8192,1576x2304x768,1x768x768 coopmat2 1,0,128x256x64x256x4,256x128x32x256x8 2>&1 | grep '"gemm"\|Error\|error' | cut -c1-330 > $OUT/cm2_robust$R.txt
done
timeout 120 python3 $C check --sweep 0 2>&1 | cut -c1-220 > $OUT/check_sweep0.txt
timeout 200 python3 .bench/s14_tune_matrix.py bert:1 > $OUT/tune_matrix.txt 2> $OUT/tune_matrix.err
VKC_ROBUST=0 timeout 60 python3 $C gemm 8192 coopmat2 1,128x256x64x256x4 2>&1 | grep '"gemm"' | cut -c1-330 > $OUT/cm2_robust0_again.txt
tail -3 $OUT/tune_matrix.err
