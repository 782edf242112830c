source benchmarks/h200/setup.sh; export CPATH=/opt/tools/usr/include
for m in instances devices loads; do timeout 60 python3 .bench/s15_churn.py $m; done > $OUT/churn.txt 2>&1; cat $OUT/churn.txt
python3 -m pip install -q --no-index --no-deps --target /tmp/site .ncnn/*.whl 2>/dev/null
export VKC_GLSLC=$PWD/.toolchain/glslc; unset VKC_COOPMAT2_GLSLC
NCNN_PARAMS=.ncnn/params timeout 240 python3 benchmarks/h200/coopmat.py models mobilenet_v2:1,resnet18:1,resnet50:1 > $OUT/models_ncnn.txt 2>&1; grep "^{" $OUT/models_ncnn.txt | cut -c1-400; tail -2 $OUT/models_ncnn.txt
