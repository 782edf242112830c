#!/usr/bin/env bash
# The compiler of vkc's VK_NV_cooperative_matrix2 kernels (compiler/codegen.py NEWER_GLSL), which
# pip's glslang 13.1.1 cannot compile: Debian 13's glslc (shaderc 2025.2, glslang 15.1) with the C
# and C++ runtime it was built against, unpacked into .toolchain/trixie (git-ignored), and
# .toolchain/glslc, a wrapper that runs it through that C library's loader (so it runs on Debian
# 12 too). Point VKC_COOPMAT2_GLSLC at the wrapper; the tests do so themselves (tests/conftest.py).
# A machine with glslc 2025.2 or newer already (Debian 13, the Vulkan SDK) can use that instead.
# Argument: a folder holding the .debs already (the GPU machine, which reaches no network: setup.sh
# passes .gl/trixie); by default .toolchain/debs, fetched by fetch_glslc_trixie.sh where empty.
set -euo pipefail
cd "$(dirname "$0")/.."
debs=${1:-.toolchain/debs}
[[ -x .toolchain/glslc ]] && exit 0
[[ -n $(ls "$debs"/glslc_*.deb 2>/dev/null) ]] || bash .ci/fetch_glslc_trixie.sh "$debs"
rm -rf .toolchain/trixie && mkdir -p .toolchain/trixie
for f in "$debs"/*.deb; do dpkg -x "$f" .toolchain/trixie; done
root=$(pwd)/.toolchain/trixie lib=$(pwd)/.toolchain/trixie/usr/lib/x86_64-linux-gnu
printf '#!/bin/sh\nexec %s --library-path %s %s "$@"\n' "$lib/ld-linux-x86-64.so.2" "$lib" "$root/usr/bin/glslc" \
    > .toolchain/glslc
chmod +x .toolchain/glslc
.toolchain/glslc --version | head -3
