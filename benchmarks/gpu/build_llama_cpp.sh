#!/usr/bin/env bash
# Build llama.cpp's llama-bench and llama-quantize with the Vulkan backend, for the peer benchmark
# benchmarks/gpu/llama_cpp.py, into .llama/llama-vulkan.tar.xz (git-ignored; carried to the GPU
# machine, which has no network access). From a Debian 12 machine with cmake, ninja, gcc, xz, pip, git
# (about 20 minutes on 2 cores):
#   bash benchmarks/gpu/build_llama_cpp.sh [BUILD_DIR]      # BUILD_DIR: /tmp/llama-vulkan by default
# - the source: llama.cpp as llama-cpp-python 0.3.36's sdist vendors it (the version
#   benchmarks/lavapipe uses), pinned by SHA-256; its .git data names the commit llama-bench reports;
# - shaders: Debian 13's glslc (.toolchain/glslc, .ci/newer_glslc.sh), which compiles
#   GL_KHR_cooperative_matrix and GL_NV_cooperative_matrix2 (Debian 12's cannot);
# - headers: Debian 13's Vulkan 1.4.309 headers and SPIR-V headers (ggml-vulkan uses structs newer
#   than Debian 12's 1.3.239); linked against Debian 12's libvulkan.so.1 (Debian 13's needs glibc
#   2.38; ggml-vulkan loads every entry point through vkGetInstanceProcAddr, so any loader will do);
#   the .debs from the Debian mirror apt's configuration names, checked as .ci/fetch_glslc_trixie.sh does;
# - libstdc++ and libgcc linked in statically and static ggml libraries: the binaries need only
#   libvulkan.so.1 and glibc (>= this machine's) from the GPU machine.
# The archive: bin/llama-bench, bin/llama-quantize, convert_hf_to_gguf.py with what it imports from
# the tree (conversion/, gguf-py/, llama.cpp's own pure-python gguf package: no wheel needed).
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd)
work=$(realpath -m "${1:-/tmp/llama-vulkan}")
sdist=llama_cpp_python-0.3.36.tar.gz
sdist_sha=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
debs="dc18db866d63680351c40ac6b6bece34cb52da64a7799ce1cc4f16f6bff4d064  spirv-headers_1.6.1+1.4.309.0-1_all.deb
8d329d465e16168afff58b1bd0dd6db46aac2cc3f56054a481b25a04e90b345a  libvulkan-dev_1.4.309.0-1_amd64.deb
622f28b807ba55a1f5ad1622ff83aa2c5b11fedbec074850e04c10a8f28b43d3  libvulkan1_1.3.239.0-1_amd64.deb"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg

for tool in cmake ninja gcc g++ readelf strip xz dpkg apt-get python3 git; do
  command -v $tool >/dev/null || {
    echo "error: $tool missing: apt-get install cmake ninja-build g++ xz-utils python3-pip git" >&2; exit 1; }
done
[[ -x .toolchain/glslc ]] || bash .ci/newer_glslc.sh >/dev/null   # Debian 13's glslc
mkdir -p "$work"

# The source, unless already unpacked.
src=$work/llama_cpp_python-0.3.36/vendor/llama.cpp
if [[ ! -f $src/CMakeLists.txt ]]; then
  [[ -f $work/$sdist ]] || python3 -m pip download -q --no-binary :all: --no-deps llama-cpp-python==0.3.36 -d "$work"
  echo "$sdist_sha  $work/$sdist" | sha256sum --quiet -c
  tar xzf "$work/$sdist" -C "$work"
fi

