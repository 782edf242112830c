#!/usr/bin/env bash
# Download Debian 13's glslc (shaderc 2025.2, glslang 15.1: it compiles GL_NV_cooperative_matrix2)
# and the C and C++ runtime it was built against into the folder given (.toolchain/debs by
# default), from the Debian mirror this machine's apt already uses, and check them:
# - the mirror is read from apt's own configuration (`apt-get indextargets`: sources.list and
#   sources.list.d/, one-line or deb822), never written here;
# - apt verifies trixie's Release file against Debian's archive keyring and each .deb against the
#   Release's package index;
# - each .deb must match its SHA-256 in .ci/trixie_glslc.sha256, whose file names pin the versions.
# When the mirror no longer carries a pinned version (a trixie point release replaced it), this
# fails and says so: update the versions and sums in .ci/trixie_glslc.sha256 together.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=$(realpath -m "${1:-.toolchain/debs}")
sums=$(pwd)/.ci/trixie_glslc.sha256
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[[ -r $keyring ]] || { echo "error: $keyring missing: apt-get install debian-archive-keyring" >&2; exit 1; }
mirror=$(apt-get indextargets --format '$(TARGET_OF) $(RELEASE) $(REPO_URI)' |
         awk '$1 == "deb" && $2 ~ /^[a-z]+$/ { print $3; exit }')
[[ -n $mirror ]] || { echo "error: no Debian mirror in apt's configuration (apt-get indextargets)" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/debs" "$dest"
chmod -R a+rwx "$work"   # apt's download sandbox user writes here
echo "deb [signed-by=$keyring] $mirror trixie main" > "$work/sources.list"
apt_opts=(-oDir::Etc::SourceList="$work/sources.list" -oDir::Etc::SourceParts=/dev/null
          -oDir::State::Lists="$work/lists" -oDir::Cache="$work/cache"
          -oAPT::Architecture=amd64 -oAPT::Architectures=amd64)
apt-get "${apt_opts[@]}" update -qq
# glslc_2025.2-1_amd64.deb -> glslc=2025.2-1 (a version's ':' epoch is '%3a' in a file name)
pins=$(awk '{ split($2, p, "_"); gsub("%3a", ":", p[2]); print p[1] "=" p[2] }' "$sums")
# shellcheck disable=SC2086
(cd "$work/debs" && apt-get "${apt_opts[@]}" download $pins) || {
  echo "error: the mirror lacks a version pinned in .ci/trixie_glslc.sha256 ($pins)" >&2; exit 1; }
(cd "$work/debs" && sha256sum --quiet -c "$sums") || {
  echo "error: a downloaded .deb does not match .ci/trixie_glslc.sha256" >&2; exit 1; }
mv "$work"/debs/*.deb "$dest"/
