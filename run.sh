#!/usr/bin/env bash
# The two set-up commands of the README:
#   bash run.sh broker [kafkafast broker options...]   install, then run a single-node broker
#                                                      on 127.0.0.1:9092 with data in ./data
#   bash run.sh test [paths...] [pytest options...]    install everything, then run the given test
#                                                      paths (tests::names), or the whole suite
# The install (pip, and the Cython build of the compiled twins: about a minute) runs only when
# what it is made from changed since the last one (.run-sh-installed records it).
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}

STAMP=.run-sh-installed

install_inputs() {
  # A digest of everything the install is made from: the interpreter, the dependency pins, setup.py
  # and the Cython sources and declarations of the compiled twins.
  { "$PY" -c 'import sys; print(sys.executable, sys.version)'
    cat setup.py pyproject.toml constraints.txt cython_ext/*.pyx kafkafast/_native/*.pxd 2>/dev/null
  } | sha256sum | cut -d' ' -f1
}

installed_from_here() {
  # The interpreter's kafkafast is the editable install of this checkout (not of another one).
  # Every kafkafast metadata on the path is looked at: the checkout's own kafkafast.egg-info
  # (the current directory is on the path) has no direct_url.json.
  "$PY" -c 'import importlib.metadata as m, json, sys
urls = [json.loads(d.read_text("direct_url.json") or "{}").get("url") for d in m.distributions(name="kafkafast")]
sys.exit("file://" + sys.argv[1] not in urls)' "$PWD"
}

install_python() {
  # $1: the extras ("" for none). Skipped when an install with those extras was made from the same
  # inputs; otherwise pip installs (editable) and setup.py builds the compiled twins.
  local extras=$1 inputs
  inputs=$(install_inputs)
  if [ -f "$STAMP" ] && installed_from_here; then
    if { [ -z "$extras" ] && grep -q "^$inputs " "$STAMP"; } || grep -qx "$inputs $extras" "$STAMP"; then
      echo "run.sh: kafkafast${extras:+[$extras]} is installed and built from this checkout; nothing changed since"
      return
    fi
  fi
  echo "run.sh: installing kafkafast${extras:+[$extras]} (pip, pinned by constraints.txt) and building its" \
       "compiled twins (Cython, about a minute; again only when a .pyx/.pxd, setup.py or a pin changes)..."
  # Every version pinned (constraints.txt), the build environment's Cython included.
  export PIP_CONSTRAINT="$PWD/constraints.txt"
  if [ -n "$extras" ]; then "$PY" -m pip install -q -e ".[$extras]"; else "$PY" -m pip install -q -e .; fi
  { grep "^$inputs " "$STAMP" 2>/dev/null || true; echo "$inputs $extras"; } > "$STAMP.new"
  mv "$STAMP.new" "$STAMP"
  echo "run.sh: installed"
}

install_debian() {
  # ZooKeeper for the cluster tests; kcat for the old-librdkafka tests; Java is needed by ZooKeeper and Spark (javac for the JVM reader); systemd-analyze for deploy/; Go and Sarama for the Go client in the matrix; Burrow.
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    local need=()
    [ -x /usr/share/zookeeper/bin/zkServer.sh ] || need+=(zookeeper)
    command -v java >/dev/null || need+=(openjdk-17-jre-headless)
    command -v javac >/dev/null || need+=(openjdk-17-jdk-headless)  # builds the Spark JVM columnar reader (spark/README.md)
    command -v systemd-analyze >/dev/null || need+=(systemd)  # checks deploy/'s unit files
    ldconfig -p 2>/dev/null | grep -c 'libatomic\.so\.1' >/dev/null || need+=(libatomic1)  # the pure twin of the shared-append lock word calls libatomic
    command -v kcat >/dev/null || need+=(kcat)  # librdkafka 2.0's CLI (tests/integration/test_client_matrix.py)
    command -v node >/dev/null || need+=(nodejs)  # KafkaJS (tests/js): an independent client as a compatibility peer
    command -v go >/dev/null || need+=(golang-go)  # builds the Sarama matrix client (tests/matrix_scripts/sarama_client.go)
    [ -d /usr/share/gocode/src/github.com/Shopify/sarama ] || need+=(golang-github-shopify-sarama-dev)  # Sarama, Go's Kafka client
    command -v Burrow >/dev/null || need+=(burrow)  # LinkedIn's lag monitor reads __consumer_offsets (tests/integration/test_inter_broker_protocol.py)
    [ -x /usr/sbin/iptables ] || need+=(iptables)  # faults inside a network namespace (tests/nemesis/)
    if [ ${#need[@]} -gt 0 ]; then
      echo "run.sh: installing Debian packages: ${need[*]}"
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
    fi
    # Debian's nodejs comes without npm (its own package); NodeSource's nodejs carries npm and
    # conflicts with Debian's npm package ("held broken packages" when both are asked for).
    if ! command -v npm >/dev/null; then
      echo "run.sh: installing Debian package: npm"
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm; } \
        || echo "run.sh: npm could not be installed; the KafkaJS tests say how to get it" >&2
    fi
  fi
}

pytest_args() {
  # The user's test paths when any argument names one (tests/x.py::name); else the whole suite.
  local a
  for a in "$@"; do
    [ -e "${a%%::*}" ] && return 0
  done
  echo tests
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
    if command -v npm >/dev/null && [ -f tests/js/package.json ] \
       && [ ! tests/js/node_modules/.package-lock.json -nt tests/js/package.json ]; then
      echo "run.sh: installing KafkaJS (npm, tests/js)"
      (cd tests/js && npm install --silent --no-audit --no-fund >/dev/null)
    fi
    export KAFKAFAST_REQUIRE_NATIVE=${KAFKAFAST_REQUIRE_NATIVE:-1}
    # shellcheck disable=SC2046  # pytest_args prints "tests" or nothing
    exec "$PY" -m pytest -p no:cacheprovider $(pytest_args "$@") "$@"
    ;;
  *)
    echo "usage: bash run.sh broker|test [args...]" >&2
    exit 2
    ;;
esac
