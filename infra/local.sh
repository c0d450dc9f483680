#!/usr/bin/env bash
# Real local infrastructure for development and tests: Redis, PostgreSQL and a single-node
# KRaft Kafka broker, all on loopback, data under .hub/infra (git-ignored).
#
#   bash infra/local.sh up   [redis|postgres|kafka ...]   start (idempotent; installs what is missing as root,
#                                                       promtool and chromium included)
#   bash infra/local.sh down [redis|postgres|kafka ...]   stop (idempotent)
#   bash infra/local.sh reset [redis|postgres|kafka ...]   stop, delete the data, start empty (the tests and
#                                                       benchmarks leave their databases, schemas and topics)
#   bash infra/local.sh status
#
# `down` and `reset` stop only the servers this checkout started: those whose pid files are under its
# data directory. A server on the port that another checkout started is left alone (`up` uses it),
# and they say so and exit 1.
#
# Ports: HUB_INFRA_REDIS_PORT, HUB_INFRA_PG_PORT, HUB_INFRA_KAFKA_PORT, else the ports of
# HUB_REDIS_URL, HUB_POSTGRES_URL and HUB_KAFKA_BROKERS when they are on loopback (what the hub and
# the tests connect to), else those URLs' defaults (infra/config.ts), which avoid the system defaults
# so that a local service of the same kind does not get in the way. The Kafka controller's port is
# HUB_INFRA_KAFKA_CONTROLLER_PORT, else the broker's + 2. With HUB_KAFKA_BROKERS elsewhere than on
# loopback, no Kafka is started or stopped.
#
# Kafka's release: kafka.version in infra/kafka/pom.xml, or HUB_KAFKA_VERSION (see README).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Absolute: the servers' command lines show it, and that is how this checkout knows its own.
DATA="$(realpath -m "${HUB_INFRA_DIR:-$ROOT/.hub/infra}")"
loopback_port() { # loopback_port <URL, or host:port list> <default>
  local re='^([a-z]+://)?([^@/]*@)?(127\.0\.0\.1|localhost):([0-9]+)'
  if [[ ${1:-} =~ $re ]]; then echo "${BASH_REMATCH[4]}"; else echo "$2"; fi
}
REDIS_PORT="${HUB_INFRA_REDIS_PORT:-$(loopback_port "${HUB_REDIS_URL:-}" 6380)}"
PG_PORT="${HUB_INFRA_PG_PORT:-$(loopback_port "${HUB_POSTGRES_URL:-}" 5433)}"
KAFKA_PORT="${HUB_INFRA_KAFKA_PORT:-$(loopback_port "${HUB_KAFKA_BROKERS:-}" 9092)}"
KAFKA_CONTROLLER_PORT="${HUB_INFRA_KAFKA_CONTROLLER_PORT:-$((KAFKA_PORT + 2))}"
# HUB_KAFKA_BROKERS elsewhere than on loopback (the suite run against a broker of the user's): no
# Kafka is started or stopped here.
KAFKA_ELSEWHERE=""
if [ -n "${HUB_KAFKA_BROKERS:-}" ] && [ -z "${HUB_INFRA_KAFKA_PORT:-}" ] &&
  [ "$(loopback_port "$HUB_KAFKA_BROKERS" none)" = none ]; then KAFKA_ELSEWHERE="$HUB_KAFKA_BROKERS"; fi
# The broker's version: kafka.version in infra/kafka/pom.xml (the one place it is set), or
# HUB_KAFKA_VERSION to run the suite against another release of org.apache.kafka:kafka_2.13 (see README).
KAFKA_POM="$ROOT/infra/kafka/pom.xml"
KAFKA_VERSION="${HUB_KAFKA_VERSION:-$(sed -n 's#.*<kafka.version>\(.*\)</kafka.version>.*#\1#p' "$KAFKA_POM")}"

say() { printf 'infra: %s\n' "$*"; }
die() { printf 'infra: %s\n' "$*" >&2; exit 1; }

