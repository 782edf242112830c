source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
timeout 150 python3 .bench/s14_cold_warm.py > $OUT/cold_warm.txt 2>&1
timeout 330 python3 .bench/s14_tune_matrix.py mobilenet_v2:1,vit:1,resnet50:1,bert:1 "[dict(coopmat_short_k=0), dict()]" > $OUT/short_k_matrix_warm.txt 2> $OUT/short_k_matrix_warm.err
cat $OUT/cold_warm.txt; tail -8 $OUT/short_k_matrix_warm.err
