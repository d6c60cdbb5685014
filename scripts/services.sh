#!/usr/bin/env bash
# PostgreSQL, Redis and RabbitMQ for the test suite: use the ones already running
# on 127.0.0.1:5432 / 6379 / 5672, or start temporary ones on free ports (RabbitMQ:
# a private node of Debian's rabbitmq-server) and stop them on exit.
#
#   scripts/services.sh -- COMMAND [ARGS...]   run COMMAND with the services up and
#                                              CONVEYOR_TEST_POSTGRES_URL /
#                                              CONVEYOR_TEST_REDIS_URL exported
#   source scripts/services.sh                 then: services_up; (trap services_down)
#
# Environment:
#   CONVEYOR_TEST_POSTGRES_URL / CONVEYOR_TEST_REDIS_URL   already set: used as given
#   CONVEYOR_FORCE_OWN_SERVICES=1   skip detection, always start temporary servers
#   CONVEYOR_PG_PORT / CONVEYOR_REDIS_PORT   where to look first (5432 / 6379)
#   CONVEYOR_PG_BINDIR              where initdb/pg_ctl are (default: the newest
#                                   /usr/lib/postgresql/*/bin, else initdb on PATH)
#   CONVEYOR_REDIS_SERVER           the redis-server binary (default: on PATH)
#   CI=true                         a service that cannot be had is a failure (it
#                                   always is here: this script never skips)
#
# Temporary servers live in one temp dir (kept on failure with CONVEYOR_KEEP_SERVICE_DIR=1):
# PostgreSQL from initdb + pg_ctl (trust auth, fsync off, database "test"),
# Redis with --save '' --appendonly no. When a binary is missing and we are root,
# it is installed with apt-get; otherwise the script says what to install and fails.

if [[ -z "${ROOT:-}" ]]; then
    # shellcheck source=scripts/_common.sh
    source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/_common.sh"
fi

_SERVICES_DIR=""
_OWN_PG_DATA=""
_OWN_PG_CTL=""
_OWN_PG_AS=()
_OWN_REDIS_PORT=""
_OWN_REDIS_PIDFILE=""
_APT_UPDATED=""
_OWN_RABBIT_NODE=""
_OWN_RABBIT_ENV=()
_OWN_RABBIT_CTL=()
_OWN_RABBIT_PID=""

_py() { command -v python3 || echo "$PY"; }

# free_port: a TCP port on 127.0.0.1 that nothing listens on right now.
free_port() {
    "$(_py)" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# tcp_open PORT: something accepts connections on 127.0.0.1:PORT.
tcp_open() {
    "$(_py)" - "$1" <<'EOF'
import socket, sys
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1).close()
except OSError:
    sys.exit(1)
EOF
}

# redis_pings PORT: a Redis on 127.0.0.1:PORT answers PING with PONG (no auth).
redis_pings() {
    local port="$1"
    if command -v redis-cli >/dev/null 2>&1; then
        [[ "$(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" == "PONG" ]]
        return
    fi
    "$(_py)" - "$port" <<'EOF'
import socket, sys
try:
    with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1) as s:
        s.sendall(b"PING\r\n")
        sys.exit(0 if s.recv(64).startswith(b"+PONG") else 1)
except OSError:
    sys.exit(1)
EOF
}

pg_bindir() {
    local dir
    if [[ -n "${CONVEYOR_PG_BINDIR:-}" ]]; then
        [[ -x "$CONVEYOR_PG_BINDIR/initdb" ]] && echo "$CONVEYOR_PG_BINDIR"
        return
    fi
    dir="$(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V | tail -n1)"
    if [[ -n "$dir" && -x "$dir/initdb" ]]; then
        echo "$dir"
    elif command -v initdb >/dev/null 2>&1; then
        dirname "$(command -v initdb)"
    else
        return 1
    fi
}

