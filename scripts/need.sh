#!/usr/bin/env bash
# need.sh PKG...: installs the Debian packages whose command (same name) is missing, with
# apt-get, as root or through sudo. One home for what the demo, `make test` and CI install.
set -euo pipefail
missing=()
for pkg in "$@"; do
  command -v "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
((${#missing[@]})) || exit 0
sudo=""
if [[ $(id -u) != 0 ]]; then
  command -v sudo >/dev/null || { echo "please install: ${missing[*]} (apt-get install -y ${missing[*]})" >&2; exit 1; }
  sudo=sudo
fi
command -v apt-get >/dev/null || { echo "please install: ${missing[*]} (no apt-get here)" >&2; exit 1; }
echo "installing ${missing[*]} with apt-get" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
