#!/usr/bin/env bash
# Installs every Debian 12 package lathe needs to build, test and benchmark.
# Idempotent: packages already present are not touched, and apt is only asked when
# something is missing.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git clang-format
  # the fuzz targets (fuzz/, scripts/fuzz.sh): clang with libFuzzer and the sanitizers' runtimes
  clang libclang-rt-14-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libsqlite3-dev sqlite3
  # PostgreSQL stores (--db postgresql://...): libpq for db/, the server for the tests, which
  # start one of their own (initdb, pg_ctl) in a temporary directory
  libpq-dev postgresql
  libxgboost-dev xgboost
  llvm-14-dev liblld-14-dev zlib1g-dev libzstd-dev libtinfo-dev libxml2-dev libedit-dev libffi-dev
  libcli11-dev libspdlog-dev libfmt-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  prometheus-cpp-dev
  libopenblas-dev libdnnl-dev
  libgoogle-perftools-dev
  libonnx-dev libonnx-testdata python3-onnx python3-numpy python3-venv
  libcpp-httplib-dev libssl-dev openssl
  python3 python3-grpcio python3-protobuf python3-pytest
  python3-selenium chromium chromium-driver
  # deploy/ and its tests: namespaces, links and NAT of the fleet test, TLS material, the
  # image builder and smoke run, the unit checks
  iproute2 nftables openssl curl python3 python3-yaml util-linux systemd
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: all packages present"
fi

# kubectl renders deploy/kubernetes in the tests (`kubectl kustomize`): Debian's
# kubernetes-client, unless a kubectl from elsewhere is already there.
if ! command -v kubectl >/dev/null 2>&1; then
  echo "install-deps: installing kubernetes-client (kubectl)"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    kubernetes-client || { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
    $SUDO apt-get install -y -qq --no-install-recommends kubernetes-client; }
fi

if [[ ! -d /usr/local/cuda ]]; then
  echo "install-deps: note: no CUDA toolkit at /usr/local/cuda; the CUDA backend is built without NVRTC" >&2
fi