# pg_answers PORT: a PostgreSQL accepts connections on 127.0.0.1:PORT.
pg_answers() {
    local port="$1" bindir
    if bindir="$(pg_bindir)" && [[ -x "$bindir/pg_isready" ]]; then
        "$bindir/pg_isready" -q -h 127.0.0.1 -p "$port" -t 2
    elif command -v pg_isready >/dev/null 2>&1; then
        pg_isready -q -h 127.0.0.1 -p "$port" -t 2
    else
        tcp_open "$port"
    fi
}

_psql() { # _psql PORT USER DB SQL
    local bindir psql
    if bindir="$(pg_bindir)" && [[ -x "$bindir/psql" ]]; then psql="$bindir/psql"; else psql=psql; fi
    PGCONNECT_TIMEOUT=3 "$psql" -X -q -A -t -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$1" -U "$2" -d "$3" -c "$4"
}

# pg_usable_url PORT: print postgresql://USER@127.0.0.1:PORT/test for a role that can
# log in without a password, creating database "test" if needed; fail otherwise.
pg_usable_url() {
    local port="$1" user
    if ! command -v psql >/dev/null 2>&1 && ! { pg_bindir >/dev/null && [[ -x "$(pg_bindir)/psql" ]]; }; then
        echo "postgresql://${PGUSER:-postgres}@127.0.0.1:$port/test" # cannot check further
        return 0
    fi
    for user in ${PGUSER:-} "$(id -un)" postgres; do
        if [[ "$(_psql "$port" "$user" test 'select 1' 2>/dev/null)" == "1" ]]; then
            echo "postgresql://$user@127.0.0.1:$port/test"
            return 0
        fi
        if _psql "$port" "$user" postgres 'create database test' >/dev/null 2>&1; then
            echo "postgresql://$user@127.0.0.1:$port/test"
            return 0
        fi
    done
    return 1
}

_apt_install() { # _apt_install PACKAGE WHY
    if ! is_root || ! command -v apt-get >/dev/null 2>&1; then
        die "$2 is not installed. Install it, then run again:
    sudo apt-get update && sudo apt-get install -y $1
(or point the tests at a running server: export CONVEYOR_TEST_POSTGRES_URL=... / CONVEYOR_TEST_REDIS_URL=...)"
    fi
    log "$2 is missing: apt-get install -y $1"
    if [[ -z "$_APT_UPDATED" ]]; then
        DEBIAN_FRONTEND=noninteractive apt-get update -qq || die "apt-get update failed"
        _APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$1" >/dev/null ||
        die "apt-get install -y $1 failed"
}

_services_dir() {
    if [[ -z "$_SERVICES_DIR" ]]; then
        _SERVICES_DIR="$(mktemp -d "${TMPDIR:-/tmp}/conveyor-services.XXXXXX")"
        chmod 755 "$_SERVICES_DIR"
    fi
}

start_own_postgres() {
    local bindir port dir
    bindir="$(pg_bindir)" || {
        _apt_install postgresql "PostgreSQL (initdb, pg_ctl)"
        bindir="$(pg_bindir)" || die "PostgreSQL installed but no initdb found under /usr/lib/postgresql/*/bin"
    }
    _services_dir
    dir="$_SERVICES_DIR/postgres"
    mkdir -p "$dir"
    _OWN_PG_AS=()
    if is_root; then # initdb and postgres refuse to run as root
        id postgres >/dev/null 2>&1 ||
            die "running as root, PostgreSQL needs an unprivileged user: create one (useradd --system postgres) or run as a normal user"
        chown postgres "$dir"
        local runuser
        runuser="$(PATH="$PATH:/usr/sbin:/sbin" command -v runuser || true)"
        if [[ -n "$runuser" ]]; then
            _OWN_PG_AS=("$runuser" -u postgres --)
        else
            _OWN_PG_AS=(setpriv --reuid=postgres --regid="$(id -g postgres)" --init-groups --)
        fi
    fi
    port="$(free_port)"
    log "starting a temporary PostgreSQL ($("$bindir/postgres" --version | awk '{print $3}')) on 127.0.0.1:$port in $dir"
    "${_OWN_PG_AS[@]}" "$bindir/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 \
        --locale=C --no-sync >"$dir/initdb.log" 2>&1 ||
        { cat "$dir/initdb.log" >&2; die "initdb failed"; }
    _OWN_PG_DATA="$dir/data"
    _OWN_PG_CTL="$bindir/pg_ctl"
    "${_OWN_PG_AS[@]}" "$bindir/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 \
        -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
        start >/dev/null ||
        { cat "$dir/postgres.log" >&2; die "pg_ctl start failed"; }
    _psql "$port" postgres postgres 'create database test' >/dev/null ||
        die "could not create database test on the temporary PostgreSQL"
    export CONVEYOR_TEST_POSTGRES_URL="postgresql://postgres@127.0.0.1:$port/test"
}