# Debian 13's Vulkan and SPIR-V headers, Debian 12's loader to link against, pinned by version and sum.
vk=$work/vkhdr
if [[ ! -f $vk/usr/include/vulkan/vulkan_core.h ]]; then
  [[ -r $keyring ]] || { echo "error: $keyring missing: apt-get install debian-archive-keyring" >&2; exit 1; }
  mirror=$(apt-get indextargets --format '$(TARGET_OF) $(RELEASE) $(REPO_URI)' |
           awk '$1 == "deb" && $2 ~ /^[a-z]+$/ { print $3; exit }')
  [[ -n $mirror ]] || { echo "error: no Debian mirror in apt's configuration (apt-get indextargets)" >&2; exit 1; }
  apt=$work/apt
  rm -rf "$apt" && mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/debs"
  chmod -R a+rwx "$apt"   # apt's download sandbox user writes here
  printf 'deb [signed-by=%s] %s %s main\n' "$keyring" "$mirror" trixie "$keyring" "$mirror" bookworm > "$apt/sources.list"
  opts=(-oDir::Etc::SourceList="$apt/sources.list" -oDir::Etc::SourceParts=/dev/null -oDir::State::Lists="$apt/lists"
        -oDir::Cache="$apt/cache" -oAPT::Architecture=amd64 -oAPT::Architectures=amd64)
  apt-get "${opts[@]}" update -qq
  pins=$(echo "$debs" | awk '{ split($2, p, "_"); print p[1] "=" p[2] }')
  # shellcheck disable=SC2086
  (cd "$apt/debs" && apt-get "${opts[@]}" download -q $pins >/dev/null)
  (cd "$apt/debs" && echo "$debs" | sha256sum --quiet -c) || {
    echo "error: a downloaded .deb does not match its sum in $0" >&2; exit 1; }
  rm -rf "$vk" && mkdir -p "$vk/bookworm"
  for f in "$apt"/debs/spirv-headers_*.deb "$apt"/debs/libvulkan-dev_*.deb; do dpkg -x "$f" "$vk"; done
  dpkg -x "$apt"/debs/libvulkan1_*.deb "$vk/bookworm"
fi

build=$work/build
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DGGML_VULKAN=ON -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DGGML_OPENMP=OFF \
  -DCMAKE_EXE_LINKER_FLAGS="-static-libstdc++ -static-libgcc" -DCMAKE_SKIP_BUILD_RPATH=ON \
  -DVulkan_GLSLC_EXECUTABLE="$repo/.toolchain/glslc" \
  -DVulkan_INCLUDE_DIR="$vk/usr/include" \
  -DVulkan_LIBRARY="$vk/bookworm/usr/lib/x86_64-linux-gnu/libvulkan.so.1" \
  -DSPIRV-Headers_DIR="$vk/usr/share/cmake/SPIRV-Headers" | tee "$work/configure.log"
# ggml-vulkan says which shader extensions glslc compiles: the cooperative-matrix ones must be there.
for ext in GL_KHR_cooperative_matrix GL_NV_cooperative_matrix2; do
  grep -q "$ext supported by glslc" "$work/configure.log" || echo "warning: glslc lacks $ext: llama.cpp is built without it" >&2
done
cmake --build "$build" -j "${JOBS:-$(nproc)}" --target llama-bench llama-quantize

# Only libvulkan.so.1 and glibc's libraries may remain dynamic, found where the system keeps them (no RUNPATH
# into this build folder).
for b in llama-bench llama-quantize; do
  ! readelf -d "$build/bin/$b" | grep -qE 'RPATH|RUNPATH' || { echo "error: $b has an RPATH" >&2; exit 1; }
  extra=$(ldd "$build/bin/$b" | awk '{ print $1 }' |
          grep -Ev '^(linux-vdso|/lib64/ld-linux-x86-64|libvulkan|libc|libm|libpthread|libdl|librt)\.so' || true)
  [[ -z $extra ]] || { echo "error: $b needs $extra besides libvulkan and glibc" >&2; exit 1; }
done

stage=$work/stage
rm -rf "$stage" && mkdir -p "$stage/bin"
cp "$build/bin/llama-bench" "$build/bin/llama-quantize" "$stage/bin/" && strip "$stage"/bin/*
cp "$src/convert_hf_to_gguf.py" "$stage/"
cp -r "$src/conversion" "$src/gguf-py" "$stage/"
find "$stage" -name __pycache__ -prune -exec rm -rf {} +
git -C "$src" log -1 --format='%H %cs' > "$stage/COMMIT" 2>/dev/null || true
mkdir -p "$repo/.llama"
tar -C "$stage" -cf - . | xz -9 -T0 > "$work/llama-vulkan.tar.xz"   # then moved: never a partial archive
mv "$work/llama-vulkan.tar.xz" "$repo/.llama/llama-vulkan.tar.xz"
ls -l "$repo/.llama/llama-vulkan.tar.xz"
