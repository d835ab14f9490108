#!/usr/bin/env bash
# N headless peers on this machine, one group: the embedded PeerServer (serve.mjs) and N
# `npm run peer -- --train` processes (peer.mjs) joined by one link, real WebRTC over loopback, each
# process with its own JS thread. Runs from a folder holding serve.mjs, peer.mjs (BUNDLE_ALL
# bundles), node_modules/{webgpu,@roamhq} and public/data/tinyshakespeare.txt (the GPU machine's
# .device/). Every peer gets the same training flags; each writes OUT/pI/ (run.json, metrics.jsonl)
# and OUT/pI.log.
#
#   bash local-group.sh OUT N [--gpus] -- PEER_TRAIN_FLAGS...
#   bash local-group.sh /tmp/g 4 --gpus -- --model small --steps 600 --diloco 50 --wire int8 --streaming 5 --overlap 9 --link 20:20
#
# --gpus: peer I runs on GPU I. Dawn picks an adapter by name only (all H200s share one), so the
# choice is made below it: Mesa's Vulkan device-select layer (Debian's mesa-vulkan-drivers, put in
# ./mesa/ by bench/pack-device-select.sh and enabled as an explicit layer) puts the device whose
# PCI address DRI_PRIME names first, and nvidia-smi gives GPU I's address. Each peer's log starts
# with the environment it was given; OUT/gpu-apps.csv (nvidia-smi, a minute in) shows where each
# process runs.
set -u
out=$1; n=$2; shift 2
gpus=0
if [ "${1:-}" = "--gpus" ]; then gpus=1; shift; fi
[ "${1:-}" = "--" ] && shift
port=${PORT:-5190}
mkdir -p "$out/dist"
echo '<html></html>' > "$out/dist/index.html"
node serve.mjs --port "$port" --host 127.0.0.1 --dir "$out/dist" > "$out/serve.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null' EXIT
sleep 2
busOf() { nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader -i "$1" | tr -d ' ' | sed -E 's/^0*([0-9a-fA-F]{4}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-9])$/pci-\1_\2_\3_\4/' | tr 'A-F' 'a-f'; }
envOf() {
  [ $gpus = 1 ] || return 0
  local layer; layer=$(pwd)/mesa
  echo "VK_LAYER_PATH=$layer/layers VK_INSTANCE_LAYERS=VK_LAYER_MESA_device_select LD_LIBRARY_PATH=$layer/lib:${LD_LIBRARY_PATH:-} DRI_PRIME=$(busOf "$1")"
}
common=(--train --min-members "$n" --checkpoint-every 0 --quorum-timeout 300 "$@")
pids=()
e=$(envOf 0); echo "peer 0: ${e:-default adapter}" > "$out/p0.log"
env $e node peer.mjs --host --page "http://127.0.0.1:$port/" "${common[@]}" --out "$out/p0" >> "$out/p0.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 120); do grep -q "link: " "$out/p0.log" && break; sleep 1; done
link=$(grep -o "link: [^ ]*" "$out/p0.log" | head -1 | cut -d' ' -f2)
[ -n "$link" ] || { echo "local-group: the first peer printed no link (see $out/p0.log)" >&2; exit 1; }
for i in $(seq 1 $((n - 1))); do
  e=$(envOf "$i"); echo "peer $i: ${e:-default adapter}" > "$out/p$i.log"
  env $e node peer.mjs --join "$link" "${common[@]}" --out "$out/p$i" >> "$out/p$i.log" 2>&1 &
  pids+=($!)
done
[ $gpus = 1 ] && (sleep 60; nvidia-smi --query-compute-apps=pid,gpu_bus_id,used_memory --format=csv > "$out/gpu-apps.csv" 2>&1) &
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=$?; done
exit $rc
