#!/usr/bin/env bash
# Builds NVIDIA's vk_cooperative_matrix_perf (github.com/jeffbolznv/vk_cooperative_matrix_perf) into a
# directory the device machine can run without network: the binary, its precompiled SPIR-V shaders,
# the Vulkan loader beside it (rpath $ORIGIN; the driver's ICD is the device's own) and run.sh.
# libstdc++ stays dynamic: a static one asks for glibc 2.36 (arc4random), which the device may lack.
# It measures what VK_KHR_cooperative_matrix reaches on the GPU outside WGSL (issue 35: the f16 GEMM's
# ceiling through the same driver path as Dawn's subgroup matrices).
#
# The sample runs every type, tile and layout it finds (last time nothing printed within 30 s: its
# stdout is block-buffered into a pipe and lost on timeout), so a small patch adds line-buffered
# output and filters: --input=TOKEN (fp16, s8, ...), --coopmat=MxNxK, --tile=MxN (repeatable),
# --bcol=0|1, --reps=N (dispatches per timed submit), --max-s=S (stop starting tests after S s),
# --workgroup (only VK_NV_cooperative_matrix2's workgroup-scope tests: the driver's own tiling, no WGSL equivalent).
#
# Usage: bench/vkperf-build.sh [OUT]   (default /tmp/vkperf-build; binaries are not committed)
#   VKPERF_SRC, VK_HEADERS: git directories of the two repositories (the `fetch` tool's mirrors by default).
# Needs g++, git, python3 and libvulkan1 (apt-get install g++ libvulkan1); headers come from Vulkan-Headers
# (Debian 12's are too old for cooperative_matrix2/bfloat16/float8, which the sample names).
# (only the C headers are taken: the mirror may lack the large .hpp files).
set -euo pipefail
SRC=${VKPERF_SRC:-/work/.mirror/jeffbolznv+vk_cooperative_matrix_perf/repo}
HDR=${VK_HEADERS:-/work/.mirror/KhronosGroup+Vulkan-Headers/repo}
OUT=${1:-/tmp/vkperf-build}
LOADER=$(ldconfig -p | awk '/libvulkan\.so\.1 .*x86-64/ { print $NF; exit }')
[ -n "$LOADER" ] || { echo "vkperf-build: no libvulkan.so.1 (apt-get install libvulkan1)" >&2; exit 1; }
# OUT is replaced whole: refuse a non-empty directory this script did not make.
if [ -n "$(ls -A "$OUT" 2>/dev/null)" ] && [ ! -e "$OUT/vk_cooperative_matrix_perf" ]; then
  echo "vkperf-build: $OUT is not empty and holds no earlier build; name a new directory" >&2; exit 1
fi
rm -rf "$OUT" && mkdir -p "$OUT/src" "$OUT/headers"
git --git-dir="$SRC" archive HEAD | tar -x -C "$OUT/src"
for f in $(git --git-dir="$HDR" ls-tree -r --name-only HEAD include/vulkan include/vk_video | grep '\.h$'); do
  mkdir -p "$OUT/headers/$(dirname "$f")" && git --git-dir="$HDR" show "HEAD:$f" > "$OUT/headers/$f"
done
python3 - "$OUT/src/src/vk_cooperative_matrix_perf.cpp" <<'PY'
import sys
p = sys.argv[1]
s = open(p).read()
def sub(old, new):
    global s
    if s.count(old) != 1:
        sys.exit(f'vkperf-build: patch anchor not found once: {old[:60]!r}')
    s = s.replace(old, new)
sub('int main(int argc, char *argv[])\n{\n',
    'int main(int argc, char *argv[])\n{\n'
    '    setvbuf(stdout, NULL, _IOLBF, 0); // lines reach a pipe before a timeout kills us\n'
    '    const char *inputFilter = NULL, *coopmatFilter = NULL;\n'
    '    std::vector<std::pair<uint32_t, uint32_t>> tileFilter;\n'
    '    int bcolFilter = -1; uint32_t repsOverride = 0; double maxSeconds = 0; bool workgroupOnly = false;\n'
    '    auto startTime = std::chrono::steady_clock::now();\n')
sub('        } else if (strcmp(argv[arg], "--help") == 0',
    '        } else if (strcmp(argv[arg], "--workgroup") == 0) {\n'
    '            workgroupOnly = true;\n'
    '        } else if (strncmp(argv[arg], "--input=", 8) == 0) {\n'
    '            inputFilter = argv[arg] + 8;\n'
    '        } else if (strncmp(argv[arg], "--coopmat=", 10) == 0) {\n'
    '            coopmatFilter = argv[arg] + 10;\n'
    '        } else if (strncmp(argv[arg], "--tile=", 7) == 0) {\n'
    '            unsigned tm = 0, tn = 0;\n'
    '            if (sscanf(argv[arg] + 7, "%ux%u", &tm, &tn) != 2) { fprintf(stderr, "error: --tile=MxN\\n"); return 1; }\n'
    '            tileFilter.push_back({tm, tn});\n'
    '        } else if (strncmp(argv[arg], "--bcol=", 7) == 0) {\n'
    '            bcolFilter = atoi(argv[arg] + 7);\n'
    '        } else if (strncmp(argv[arg], "--reps=", 7) == 0) {\n'
    '            repsOverride = (uint32_t)strtoul(argv[arg] + 7, NULL, 10);\n'
    '        } else if (strncmp(argv[arg], "--max-s=", 8) == 0) {\n'
    '            maxSeconds = atof(argv[arg] + 8);\n'
    '        } else if (strcmp(argv[arg], "--help") == 0')
