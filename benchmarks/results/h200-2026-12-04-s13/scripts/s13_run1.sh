source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
cd benchmarks/h200
python3 coopmat_peak.py khr:1x1 khr:2x2 khr:4x2 khr:4x4 khr:2x2:128 khr:4x2:128 khr:4x2:512 \
  khr-shared:2x4x4x2 khr-shared:2x2x4x4 khr-shared:4x2x2x4 khr-shared:2x4x2x2 khr-shared:1x1x4x4 \
  nv:128x128x32 nv:128x256x32 nv:256x128x32 nv:128x256x64 nv:64x64x32:128 nv:128x128x16 2>&1 | tee $OUT/peak.txt
cd ../..
python3 benchmarks/h200/coopmat.py gemm 8192 2>&1 | tail -3 | tee $OUT/gemm.txt
