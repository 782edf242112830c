source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
C=benchmarks/h200/coopmat.py
timeout 280 python3 $C gemm 8192 sweep 3,0,1,2,4,5,6,7,8,9,10,11,12,13,14,15,16 2>&1 | grep '"gemm"\|Error' | cut -c1-330 > $OUT/sweep_warm.txt
timeout 200 python3 $C gemm 8192 coopmat2 1,0,2,3,4,5,128x128x32x256x8,64x256x32x256x8,128x128x32x128x8,256x128x32x256x1,128x256x32x256x4 2>&1 | grep '"gemm"\|Error' | cut -c1-330 > $OUT/cm2_tiles_warm.txt
grep -o '"tiles": "[^"]*"\|"vkc_tflops": [0-9.]*' $OUT/sweep_warm.txt $OUT/cm2_tiles_warm.txt | paste - -