start_own_redis() {
    local port dir i
    local server="${CONVEYOR_REDIS_SERVER:-redis-server}"
    if ! command -v "$server" >/dev/null 2>&1; then
        [[ -z "${CONVEYOR_REDIS_SERVER:-}" ]] || die "CONVEYOR_REDIS_SERVER=$server: no such program"
        _apt_install redis-server "Redis (redis-server)"
    fi
    _services_dir
    dir="$_SERVICES_DIR/redis"
    mkdir -p "$dir"
    port="$(free_port)"
    log "starting a temporary Redis ($("$server" --version | awk '{print $3}')) on 127.0.0.1:$port in $dir"
    _OWN_REDIS_PIDFILE="$dir/redis.pid"
    "$server" --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
        --dir "$dir" --pidfile "$_OWN_REDIS_PIDFILE" --logfile "$dir/redis.log" >/dev/null ||
        die "redis-server failed to start (see $dir/redis.log)"
    _OWN_REDIS_PORT="$port"
    for i in $(seq 1 100); do
        redis_pings "$port" && break
        [[ "$i" == 100 ]] && { cat "$dir/redis.log" >&2; die "the temporary Redis does not answer"; }
        sleep 0.1
    done
    export CONVEYOR_TEST_REDIS_URL="redis://127.0.0.1:$port/0"
}

ensure_postgres() {
    local port="${CONVEYOR_PG_PORT:-5432}" url
    if [[ -z "${CONVEYOR_FORCE_OWN_SERVICES:-}" ]]; then
        if [[ -n "${CONVEYOR_TEST_POSTGRES_URL:-}" ]]; then
            log "PostgreSQL: using CONVEYOR_TEST_POSTGRES_URL=$CONVEYOR_TEST_POSTGRES_URL"
            return 0
        fi
        if pg_answers "$port"; then
            if url="$(pg_usable_url "$port")"; then
                export CONVEYOR_TEST_POSTGRES_URL="$url"
                log "PostgreSQL: using the server on 127.0.0.1:$port ($url)"
                return 0
            fi
            warn "a PostgreSQL answers on 127.0.0.1:$port but no role logs in without a password; starting our own"
        fi
    fi
    start_own_postgres
}

# The Redis restart, WAIT and cluster tests start private servers (temp dir,
# free ports): they need redis-server and redis-cli even when a Redis answers.
ensure_redis_binaries() {
    if ! command -v "${CONVEYOR_REDIS_SERVER:-redis-server}" >/dev/null 2>&1 ||
        ! command -v redis-cli >/dev/null 2>&1; then
        _apt_install redis-server "Redis (redis-server and redis-cli, for the tests that start their own servers)"
    fi
}

