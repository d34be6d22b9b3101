#!/usr/bin/env bash
# Run here, before a GPU check: fetch what a lent GPU machine lacks into .device/wheels (ignored
# by git; name `.device` in the device tool's `carry`). That machine has Python 3.12 and a CUDA
# build of torch 2.11 but no torchcodec, no PyAV and no FFmpeg, and it cannot reach a package
# index. torchcodec 0.14.0's PyPI wheel is a CUDA (cu130) build and loads with torch 2.11; PyAV
# 18's wheel bundles FFmpeg 8 (with NVDEC), whose libraries that torchcodec loads (check.sh
# gives them their plain sonames).
set -euo pipefail
cd "$(dirname "$0")/../.."
dest=.device/wheels
mkdir -p "$dest"
for requirement in "torchcodec==0.14.0" "av==18.1.0"; do
    python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --dest "$dest" "$requirement"
done
du -sh "$dest"