sub('        const CooperativeMatrixTestTarget &target = *targetIt;\n',
    '        const CooperativeMatrixTestTarget &target = *targetIt;\n'
    '        if (workgroupOnly && target.testType != TT_WORKGROUP) continue;\n'
    '        if (inputFilter && strcmp(target.typeCombination->inputTypeToken, inputFilter) != 0) continue;\n'
    '        if (coopmatFilter) {\n'
    '            char shape[64];\n'
    '            snprintf(shape, sizeof shape, "%ux%ux%u", target.MSize, target.NSize, target.KSize);\n'
    '            if (strcmp(shape, coopmatFilter) != 0) continue;\n'
    '        }\n')
sub('            bool BColMajor = bcolmajor != 0;\n',
    '            bool BColMajor = bcolmajor != 0;\n'
    '            if (bcolFilter >= 0 && (int)bcolmajor != bcolFilter) continue;\n'
    '            if (!tileFilter.empty()) {\n'
    '                bool want = false;\n'
    '                for (auto &t : tileFilter) want = want || (t.first == TILE_M_size && t.second == TILE_N_size);\n'
    '                if (!want) continue;\n'
    '            }\n'
    '            if (maxSeconds > 0 && std::chrono::duration<double>(std::chrono::steady_clock::now() - startTime).count() > maxSeconds) {\n'
    '                printf("stopping: past --max-s=%.0f s, later tests not run\\n", maxSeconds);\n'
    '                fflush(stdout);\n'
    '                return 0;\n'
    '            }\n')
sub('[--barrier=on|off] [--shmem]\\n\\n", programName);',
    '[--barrier=on|off] [--shmem]\\n"\n'
    '           "  [--workgroup] [--input=fp16] [--coopmat=MxNxK] [--tile=MxN ...] [--bcol=0|1] [--reps=N] [--max-s=S]\\n\\n", programName);')
sub('uint32_t repeatCount = correctness ? 1 : 10;',
    'uint32_t repeatCount = correctness ? 1 : (repsOverride ? repsOverride : 10);')
open(p, 'w').write(s)
PY
g++ -O2 -std=c++17 -I"$OUT/headers/include" "$OUT/src/src/vk_cooperative_matrix_perf.cpp" -o "$OUT/vk_cooperative_matrix_perf" \
  "$LOADER" -Wl,-rpath,'$ORIGIN'
cp -L "$LOADER" "$OUT/libvulkan.so.1"
cp -r "$OUT/src/shaders" "$OUT/shaders"
cat > "$OUT/run.sh" <<'SH'
#!/usr/bin/env bash
# 1. KHR cooperative matrices (subgroup scope, shared-memory staging: the path WGSL subgroup matrices take),
#    fp16 inputs, 16x16x16, B column-major (our NT), 4096^3, fp32 then fp16 accumulation, every tile.
# 2. NV cooperative_matrix2 workgroup scope (the driver tiles the whole block itself), fp16, B column-major:
#    the Vulkan ceiling beside it. Each part < 30 s. Extra arguments go to both (e.g. --bcol=0: B row-major, our NN);
#    part 1 alone with other tiles: ./vk_cooperative_matrix_perf --shmem --input=fp16 --coopmat=16x8x16 --bcol=1.
cd "$(dirname "$0")" || exit 1
# The device image keeps NVIDIA's ICD outside the loader's default directories.
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
if [ -z "${VK_DRIVER_FILES:-}${VK_ICD_FILENAMES:-}" ] && [ -e "$icd" ] && ! ls /etc/vulkan/icd.d/nvidia* /usr/share/vulkan/icd.d/nvidia* >/dev/null 2>&1; then
  export VK_DRIVER_FILES=$icd
fi
timeout 29 ./vk_cooperative_matrix_perf --shmem --input=fp16 --coopmat=16x16x16 --bcol=1 --reps=20 --max-s=22 "$@"
echo "--- NV cooperative_matrix2, workgroup scope ---"
timeout 29 ./vk_cooperative_matrix_perf --workgroup --input=fp16 --bcol=1 --reps=20 --max-s=22 "$@"
SH
chmod +x "$OUT/run.sh"
rm -rf "$OUT/src" "$OUT/headers"
echo "vkperf-build: $OUT ($(du -sh "$OUT" | cut -f1)): run $OUT/run.sh"