# The clock-skew chaos tests run a worker under libfaketime (LD_PRELOAD).
ensure_faketime() {
    local lib
    for lib in /usr/lib/*/faketime/libfaketimeMT.so.1 /usr/lib/faketime/libfaketimeMT.so.1; do
        [[ -e "$lib" ]] && return 0
    done
    _apt_install faketime "libfaketime (for the clock-skew chaos tests)"
}

# The partition chaos test cuts a veth link with nftables.
ensure_nftables() {
    command -v nft >/dev/null 2>&1 || [[ -x /usr/sbin/nft ]] ||
        _apt_install nftables "nftables (for the network-partition chaos test)"
}

ensure_redis() {
    local port="${CONVEYOR_REDIS_PORT:-6379}"
    ensure_redis_binaries
    if [[ -z "${CONVEYOR_FORCE_OWN_SERVICES:-}" ]]; then
        if [[ -n "${CONVEYOR_TEST_REDIS_URL:-}" ]]; then
            log "Redis: using CONVEYOR_TEST_REDIS_URL=$CONVEYOR_TEST_REDIS_URL"
            return 0
        fi
        if redis_pings "$port"; then
            export CONVEYOR_TEST_REDIS_URL="redis://127.0.0.1:$port/0"
            log "Redis: using the server on 127.0.0.1:$port"
            return 0
        fi
    fi
    start_own_redis
}

# amqp_answers PORT: something speaks AMQP 0-9-1 on 127.0.0.1:PORT.
amqp_answers() {
    "$(_py)" - "$1" <<'EOF'
import socket, sys
try:
    with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2) as s:
        s.sendall(b"AMQP\x00\x00\x09\x01")
        sys.exit(0 if s.recv(8)[:1] == b"\x01" else 1)  # a connection.start frame
except OSError:
    sys.exit(1)
EOF
}

# A private RabbitMQ node (Debian's rabbitmq-server, as the rabbitmq user) on
# free ports in the services dir: its own node name, data, logs and config.
start_own_rabbitmq() {
    local dir port dist i server
    server="$(PATH="$PATH:/usr/sbin:/sbin" command -v rabbitmq-server || true)"
    if [[ -z "$server" ]]; then
        _apt_install rabbitmq-server "RabbitMQ (rabbitmq-server)"
        server="$(PATH="$PATH:/usr/sbin:/sbin" command -v rabbitmq-server)"
    fi
    _services_dir
    dir="$_SERVICES_DIR/rabbitmq"
    mkdir -p "$dir/mnesia" "$dir/log"
    port="$(free_port)"
    dist="$(free_port)"
    printf 'loopback_users = none\nlisteners.tcp.default = 127.0.0.1:%s\n' "$port" >"$dir/rabbitmq.conf"
    echo '[].' >"$dir/enabled_plugins"
    _OWN_RABBIT_NODE="conveyor-test-$$@localhost"
    local as=()
    if is_root; then
        id rabbitmq >/dev/null 2>&1 ||
            die "running as root, RabbitMQ needs the rabbitmq user (apt-get install rabbitmq-server creates it)"
        chown -R rabbitmq "$dir"
        as=("$(PATH="$PATH:/usr/sbin:/sbin" command -v runuser)" -u rabbitmq --)
    fi
    _OWN_RABBIT_ENV=("${as[@]}" env "RABBITMQ_NODENAME=$_OWN_RABBIT_NODE"
        "RABBITMQ_NODE_PORT=$port" "RABBITMQ_DIST_PORT=$dist"
        "RABBITMQ_MNESIA_BASE=$dir/mnesia" "RABBITMQ_LOG_BASE=$dir/log"
        "RABBITMQ_CONFIG_FILE=$dir/rabbitmq.conf"
        "RABBITMQ_ENABLED_PLUGINS_FILE=$dir/enabled_plugins" "HOME=$dir")
    log "starting a private RabbitMQ node on 127.0.0.1:$port in $dir"
    setsid "${_OWN_RABBIT_ENV[@]}" "$server" >"$dir/server.log" 2>&1 &
    _OWN_RABBIT_PID=$! # leads its own process group: stopped as a group
    for i in $(seq 1 300); do
        amqp_answers "$port" && break
        [[ "$i" == 300 ]] && { cat "$dir/server.log" >&2; die "the private RabbitMQ does not answer"; }
        sleep 0.1
    done
    export CONVEYOR_TEST_AMQP_URL="amqp://guest:guest@127.0.0.1:$port/%2F"
    # Debian's rabbitmqctl wrapper switches HOME to /var/lib/rabbitmq when the
    # system broker's cookie is there, so the CLI is handed this node's own.
    _OWN_RABBIT_CTL=("${_OWN_RABBIT_ENV[@]}"
        "$(PATH="$PATH:/usr/sbin:/sbin" command -v rabbitmqctl || echo rabbitmqctl)"
        -n "$_OWN_RABBIT_NODE" --erlang-cookie "$(cat "$dir/.erlang.cookie")")
    # The broker-fault tests stop and start this node's app through it.
    CONVEYOR_TEST_RABBITMQCTL="$(printf '%q ' "${_OWN_RABBIT_CTL[@]}")"
    export CONVEYOR_TEST_RABBITMQCTL
}

ensure_rabbitmq() {
    local port="${CONVEYOR_AMQP_PORT:-5672}"
    if [[ -z "${CONVEYOR_FORCE_OWN_SERVICES:-}" ]]; then
        if [[ -n "${CONVEYOR_TEST_AMQP_URL:-}" ]]; then
            log "RabbitMQ: using CONVEYOR_TEST_AMQP_URL=$CONVEYOR_TEST_AMQP_URL"
            return 0
        fi
        if amqp_answers "$port"; then
            export CONVEYOR_TEST_AMQP_URL="amqp://guest:guest@127.0.0.1:$port/%2F"
            log "RabbitMQ: using the broker on 127.0.0.1:$port"
            return 0
        fi
    fi
    start_own_rabbitmq
}

services_up() {
    if [[ -n "${CONVEYOR_FORCE_OWN_SERVICES:-}" ]]; then
        unset CONVEYOR_TEST_POSTGRES_URL CONVEYOR_TEST_REDIS_URL CONVEYOR_TEST_AMQP_URL CONVEYOR_TEST_RABBITMQCTL
    fi
    ensure_postgres
    ensure_redis
    ensure_rabbitmq
    ensure_faketime
    ensure_nftables
}

# services_down: stop what services_up started (idempotent; safe from a trap).
services_down() {
    if [[ -n "$_OWN_PG_DATA" ]]; then
        "${_OWN_PG_AS[@]}" "$_OWN_PG_CTL" -D "$_OWN_PG_DATA" -m immediate -w -t 30 stop >/dev/null 2>&1 ||
            warn "could not stop the temporary PostgreSQL in $_OWN_PG_DATA"
        _OWN_PG_DATA=""
    fi
    if [[ -n "$_OWN_REDIS_PORT" ]]; then
        local pid=""
        [[ -f "$_OWN_REDIS_PIDFILE" ]] && pid="$(cat "$_OWN_REDIS_PIDFILE")"
        redis-cli -h 127.0.0.1 -p "$_OWN_REDIS_PORT" shutdown nosave >/dev/null 2>&1 ||
            { [[ -n "$pid" ]] && kill "$pid" 2>/dev/null; } || true
        _OWN_REDIS_PORT=""
    fi
    if [[ -n "$_OWN_RABBIT_NODE" ]]; then
        if ! "${_OWN_RABBIT_CTL[@]}" stop >/dev/null 2>&1; then
            # SIGTERM stops a node cleanly too.
            kill -TERM -- "-$_OWN_RABBIT_PID" 2>/dev/null ||
                warn "could not stop the private RabbitMQ node $_OWN_RABBIT_NODE"
            for _ in $(seq 1 100); do
                kill -0 -- "-$_OWN_RABBIT_PID" 2>/dev/null || break
                sleep 0.1
            done
        fi
        _OWN_RABBIT_NODE=""
        _OWN_RABBIT_PID=""
    fi
    if [[ -n "$_SERVICES_DIR" ]]; then
        if [[ -n "${CONVEYOR_KEEP_SERVICE_DIR:-}" ]]; then
            log "kept $_SERVICES_DIR"
        else
            rm -rf "$_SERVICES_DIR"
        fi
        _SERVICES_DIR=""
    fi
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    set -euo pipefail
    [[ "${1:-}" == "--" ]] && shift
    [[ $# -gt 0 ]] || die "usage: scripts/services.sh -- COMMAND [ARGS...]"
    trap services_down EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    services_up
    export CONVEYOR_TEST_POSTGRES_URL CONVEYOR_TEST_REDIS_URL CONVEYOR_TEST_AMQP_URL
    run_fg "$@"
fi
