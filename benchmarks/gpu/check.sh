#!/usr/bin/env bash
# The GPU checks on a bare GPU machine without network access (Python 3.12, a CUDA build of
# torch; no torchcodec, PyAV or FFmpeg): run benchmarks/gpu/fetch_wheels.sh where pip works,
# bring .device/ along, then `bash benchmarks/gpu/check.sh` there. It installs the wheels beside
# the machine's own torch, runs the GPU-decode tests, then `bench` on LeRobot-sized H.264 and
# AV1 data with --device cuda and then --device cpu. Everything it reports lands in $OUT, in at
# most 7 files (environment.txt, test-cuda.log, bench.md, one JSON per preset and device).
#
# Environment: PYTHON (default python3), OUT (default /tmp/episodestream-gpu), PRESETS (default
# "so100-h264 so100"), SAMPLES (default 150), ROUNDS (default 3), DEVICE (default cuda; cpu
# rehearses the script where there is no GPU: the tests are only collected), CPU_BENCH (default
# 1; 0 skips the CPU benches that follow the GPU ones), DIAGNOSE (default 0; 1 runs
# diagnose_clips.py on each preset before the benches), BUDGET_S (default
# 560: every step is cut at this many seconds from the start, so the whole run fits a 600 s
# limit; the most telling steps run first).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
PYTHON=${PYTHON:-python3}
OUT=${OUT:-/tmp/episodestream-gpu}
PRESETS=${PRESETS:-so100-h264 so100}
SAMPLES=${SAMPLES:-150}
ROUNDS=${ROUNDS:-3}
DEVICE=${DEVICE:-cuda}
CPU_BENCH=${CPU_BENCH:-1}
BUDGET_S=${BUDGET_S:-560}
deadline=$((SECONDS + BUDGET_S))
work=$(mktemp -d /tmp/episodestream-gpu-XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$OUT"
log() { echo "== $* (${SECONDS} s)"; }
# seconds a step may take: its own cap, or what is left of the budget
left() { local rest=$((deadline - SECONDS)); [ "$rest" -gt "$1" ] && rest=$1; echo $((rest > 1 ? rest : 1)); }

log "install"
site=$work/site
"$PYTHON" -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir \
    --target "$site" .device/wheels/*.whl || { echo "no wheels: run fetch_wheels.sh"; exit 1; }
# torchcodec links FFmpeg by plain soname (libavcodec.so.62, ...): PyAV's copies, renamed
ffmpeg=$work/ffmpeg
mkdir -p "$ffmpeg"
for name in avcodec avdevice avfilter avformat avutil swresample swscale; do
    lib=$(ls "$site"/av.libs/lib$name-*.so.* 2>/dev/null | head -1)
    [ -n "$lib" ] || { echo "PyAV's wheel has no lib$name: not the wheel fetch_wheels.sh gets"; exit 1; }
    major=$(basename "$lib" | sed -E 's/.*\.so\.([0-9]+).*/\1/')
    ln -sf "$lib" "$ffmpeg/lib$name.so.$major"
done
# the CUDA runtime and NVRTC that torchcodec links, from the nvidia-* packages beside torch
cuda_libs=$("$PYTHON" -c 'import glob, os, nvidia; print(":".join(sorted({os.path.dirname(p) for d in nvidia.__path__ for n in ("libnvrtc.so*", "libcudart.so*") for p in glob.glob(d + "/**/" + n, recursive=True)})))' 2>/dev/null || true)
# and av.libs itself: PyAV's FFmpeg finds its own renamed dependencies (libdrm-*.so, ...) by
# $ORIGIN, which is the symlink's folder when torchcodec loads it first (before `import av`)
export LD_LIBRARY_PATH=$ffmpeg:$site/av.libs${cuda_libs:+:$cuda_libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONPATH=$site:$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1

log "environment"
{
    nvidia-smi 2>&1 | head -15
    ldconfig -p 2>/dev/null | grep -i -E "nvcuvid|libcuda\.so" || echo "no nvcuvid or libcuda in ldconfig"
    "$PYTHON" - <<'PY'
import av, numpy, torch, torchcodec
print("torch", torch.__version__, "cuda", torch.cuda.is_available(), torch.version.cuda)
print("torchcodec", torchcodec.__version__, "av", av.__version__, "numpy", numpy.__version__)
print("FFmpeg hardware devices", av.codec.hwaccel.hwdevices_available())
PY
} > "$OUT/environment.txt" 2>&1
cat "$OUT/environment.txt"

log "GPU-decode tests"
collect=()
[ "$DEVICE" = cpu ] && collect=(--collect-only)  # no GPU: only that they collect
timeout "$(left 150)" "$PYTHON" -m pytest -q -p no:cacheprovider -m needs_cuda "${collect[@]}" \
    tests/integration/test_decode_cuda.py > "$OUT/test-cuda.log" 2>&1
echo "exit $?" >> "$OUT/test-cuda.log"
tail -15 "$OUT/test-cuda.log"

for preset in $PRESETS; do
    log "dataset $preset"
    timeout "$(left 120)" "$PYTHON" -m episodestream.cli make-dataset --preset "$preset" \
        --episodes 4 --length 300:360 "$work/$preset" > /dev/null 2>&1 || echo "failed: $preset"
done

if [ "${DIAGNOSE:-0}" != 0 ]; then
    log "diagnose clips on NVDEC"
    roots=()
    for preset in $PRESETS; do [ -d "$work/$preset" ] && roots+=("$work/$preset"); done
    timeout "$(left 90)" "$PYTHON" benchmarks/gpu/diagnose_clips.py "${roots[@]}" \
        > "$OUT/diagnose.txt" 2>&1
    cat "$OUT/diagnose.txt"
fi

devices=$DEVICE
[ "$DEVICE" != cpu ] && [ "$CPU_BENCH" != 0 ] && devices="$DEVICE cpu"
for device in $devices; do  # every preset on the GPU before any on the CPU
    for preset in $PRESETS; do
        [ -d "$work/$preset" ] || continue
        log "bench $preset on $device"
        report=$OUT/bench-$preset-${device//:/-}.json
        {
            echo "## $preset on $device"
            timeout "$(left 150)" "$PYTHON" -m episodestream.cli bench "$work/$preset" \
                --device "$device" --tracks floor,local --samples "$SAMPLES" --rounds "$ROUNDS" \
                --keepup-samples 0 --decode-samples 20 --no-progress --cache-dir "$work/cache" \
                --json "$report" 2>&1
            echo "exit $?"
        } > "$work/bench.md"
        cat "$work/bench.md" >> "$OUT/bench.md"
        if [ "$(tail -1 "$work/bench.md")" = "exit 0" ]; then
            sed -n '/### Tracks/,/### Ratios/p;/### Decode/,/### Randomness/p;/### Notes/,$p' \
                "$work/bench.md"
        else
            tail -20 "$work/bench.md"
        fi
    done
done
log "done"
