#!/usr/bin/env bash
# Install (if missing) and start every server the test suite talks to, on loopback only:
# PostgreSQL on 127.0.0.1:5432 (trust auth for local tests) and RabbitMQ on 127.0.0.1:5672
# with the management API on 15672 and the consistent-hash exchange plugin.
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

case "${1:-all}" in
  postgres) postgres ;;
  rabbitmq) rabbitmq ;;
  all) postgres; rabbitmq ;;
  *) echo "usage: $0 [all|postgres|rabbitmq]" >&2; exit 2 ;;
esac
