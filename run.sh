#!/usr/bin/env bash
# The two set-up commands of the README:
#   bash run.sh broker [kafkafast broker options...]   install, then run a single-node broker
#                                                      on 127.0.0.1:9092 with data in ./data
#   bash run.sh test [pytest options...]               install everything, then run the whole test suite
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}

install_python() {
  # Every version pinned (constraints.txt), the build environment's Cython included.
  export PIP_CONSTRAINT="$PWD/constraints.txt"
  if [ -n "$1" ]; then "$PY" -m pip install -q -e ".[$1]"; else "$PY" -m pip install -q -e .; fi
}

install_debian() {
  # ZooKeeper for the cluster tests; kcat for the old-librdkafka tests; Java is needed by ZooKeeper and Spark (javac for the JVM reader); systemd-analyze for deploy/.
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    local need=()
    [ -x /usr/share/zookeeper/bin/zkServer.sh ] || need+=(zookeeper)
    command -v java >/dev/null || need+=(openjdk-17-jre-headless)
    command -v javac >/dev/null || need+=(openjdk-17-jdk-headless)  # builds the Spark JVM columnar reader (spark/README.md)
    command -v systemd-analyze >/dev/null || need+=(systemd)  # checks deploy/'s unit files
    ldconfig -p 2>/dev/null | grep -c 'libatomic\.so\.1' >/dev/null || need+=(libatomic1)  # the pure twin of the shared-append lock word calls libatomic
    command -v kcat >/dev/null || need+=(kcat)  # librdkafka 2.0's CLI (tests/integration/test_client_matrix.py)
    [ -x /usr/sbin/iptables ] || need+=(iptables)  # faults inside a network namespace (tests/nemesis/)
    if [ ${#need[@]} -gt 0 ]; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
    fi
  fi
}

cmd=${1:-}
shift || true
case "$cmd" in
  broker)
    install_python ""
    mkdir -p data
    exec "$PY" -m kafkafast.cli.main broker -c deploy/server.properties \
      --set listeners=PLAINTEXT://127.0.0.1:9092 --set log.dirs="$PWD/data" "$@"
    ;;
  test)
    install_debian
    install_python test,spark,perf
    if command -v npm >/dev/null; then  # KafkaJS: an independent client used as a compatibility peer
      (cd tests/js && npm install --silent --no-audit --no-fund >/dev/null)
    fi
    export KAFKAFAST_REQUIRE_NATIVE=${KAFKAFAST_REQUIRE_NATIVE:-1}
    exec "$PY" -m pytest -p no:cacheprovider tests "$@"
    ;;
  *)
    echo "usage: bash run.sh broker|test [args...]" >&2
    exit 2
    ;;
esac
