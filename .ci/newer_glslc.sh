#!/usr/bin/env bash
# The compiler of vkc's VK_NV_cooperative_matrix2 kernels (compiler/codegen.py), which pip's
# glslang 13.1.1 cannot compile: Debian 13's glslc (shaderc 2025.2, glslang 15.1) with the C and
# C++ runtime it was built against, unpacked into .toolchain/trixie (git-ignored), and
# .toolchain/glslc, a wrapper that runs it through that C library's loader (so it runs on Debian
# 12 too). Point VKC_COOPMAT2_GLSLC at the wrapper; the tests do so themselves (tests/conftest.py).
# A machine with glslc 2025.2 or newer already (Debian 13, the Vulkan SDK) can use that instead.
# Argument: a folder holding the .debs already (a machine without network access gets them
# carried); by default .toolchain/debs, filled by .ci/fetch_glslc_trixie.sh. Either way every .deb
# is checked against .ci/trixie_glslc.sha256 before it is unpacked.
set -euo pipefail
cd "$(dirname "$0")/.."
debs=${1:-.toolchain/debs}
[[ -x .toolchain/glslc ]] && exit 0
sums=$(pwd)/.ci/trixie_glslc.sha256
(cd "$debs" 2>/dev/null && sha256sum --quiet -c "$sums" 2>/dev/null) || bash .ci/fetch_glslc_trixie.sh "$debs"
(cd "$debs" && sha256sum --quiet -c "$sums")
rm -rf .toolchain/trixie && mkdir -p .toolchain/trixie
while read -r _ deb; do dpkg -x "$debs/$deb" .toolchain/trixie; done < "$sums"
root=$(pwd)/.toolchain/trixie lib=$(pwd)/.toolchain/trixie/usr/lib/x86_64-linux-gnu
printf '#!/bin/sh\nexec %s --library-path %s %s "$@"\n' "$lib/ld-linux-x86-64.so.2" "$lib" "$root/usr/bin/glslc" \
    > .toolchain/glslc
chmod +x .toolchain/glslc
.toolchain/glslc --version | head -3
