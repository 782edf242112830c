#!/bin/bash
# On the developer machine, in the repository root: Debian 13's glslc (shaderc 2025.2, glslang 15.1,
# which compiles GL_NV_cooperative_matrix2) with the libc and C++ runtime it was built against,
# as .debs in the git-ignored .gl/trixie/ for the GPU machine (setup.sh unpacks them and sets GLSLC),
# or in the folder given (.ci/newer_glslc.sh unpacks them for the tests).
set -e
dest=${1:-.gl/trixie}
d=$(mktemp -d); mkdir -p "$d/lists/partial" "$dest"
echo 'deb [trusted=yes] http://deb.debian.org/debian trixie main' > "$d/sources.list"
o="-oDir::Etc::SourceList=$d/sources.list -oDir::Etc::SourceParts=/dev/null -oDir::State::Lists=$d/lists -oAPT::Architecture=amd64"
apt-get $o update -qq
(cd "$dest" && apt-get $o download glslc libshaderc1 spirv-tools libc6 libstdc++6 libgcc-s1)
rm -rf "$d"
