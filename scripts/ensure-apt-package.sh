#!/usr/bin/env bash
# Make a Debian package's command available: ensure-apt-package.sh COMMAND PACKAGE WHY
# (kcat for the kcat interop tests, chromium for the console's browser tests).
# Installs it with apt-get when missing and we are root (or have password-less sudo);
# otherwise says how to install it. An install that was attempted and failed is fatal.
set -euo pipefail

command_name=$1 package=$2 why=$3

if command -v "$command_name" >/dev/null 2>&1; then
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup: $command_name is missing and there is no apt-get here; install $package with your" \
         "package manager ($why)" >&2
    exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
    sudo=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo="sudo -n"
else
    echo "setup: $command_name is missing; install it with 'sudo apt-get install -y $package'" \
         "($why; everything else is set up)" >&2
    exit 0
fi

echo "setup: installing $package with apt-get"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
export DEBIAN_FRONTEND=noninteractive
# The package lists may be absent on a fresh machine: refresh them once, quietly.
$sudo apt-get update -qq >"$log" 2>&1 || true
if ! $sudo apt-get install -y -qq --no-install-recommends "$package" >>"$log" 2>&1 \
        || ! command -v "$command_name" >/dev/null 2>&1; then
    cat "$log" >&2
    echo "setup: error: could not install $package with apt-get (see above); $why" >&2
    exit 1
fi
