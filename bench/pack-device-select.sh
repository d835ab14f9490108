#!/usr/bin/env bash
# Puts Mesa's Vulkan device-select layer (Debian's mesa-vulkan-drivers) and the libraries it links
# into .device/mesa/ for bench/local-group.sh --gpus: the GPU machine has no such package and no
# network. Run from the project root after ../shared/gpu/pack.sh.
set -euo pipefail
dst=.device/mesa
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && apt-get download mesa-vulkan-drivers >/dev/null && dpkg -x mesa-vulkan-drivers_*.deb root)
so=$(find "$tmp/root" -name 'libVkLayer_MESA_device_select.so' | head -1)
json=$(find "$tmp/root" -name 'VkLayer_MESA_device_select.json' | head -1)
mkdir -p "$dst/lib" "$dst/layers"
cp "$so" "$dst/lib/"
cp "$json" "$dst/layers/"
# Its libraries except the C runtime's, as this machine resolves them (both are Debian 12 x86-64).
ldd "$so" | awk '/=> \// {print $3}' | grep -v -E '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so' | while read -r lib; do cp -L "$lib" "$dst/lib/"; done
du -sh "$dst"
