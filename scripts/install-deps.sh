#!/bin/bash
# install-deps.sh: the Debian packages the build, the tests and the Python tests need. Idempotent
# (installs only what is missing), non-interactive, works as root without sudo. The CUDA 13 toolkit
# (headers + NVRTC) is not a Debian package: it is checked, not installed.
set -euo pipefail

packages=(
  cmake make g++ pkg-config                                  # build
  libabsl-dev libssl-dev libboost-dev                         # Status, SHA-256, Boost.Interprocess
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc  # gRPC services
  nlohmann-json3-dev                                          # JSON output of the kjit tool
  prometheus-cpp-dev                                          # kjitd --metrics-listen
  dpkg-dev fakeroot systemd python3-yaml                      # the .deb, its unit and manifests (tests/deploy)
  libgtest-dev libgmock-dev                                   # unit tests
  clang                                                       # libFuzzer harnesses (tests/fuzz)
  python3 python3-grpcio python3-protobuf python3-numpy        # Python client and its tests
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ]; then
    as_root=()
  elif command -v sudo >/dev/null 2>&1; then
    as_root=(sudo)
  else
    echo "install-deps: missing ${missing[*]}; run as root or install sudo" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${as_root[@]}" apt-get update -qq
  "${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: all ${#packages[@]} packages present"
fi

cuda=${CUDAToolkit_ROOT:-/usr/local/cuda}
if [ ! -f "$cuda/include/nvrtc.h" ] || [ ! -f "$cuda/include/cuda_bf16.h" ] ||
   ! ls "$cuda"/lib64/libnvrtc.so* "$cuda"/lib64/libnvrtc-builtins.so* >/dev/null 2>&1; then
  echo "install-deps: the CUDA 13 toolkit (headers, NVRTC and its builtins) is not at $cuda;" \
       "install cuda-toolkit-13-0 from NVIDIA's repository or set CUDAToolkit_ROOT" >&2
  exit 1
fi
echo "install-deps: CUDA toolkit at $cuda"
