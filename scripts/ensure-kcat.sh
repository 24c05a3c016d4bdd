#!/usr/bin/env bash
# Make Debian's kcat available: the kcat interop tests drive the broker with it.
# Installs it with apt-get when missing and we are root (or have password-less sudo);
# otherwise says how to install it. An install that was attempted and failed is fatal.
set -euo pipefail

if command -v kcat >/dev/null 2>&1; then
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup: kcat is missing and there is no apt-get here; install kcat with your" \
         "package manager (the kcat tests need it)" >&2
    exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
    sudo=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo="sudo -n"
else
    echo "setup: kcat is missing; install it with 'sudo apt-get install -y kcat'" \
         "(the kcat tests need it; everything else is set up)" >&2
    exit 0
fi

echo "setup: installing kcat with apt-get"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
export DEBIAN_FRONTEND=noninteractive
# The package lists may be absent on a fresh machine: refresh them once, quietly.
$sudo apt-get update -qq >"$log" 2>&1 || true
if ! $sudo apt-get install -y -qq --no-install-recommends kcat >>"$log" 2>&1 \
        || ! command -v kcat >/dev/null 2>&1; then
    cat "$log" >&2
    echo "setup: error: could not install kcat with apt-get (see above); the kcat tests need it" >&2
    exit 1
fi
