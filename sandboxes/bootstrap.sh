#!/usr/bin/env bash
# Offline build of the sandbox image: no image registry needed, only a Debian package mirror.
#
#   bootstrap.sh [TAG]      (root; needs debootstrap and a docker engine)
#
# debootstrap --variant=minbase builds a minimal Debian root with python3, finalize.sh strips
# it, and `docker import` turns the tarball into an image. The mirror is the one apt already
# uses on this machine (override with MTE_DEBIAN_MIRROR), the suite this machine's release
# (override with MTE_DEBIAN_SUITE). Extra packages: MTE_IMAGE_PACKAGES (comma separated,
# e.g. python3-numpy for LCB's BASE_IMPORTS parity; the default image leaves them out), and a
# label: MTE_IMAGE_LABEL (key=value; the terminal image's recipe version).
set -euo pipefail

TAG="${1:-multiturn-envs-sandbox:latest}"
HERE="$(cd "$(dirname "$0")" && pwd)"

mirror="${MTE_DEBIAN_MIRROR:-}"
if [ -z "$mirror" ]; then
    mirror="$(grep -h -m1 -E '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | head -n1 || true)"
fi
if [ -z "$mirror" ]; then
    mirror="$(grep -h -m1 -E '^deb ' /etc/apt/sources.list 2>/dev/null | awk '{print $2}' | head -n1 || true)"
fi
if [ -z "$mirror" ]; then
    echo "bootstrap: no Debian mirror found in apt's sources; set MTE_DEBIAN_MIRROR" >&2
    exit 1
fi
suite="${MTE_DEBIAN_SUITE:-$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")}"
suite="${suite:-bookworm}"
packages="python3${MTE_IMAGE_PACKAGES:+,$MTE_IMAGE_PACKAGES}"

command -v debootstrap >/dev/null || { echo "bootstrap: debootstrap missing (apt-get install debootstrap)" >&2; exit 1; }
work="$(mktemp -d /tmp/mte-bootstrap.XXXXXX)"
trap 'rm -rf "$work"' EXIT
root="$work/root"
start=$(date +%s)
echo "bootstrap: debootstrap --variant=minbase $suite ($packages) into $root"
debootstrap --variant=minbase --include="$packages" "$suite" "$root" "$mirror" >"$work/debootstrap.log" 2>&1 || {
    tail -n 30 "$work/debootstrap.log" >&2; exit 1; }
cp "$HERE/finalize.sh" "$root/finalize.sh"
chroot "$root" /bin/sh /finalize.sh
rm -f "$root/finalize.sh"
echo "bootstrap: root size $(du -sh "$root" | cut -f1)"
labels=()
[ -n "${MTE_IMAGE_LABEL:-}" ] && labels=(--change "LABEL ${MTE_IMAGE_LABEL}")
tar -C "$root" --numeric-owner -c . | docker import \
    "${labels[@]}" \
    --change 'CMD ["sleep", "infinity"]' \
    --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8' \
    --message "multiturn-envs sandbox (offline bootstrap, $suite)" - "$TAG" >/dev/null
echo "bootstrap: imported $TAG in $(( $(date +%s) - start ))s; $(docker image inspect -f '{{.Size}}' "$TAG") bytes"
