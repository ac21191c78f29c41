#!/usr/bin/env bash
# Downloads the wheelhouse for a GPU box without internet: exactly the wheels in
# benchmarks/gpu_wheels.txt (what the GPU path needs that such a box's image lacks), built for the
# box's Python and platform, into $WHEELS (default benchmarks/wheelhouse, ignored by git). Run it on a
# machine that reaches the package registry; then carry $WHEELS with the working tree to the box,
# where benchmarks/gpu_check.sh installs it. Fails loudly when the wheels exceed $MAX_KIB (default
# 2048 KiB: the tree and everything carried with it must stay under 64 MiB, and the tree is ~1.5 MiB).
#
#     bash benchmarks/gpu_prepare.sh                        # cp312, manylinux x86-64
#     PY_VERSION=3.11 PLATFORM=manylinux_2_28_x86_64 bash benchmarks/gpu_prepare.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY_VERSION="${PY_VERSION:-3.12}"
PLATFORM="${PLATFORM:-manylinux2014_x86_64}"
WHEELS="${WHEELS:-benchmarks/wheelhouse}"
MAX_KIB="${MAX_KIB:-2048}"
PIP="${PIP:-python3 -m pip}"
rm -rf "$WHEELS"
mkdir -p "$WHEELS"
# --no-deps: the list is the whole set (each wheel's dependencies are in the image)
$PIP download --only-binary=:all: --no-deps --python-version "$PY_VERSION" --platform "$PLATFORM" \
    --disable-pip-version-check --quiet -d "$WHEELS" -r benchmarks/gpu_wheels.txt
kib=$(du -sk "$WHEELS" | cut -f1)
ls -l "$WHEELS"
if [ "$kib" -gt "$MAX_KIB" ]; then
    echo "error: the wheelhouse holds $kib KiB, over its stated $MAX_KIB KiB (benchmarks/gpu_wheels.txt)" >&2
    exit 1
fi
echo "wheelhouse: $(find "$WHEELS" -name '*.whl' | wc -l) wheel(s), $kib KiB in $WHEELS (at most $MAX_KIB KiB)"
