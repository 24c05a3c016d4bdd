#!/usr/bin/env bash
# Make an etcd binary available: the cluster tests run a 3-member etcd as the controller
# quorum (docs/cluster-design.md, section 1). Uses `etcd` from PATH when there is one;
# otherwise downloads Debian's etcd-server package and *extracts* it into .venv/etcd/
# (no root needed, and no etcd.service is enabled or started, which installing it would do).
# The tests find the binary through $ONCELOG_ETCD, then .venv/etcd/usr/bin/etcd, then PATH.
# A download that was attempted and failed is fatal.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
target="$root/.venv/etcd"
binary="$target/usr/bin/etcd"

if command -v etcd >/dev/null 2>&1; then
    echo "setup: etcd: using $(command -v etcd)"
    exit 0
fi
if [ -x "$binary" ]; then
    echo "setup: etcd: using $binary"
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-deb >/dev/null 2>&1; then
    echo "setup: etcd is missing and there is no apt-get/dpkg-deb here; install etcd 3.4+" \
         "and put it on PATH or set ONCELOG_ETCD (the cluster tests need it)" >&2
    exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log="$work/log"
download() {
    # apt-get download writes into the current directory and needs no root.
    (cd "$work" && apt-get download -qq etcd-server) >>"$log" 2>&1
}
if ! download; then
    # Usually stale or absent package lists: refresh them when we may, then retry once.
    if [ "$(id -u)" -eq 0 ]; then
        apt-get update -qq >>"$log" 2>&1 || true
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        sudo -n apt-get update -qq >>"$log" 2>&1 || true
    fi
    if ! download; then
        cat "$log" >&2
        echo "setup: error: could not download Debian's etcd-server (see above); as root," \
             "run 'apt-get update' and retry, or put etcd 3.4+ on PATH (the cluster tests need it)" >&2
        exit 1
    fi
fi

package=$(ls "$work"/etcd-server_*.deb)
rm -rf "$target"
mkdir -p "$target"
dpkg-deb -x "$package" "$target"
if [ ! -x "$binary" ]; then
    echo "setup: error: $package has no usr/bin/etcd" >&2
    exit 1
fi
echo "setup: etcd: extracted $(basename "$package") into ${target#"$root"/}"
