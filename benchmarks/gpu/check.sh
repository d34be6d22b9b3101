#!/usr/bin/env bash
# Run on a lent GPU machine from the repository root (device tool: `bash benchmarks/gpu/check.sh`,
# carry [".device"] after benchmarks/gpu/fetch_wheels.sh): installs the carried wheels beside the
# machine's own torch, runs the GPU-decode tests, then `bench` on LeRobot-sized H.264 and AV1
# data with --device cuda and --device cpu. Everything it reports lands in $OUT.
#
# Environment: PYTHON (default python3), OUT (default /tmp/episodestream-gpu), PRESETS (default
# "so100-h264 so100"), SAMPLES (default 150), ROUNDS (default 3), DEVICE (default cuda; cpu
# rehearses the script on a machine without a GPU). Sized for the device tool's 600 s command
# limit: the most telling steps run first, and what is in $OUT comes back even if it is cut.
set -uo pipefail
PYTHON=${PYTHON:-python3}
OUT=${OUT:-/tmp/episodestream-gpu}
PRESETS=${PRESETS:-so100-h264 so100}
SAMPLES=${SAMPLES:-150}
ROUNDS=${ROUNDS:-3}
DEVICE=${DEVICE:-cuda}
work=$(mktemp -d /tmp/episodestream-gpu-XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$OUT"
log() { echo "== $* ($(date +%T))"; }

log "install"
site=$work/site
"$PYTHON" -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir \
    --target "$site" .device/wheels/*.whl || exit 1
# torchcodec links FFmpeg by plain soname (libavcodec.so.62, ...): PyAV's copies, renamed
ffmpeg=$work/ffmpeg
mkdir -p "$ffmpeg"
for lib in "$site"/av.libs/lib{avcodec,avdevice,avfilter,avformat,avutil,swresample,swscale}-*.so.*; do
    name=$(basename "$lib")
    major=$(echo "$name" | sed -E 's/.*\.so\.([0-9]+).*/\1/')
    ln -sf "$lib" "$ffmpeg/${name%%-*}.so.$major"
done
# the CUDA runtime and NVRTC that torchcodec links, from the nvidia-* packages beside torch
cuda_libs=$("$PYTHON" -c 'import glob, os, nvidia; print(":".join(sorted({os.path.dirname(p) for d in nvidia.__path__ for p in glob.glob(d + "/**/libnvrtc.so*", recursive=True) + glob.glob(d + "/**/libcudart.so*", recursive=True)})))' 2>/dev/null || true)
export LD_LIBRARY_PATH=$ffmpeg${cuda_libs:+:$cuda_libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONPATH=$site:$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1

log "environment"
{
    nvidia-smi 2>&1 | head -15
    ldconfig -p 2>/dev/null | grep -i -E "nvcuvid|libcuda\.so" || echo "no nvcuvid/libcuda in ldconfig"
    "$PYTHON" - <<'PY'
import torch, torchcodec, av, numpy
print("torch", torch.__version__, "cuda", torch.cuda.is_available(), torch.version.cuda)
print("torchcodec", torchcodec.__version__, "av", av.__version__, "numpy", numpy.__version__)
print("av hwdevices", getattr(av.codec.hwaccel, "hwdevices_available", lambda: "?")())
PY
} 2>&1 | tee "$OUT/environment.txt"

if [ "$DEVICE" != "cpu" ]; then
    log "GPU-decode tests"
    timeout 180 "$PYTHON" -m pytest -q -p no:cacheprovider -m needs_cuda \
        tests/integration/test_decode_cuda.py 2>&1 | tee "$OUT/test-cuda.log" | tail -30
fi

for preset in $PRESETS; do
    log "dataset $preset"
    root=$work/$preset
    "$PYTHON" -m episodestream.cli make-dataset --preset "$preset" --episodes 4 \
        --length 300:360 "$root" > /dev/null || continue
    for device in $DEVICE cpu; do
        [ "$device" = cpu ] && [ "$DEVICE" = cpu ] && [ -e "$OUT/bench-$preset-cpu.json" ] && continue
        log "bench $preset on $device"
        timeout 150 "$PYTHON" -m episodestream.cli bench "$root" --device "$device" \
            --tracks floor,local --samples "$SAMPLES" --rounds "$ROUNDS" --keepup-samples 0 \
            --decode-samples 20 --no-progress --cache-dir "$work/cache" \
            --json "$OUT/bench-$preset-$device.json" > "$OUT/bench-$preset-$device.md" 2>&1
        echo "exit $?" >> "$OUT/bench-$preset-$device.md"
        sed -n '/### Tracks/,/### Ratios/p;/### Decode/,/### Randomness/p' "$OUT/bench-$preset-$device.md"
    done
done
log "done"