# Installs Debian packages when we are root on Debian; otherwise says exactly what is missing.
need() { # need <command> <debian-package>
  command -v "$1" >/dev/null 2>&1 && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing $2 (for $1)"
    if [ -z "${HUB_APT_UPDATED:-}" ]; then apt-get update -qq >/dev/null; export HUB_APT_UPDATED=1; fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null
  else
    die "$1 is missing: install the Debian package '$2' (sudo apt-get install $2)"
  fi
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_port() { # wait_port <port> <name> <seconds> [<pid> <its log>]
  local i
  for ((i = 0; i < $3 * 10; i++)); do
    port_open "$1" && return 0
    # A server that exited (a Kafka release older than its data, say) is not waited for.
    if [ -n "${4:-}" ] && ! kill -0 "$4" 2>/dev/null; then die "$2 exited before opening port $1 (see $5)"; fi
    sleep 0.1
  done
  die "$2 did not open port $1 within $3 s${5:+ (see $5)}"
}

# The pid in a pid file under $DATA, if that process runs and its command line shows what this
# checkout started (a stale file's pid may have been given to another process since).
started_pid() { # started_pid <pid file> <text of the command line>
  local pid args
  pid="$(head -n 1 "$1" 2>/dev/null)" && [ -n "$pid" ] || return 1
  args="$(ps -ww -o args= -p "$pid")" && [[ $args == *"$2"* ]] && echo "$pid"
}
redis_pid() { started_pid "$DATA/redis/redis.pid" "redis-server 127.0.0.1:$REDIS_PORT"; }
postgres_pid() { started_pid "$DATA/postgres/postmaster.pid" "-D $DATA/postgres -p $PG_PORT "; }
kafka_pid() { # the port is in its properties, not on its command line
  grep -qx "advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT" "$DATA/kafka/server.properties" 2>/dev/null &&
    started_pid "$DATA/kafka/kafka.pid" "kafka.Kafka $DATA/kafka/server.properties"
}

# Said by `up` when the port is taken already: it uses that server, and says whose it is.
already_up() { # already_up <service> <port>
  if "${1}_pid" >/dev/null; then say "$1 already up on $2"
  else say "using the $1 on 127.0.0.1:$2, which this checkout did not start ($DATA): down and reset leave it alone"; fi
}

# Stops the server this checkout started, by its pid; fails, saying so, when a server it did not
# start holds the port (and leaves that one alone).
stop() { # stop <service> <port> <signal that shuts it down cleanly>
  local pid
  if pid="$("${1}_pid")"; then
    kill -s "$3" "$pid" 2>/dev/null || true
    for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  if port_open "$2"; then
    printf 'infra: %s on 127.0.0.1:%s was not started from this checkout (%s): left running\n' "$1" "$2" "$DATA" >&2
    return 1
  fi
  say "$1 down"
}

# ---------------------------------------------------------------- Redis
redis_up() {
  need redis-server redis-server
  if port_open "$REDIS_PORT"; then already_up redis "$REDIS_PORT"; return; fi
  mkdir -p "$DATA/redis"
  # Append-only, fsynced every second. Rewritten from 1 GB, not Redis's 64 MB: the hub appends about
  # 6 KB per change to it, and a rewrite every few seconds took a core away (docs/reliability.md).
  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$DATA/redis" --daemonize yes \
    --pidfile "$DATA/redis/redis.pid" --logfile "$DATA/redis/redis.log" \
    --appendonly yes --appendfsync everysec --save "" --auto-aof-rewrite-min-size 1gb >/dev/null
  wait_port "$REDIS_PORT" redis 10
  # Up means ready: Redis takes connections while it loads its append-only file, answering LOADING
  # (21 s for the file a day of test runs and benchmarks left), and a caller's own wait ran out there.
  local i
  for ((i = 0; i < 3000; i++)); do
    [ "$(redis-cli -p "$REDIS_PORT" ping 2>/dev/null)" = PONG ] && break
    sleep 0.1
  done
  [ "$(redis-cli -p "$REDIS_PORT" ping 2>/dev/null)" = PONG ] || die "redis did not finish loading within 300 s"
  say "redis up on 127.0.0.1:$REDIS_PORT"
}
redis_down() { stop redis "$REDIS_PORT" TERM; } # as SHUTDOWN: the append-only file flushed

# ---------------------------------------------------------------- PostgreSQL
pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
postgres_up() {
  if [ -z "$(pg_bin)" ]; then need /usr/lib/postgresql/bin/initdb postgresql; fi
  local bin; bin="$(pg_bin)"; [ -n "$bin" ] || die "PostgreSQL binaries not found: install the Debian package 'postgresql'"
  if port_open "$PG_PORT"; then already_up postgres "$PG_PORT"; return; fi
  local dir="$DATA/postgres"
  mkdir -p "$dir"
  if [ "$(id -u)" = 0 ]; then chown postgres "$dir"; chmod 700 "$dir"; fi
  if [ ! -f "$dir/PG_VERSION" ]; then
    as_pg "$bin/initdb" -D "$dir" -U hub --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null
  fi
  as_pg "$bin/pg_ctl" -D "$dir" -l "$dir/server.log" -w -t 30 \
    -o "-p $PG_PORT -k /tmp -c listen_addresses=127.0.0.1 -c max_connections=200" start >/dev/null
  as_pg "$bin/psql" -h 127.0.0.1 -p "$PG_PORT" -U hub -d postgres -tAc \
    "SELECT 1 FROM pg_database WHERE datname = 'hub'" | grep -q 1 ||
    as_pg "$bin/createdb" -h 127.0.0.1 -p "$PG_PORT" -U hub hub
  say "postgres up on 127.0.0.1:$PG_PORT (database hub, user hub)"
}
postgres_down() { stop postgres "$PG_PORT" INT; } # PostgreSQL's fast shutdown

# ---------------------------------------------------------------- Kafka (KRaft, one node)
kafka_up() {
  if [ -n "$KAFKA_ELSEWHERE" ]; then say "using the kafka at $KAFKA_ELSEWHERE (HUB_KAFKA_BROKERS): none started here"; return; fi
  need java default-jre-headless
  if port_open "$KAFKA_PORT"; then already_up kafka "$KAFKA_PORT"; return; fi
  local dir="$DATA/kafka"
  mkdir -p "$dir"
  # The jars are fetched again when the version or the pom changed (a new logging binding, say).
  local fetched; fetched="$KAFKA_VERSION $(cksum <"$KAFKA_POM")"
  if [ "$(cat "$dir/libs/.fetched" 2>/dev/null)" != "$fetched" ]; then
    need mvn maven
    say "fetching Apache Kafka $KAFKA_VERSION jars from Maven Central"
    rm -rf "$dir/libs"
    mvn -q -B -f "$KAFKA_POM" -Dkafka.version="$KAFKA_VERSION" dependency:copy-dependencies \
      -DoutputDirectory="$dir/libs" >"$dir/mvn.log" 2>&1 || die "maven could not fetch the Kafka jars (see $dir/mvn.log)"
    echo "$fetched" >"$dir/libs/.fetched"
  fi
  sed -e "s#@LOG_DIR@#$dir/data#; s#@PORT@#$KAFKA_PORT#g; s#@CONTROLLER_PORT@#$KAFKA_CONTROLLER_PORT#g" \
    "$ROOT/infra/kafka/server.properties" >"$dir/server.properties"
  local cp="$dir/libs/*" log4j="-Dlog4j2.configurationFile=$ROOT/infra/kafka/log4j2.properties"
  if [ ! -f "$dir/data/meta.properties" ]; then
    java -cp "$cp" "$log4j" kafka.tools.StorageTool \
      format -t "$(java -cp "$cp" "$log4j" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -n 1)" \
      -c "$dir/server.properties" >"$dir/format.log" 2>&1 || die "kafka storage format failed (see $dir/format.log)"
  fi
  nohup java -Xms256m -Xmx768m -XX:+UseG1GC -Djava.awt.headless=true \
    "$log4j" -Dkafka.logs.dir="$dir" \
    -cp "$cp" kafka.Kafka "$dir/server.properties" >"$dir/stdout.log" 2>&1 &
  echo $! >"$dir/kafka.pid"
  wait_port "$KAFKA_PORT" kafka 60 "$!" "$dir/stdout.log"
  say "kafka $KAFKA_VERSION up on 127.0.0.1:$KAFKA_PORT"
}
kafka_down() {
  if [ -n "$KAFKA_ELSEWHERE" ]; then say "the kafka at $KAFKA_ELSEWHERE (HUB_KAFKA_BROKERS) is not this checkout's: left alone"; return 1; fi
  stop kafka "$KAFKA_PORT" TERM
}

status() {
  local s port
  for s in redis:$REDIS_PORT postgres:$PG_PORT kafka:$KAFKA_PORT; do
    port="${s#*:}"; s="${s%%:*}"
    if [ "$s" = kafka ] && [ -n "$KAFKA_ELSEWHERE" ]; then say "kafka at $KAFKA_ELSEWHERE (HUB_KAFKA_BROKERS), not this checkout's"; continue; fi
    if ! port_open "$port"; then say "$s down"
    elif "${s}_pid" >/dev/null; then say "$s up on 127.0.0.1:$port"
    else say "$s up on 127.0.0.1:$port (not started from this checkout)"; fi
  done
}

cmd="${1:-up}"; shift || true
services=("$@"); [ ${#services[@]} -gt 0 ] || services=(redis postgres kafka)
case "$cmd" in
  up)
    # promtool checks the alert rules and the Prometheus config (test/infra/dashboards.int.test.ts);
    # Chromium is the browser the console's tests drive (test/console/, playwright-core: no download).
    need promtool prometheus
    need chromium chromium
    for s in "${services[@]}"; do "${s}_up"; done ;;
  down)
    failed=0
    for s in "${services[@]}"; do "${s}_down" || failed=1; done
    exit "$failed" ;;
  reset)
    # Only what this script keeps under $DATA (the Kafka jars stay), and only once its server is
    # down: data deleted under a live server would go on being served. A server on the port that
    # this checkout did not start stays, and so does the data.
    need promtool prometheus
    for s in "${services[@]}"; do
      "${s}_down" || die "$s: nothing deleted"
      case "$s" in
        redis) rm -rf "$DATA/redis" ;;
        postgres) rm -rf "$DATA/postgres" ;;
        kafka) rm -rf "$DATA/kafka/data" "$DATA/kafka/server.properties" ;;
      esac
      say "$s data deleted"
    done
    for s in "${services[@]}"; do "${s}_up"; done ;;
  status) status ;;
  *) die "usage: infra/local.sh up|down|reset|status [redis|postgres|kafka ...]" ;;
esac
