#!/usr/bin/env bash
# Runs kafka-python's own integration tests (written for Apache Kafka) against a fresh
# oncelog broker: `make compat`, never part of `make test`.
#
#   scripts/kafka-python-suite.sh [pytest args...]     e.g. -k consumer -x
#
# The suite comes from the sdist of the kafka-python version installed in the venv,
# downloaded from PyPI once into $KAFKA_PYTHON_SUITE_CACHE (default
# .venv/kafka-python-suite). The sdist lacks test/__init__.py and test/service.py; the
# stand-ins written here only support an external broker (KAFKA_URI), which is what we
# give it. Tests that need what oncelog documents as absent are left out (see below).
# The broker gets the settings of kafka-python's own test broker (node id 0, 4 partitions
# per topic, no initial rebalance delay, 1 s minimum session timeout). The exit status
# is pytest's.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-$repo/.venv/bin/python}"
cache="${KAFKA_PYTHON_SUITE_CACHE:-$repo/.venv/kafka-python-suite}"
# The newest broker version the suite knows (its BROKER_API_VERSIONS), so its
# version-gated tests all run.
kafka_version="${KAFKA_VERSION:-$("$python" -c 'from kafka.protocol.broker_version_data import BROKER_API_VERSIONS as v
print(".".join(map(str, max(v))))')}"

version="$("$python" -c 'import importlib.metadata as m; print(m.version("kafka-python"))')"
suite="$cache/kafka_python-$version"

if [ ! -d "$suite/test/integration" ]; then
  echo "compat: downloading the kafka-python $version sdist into $cache"
  mkdir -p "$cache"
  "$python" -m pip download -q --disable-pip-version-check --no-deps \
    --no-binary :all: "kafka-python==$version" -d "$cache"
  tar -xzf "$cache"/kafka?python-"$version".tar.gz -C "$cache"
  [ -d "$suite/test/integration" ] || { echo "compat: error: no test/integration in the sdist" >&2; exit 1; }
fi
# Stand-ins for the two test modules the sdist does not ship (rewritten every run).
: > "$suite/test/__init__.py"
cat > "$suite/test/service.py" <<'EOF'
"""Stand-in for kafka-python's test/service.py: only an already-running broker."""


class ExternalService:
    def __init__(self, host, port):
        self.host = host
        self.port = port

    def open(self):
        pass

    def close(self):
        pass

    def start(self):
        pass

    def stop(self):
        pass

    def dump_logs(self):
        pass

    def wait_for(self, pattern, timeout=30):
        return True


class SpawnedService:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("this run only supports an external broker (KAFKA_URI)")
EOF

work="$(mktemp -d "${TMPDIR:-/tmp}/oncelog-compat.XXXXXX")"
port="$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
broker_pid=""
cleanup() {
  local code=$?
  if [ -n "$broker_pid" ] && kill -0 "$broker_pid" 2>/dev/null; then
    kill "$broker_pid" 2>/dev/null || true
    wait "$broker_pid" 2>/dev/null || true
  fi
  if [ "$code" -eq 0 ]; then rm -rf "$work"; else rm -rf "$work/data"; fi  # keep the log of a failed run
}
trap cleanup EXIT

# kafka-python's own test broker configuration (servers/resources/default/kafka.properties
# in its repository), less what oncelog does not have (the CONTROLLER listener, SASL, SSL,
# ACLs). Keys for machinery oncelog lacks are accepted and reported as ignored.
cat > "$work/server.properties" <<EOF
process.roles=broker,controller
node.id=0
listeners=PLAINTEXT://127.0.0.1:$port
advertised.listeners=PLAINTEXT://127.0.0.1:$port
inter.broker.listener.name=PLAINTEXT
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs=$work/data
num.partitions=4
default.replication.factor=1
replica.lag.time.max.ms=1000
replica.socket.timeout.ms=1000
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
log.cleaner.enable=false
offsets.commit.timeout.ms=500
offsets.topic.num.partitions=2
group.min.session.timeout.ms=1000
group.initial.rebalance.delay.ms=0
EOF
"$python" -m oncelog broker start --config "$work/server.properties" \
  >"$work/broker.out" 2>"$work/broker.log" &
broker_pid=$!
for _ in $(seq 300); do
  grep -q "listening on" "$work/broker.out" 2>/dev/null && break
  kill -0 "$broker_pid" 2>/dev/null || break
  sleep 0.1
done
if ! grep -q "listening on" "$work/broker.out" 2>/dev/null; then
  echo "compat: error: the broker did not start; its log:" >&2
  tail -n 40 "$work/broker.log" >&2
  exit 1
fi
echo "compat: kafka-python $version suite, KAFKA_VERSION=$kafka_version, oncelog broker on 127.0.0.1:$port (log, kept if the run fails: $work/broker.log)"

# Left out, each for something oncelog documents as absent (README, Status):
#   SASL and SSL listeners         test_sasl_integration.py, test_ssl_integration.py
#   ACLs (no authorizer)           test_create_describe_delete_acls
#   the KRaft controller quorum    test_describe_metadata_quorum (DescribeQuorum)
cd "$suite"
status=0
KAFKA_VERSION="$kafka_version" KAFKA_URI="tcp://127.0.0.1:$port" KAFKA_ROOT="$work" \
  "$python" -m pytest test/integration -p no:cacheprovider -q -ra \
    --ignore test/integration/test_sasl_integration.py \
    --ignore test/integration/test_ssl_integration.py \
    --deselect test/integration/test_admin_integration.py::test_create_describe_delete_acls \
    --deselect test/integration/test_admin_integration.py::test_describe_metadata_quorum \
    -o log_level=WARNING --timeout=180 "$@" || status=$?
exit "$status"
