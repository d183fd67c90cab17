#!/usr/bin/env bash
# Install what tetra needs to build and test, only when missing (idempotent): Debian packages via
# apt-get, Python test tools via pip. Safe to run on every invocation.
set -euo pipefail

apt_pkgs=(cmake ninja-build g++ pkg-config nlohmann-json3-dev libcpp-httplib-dev libcli11-dev libpcre2-dev
          libgtest-dev)
missing=()
for p in "${apt_pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Python: test tools and goldens only (never needed by the tetra binary at run time).
py_pkgs=(numpy gguf safetensors openai)
py_missing=()
for p in "${py_pkgs[@]}"; do
  python3 -m pip show -q "$p" >/dev/null 2>&1 || py_missing+=("$p")
done
if [ ${#py_missing[@]} -gt 0 ]; then
  echo "deps: installing Python packages: ${py_missing[*]}"
  python3 -m pip install -q "${py_missing[@]}"
fi
