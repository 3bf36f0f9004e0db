#!/usr/bin/env bash
# Make sure the local services the test suite needs are running:
#   - PostgreSQL on 127.0.0.1:5432, trust auth, user "postgres", database "test"
#   - Redis on 127.0.0.1:6379
#   - the kcat Kafka client and jq, which the wire-format tests read with
#     (plus psql / redis-cli)
#   - Chromium, for the web console's browser tests
#   - promtool (Debian's prometheus package), which checks and unit-tests
#     the alert rules in monitoring/; the Prometheus server the package
#     brings is stopped and kept from starting at boot: only the tool is
#     needed
#
# Called by `make services` (and therefore `make test` and CI). Designed for
# Debian 12 without systemd. Idempotent: when everything is already up it only
# runs a few quick checks and exits.
#
# Optional environment:
#   SERVICES_WAIT   seconds to wait for each service to answer (default 60)
set -euo pipefail

readonly HOST=127.0.0.1
readonly PG_PORT=5432
readonly PG_USER=postgres
readonly PG_DB=test
readonly REDIS_PORT=6379
readonly REDIS_DIR=/var/lib/redis
readonly REDIS_LOG=/var/log/redis/ci.log
readonly WAIT="${SERVICES_WAIT:-60}"
readonly HBA_MARKER="# added by scripts/services.sh: trust auth for local tests"

# Never prompt for or pick up a password; fail fast on a dead port.
unset PGPASSWORD PGSERVICE
export PGCONNECT_TIMEOUT=5

log() { printf '%s\n' "$*"; }
die() {
	printf 'services: ERROR: %s\n' "$*" >&2
	exit 1
}

# Run a command as root: directly when we are root, through sudo when it is
# available, otherwise just try it as the current user.
as_root() {
	if [[ $(id -u) -eq 0 ]]; then
		"$@"
	elif command -v sudo >/dev/null 2>&1; then
		sudo "$@"
	else
		"$@"
	fi
}

have() { command -v "$1" >/dev/null 2>&1; }

# True when something accepts TCP connections on 127.0.0.1:$1.
port_open() { (exec 3<>"/dev/tcp/$HOST/$1") >/dev/null 2>&1; }

# --- apt -------------------------------------------------------------------

APT_UPDATED=0
# apt_install [--no-install-recommends] <package>...
apt_install() {
	local opts=()
	if [[ ${1:-} == --no-install-recommends ]]; then
		opts+=("$1")
		shift
	fi
	[[ $# -gt 0 ]] || return 0
	have apt-get || die "need to install $*, but apt-get is not available"
	local out
	out=$(mktemp)
	if [[ $APT_UPDATED -eq 0 ]]; then
		log "apt: updating package lists"
		as_root apt-get update >"$out" 2>&1 || apt_fail "$out" "apt-get update"
		APT_UPDATED=1
	fi
	log "apt: installing $*"
	as_root env DEBIAN_FRONTEND=noninteractive \
		apt-get install -y "${opts[@]}" "$@" >"$out" 2>&1 ||
		apt_fail "$out" "apt-get install $*"
	rm -f "$out"
}

apt_fail() { # apt_fail <output file> <what>
	tail -n 20 "$1" >&2 || true
	rm -f "$1"
	die "$2 failed (output above)"
}

pg_server_installed() {
	have pg_ctlcluster || return 1
	compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null
}

# Install everything we can already tell is missing in a single apt run.
install_missing() {
	local pkgs=()
	if ! have psql || ! have pg_isready; then
		pkgs+=(postgresql-client)
	fi
	if ! pg_server_installed && ! port_open "$PG_PORT"; then
		pkgs+=(postgresql)
	fi
	have redis-cli || pkgs+=(redis-tools)
	if ! have redis-server && ! port_open "$REDIS_PORT"; then
		pkgs+=(redis-server)
	fi
	have kcat || pkgs+=(kcat)
	have jq || pkgs+=(jq)
	have chromium || pkgs+=(chromium)
	apt_install "${pkgs[@]}"
	have promtool || install_promtool
}

# promtool ships in the prometheus package. Its recommends (the node
# exporter) are left out, and the server the package may have started (on
# :9090, where the examples serve courier's metrics) is stopped and
# disabled at boot.
install_promtool() {
	apt_install --no-install-recommends prometheus
	if [[ -d /run/systemd/system ]] && have systemctl; then
		as_root systemctl disable --now prometheus >/dev/null 2>&1 || true
	elif [[ -x /etc/init.d/prometheus ]]; then
		as_root /etc/init.d/prometheus stop >/dev/null 2>&1 || true
		if have update-rc.d; then
			as_root update-rc.d prometheus disable >/dev/null 2>&1 || true
		fi
	fi
}

# --- PostgreSQL ------------------------------------------------------------

pg_ready() { pg_isready -q -h "$HOST" -p "$PG_PORT" >/dev/null 2>&1; }

pg_psql() { # pg_psql <db> <sql>
	psql -X -w -q -tA -v ON_ERROR_STOP=1 -h "$HOST" -p "$PG_PORT" -U "$PG_USER" -d "$1" -c "$2"
}

pg_ok() { pg_ready && pg_psql "$PG_DB" 'select 1' >/dev/null 2>&1; }

wait_for() { # wait_for <what> <command...>
	local what=$1 deadline=$((SECONDS + WAIT))
	shift
	until "$@"; do
		if ((SECONDS >= deadline)); then
			return 1
		fi
		sleep 0.5
	done
	log "$what: answering"
}

# Cluster chosen to serve 127.0.0.1:5432 (set by pg_pick_cluster).
PG_VER=
PG_NAME=
PG_STATUS=
PG_LOGFILE=
PG_CLUSTER_PORT=

# Prefer the cluster configured for port 5432; otherwise the newest cluster.
pg_pick_cluster() {
	local ver name port status _owner _dir logfile best=
	PG_VER= PG_NAME= PG_STATUS= PG_LOGFILE= PG_CLUSTER_PORT=
	while read -r ver name port status _owner _dir logfile; do
		[[ -n $ver ]] || continue
		if [[ $port == "$PG_PORT" ]]; then
			best="$ver $name $port $status $logfile"
			break
		fi
		[[ -n $best ]] || best="$ver $name $port $status $logfile"
	done < <(pg_lsclusters -h 2>/dev/null | sort -rV)
	[[ -n $best ]] || return 1
	read -r PG_VER PG_NAME PG_CLUSTER_PORT PG_STATUS PG_LOGFILE <<<"$best"
	PG_LOGFILE=${PG_LOGFILE:-/var/log/postgresql/postgresql-$PG_VER-$PG_NAME.log}
}

pg_logfile() {
	if [[ -n $PG_LOGFILE ]]; then
		echo "$PG_LOGFILE"
	else
		echo "/var/log/postgresql/postgresql-<version>-main.log"
	fi
}

pg_fail() {
	local msg="postgres: $1 (127.0.0.1:$PG_PORT)."
	msg+=" See $(pg_logfile) and 'pg_lsclusters'."
	die "$msg"
}

# Make sure the cluster listens on 127.0.0.1:5432. Returns 0 if the config
# was changed (the cluster then needs a restart).
pg_fix_config() {
	local changed=1 port listen
	port=$(pg_conftool -s "$PG_VER" "$PG_NAME" show port 2>/dev/null || echo "$PG_PORT")
	if [[ $port != "$PG_PORT" ]]; then
		log "postgres: setting port = $PG_PORT for cluster $PG_VER/$PG_NAME"
		as_root pg_conftool "$PG_VER" "$PG_NAME" set port "$PG_PORT"
		PG_CLUSTER_PORT=$PG_PORT
		changed=0
	fi
	listen=$(pg_conftool -s "$PG_VER" "$PG_NAME" show listen_addresses 2>/dev/null || echo localhost)
	case ",${listen// /}," in
	*,localhost,* | *,127.0.0.1,* | *,\*,* | *,0.0.0.0,*) ;;
	*)
		log "postgres: setting listen_addresses = 'localhost' (was '$listen')"
		as_root pg_conftool "$PG_VER" "$PG_NAME" set listen_addresses localhost
		changed=0
		;;
	esac
	return "$changed"
}

pg_ctl() { # pg_ctl start|stop|restart|reload
	as_root pg_ctlcluster --skip-systemctl-redirect "$PG_VER" "$PG_NAME" "$1"
}

# Insert trust lines at the top of pg_hba.conf and reload.
pg_fix_hba() {
	local hba tmp
	hba=$(pg_conftool -s "$PG_VER" "$PG_NAME" show hba_file 2>/dev/null ||
		echo "/etc/postgresql/$PG_VER/$PG_NAME/pg_hba.conf")
	if as_root grep -qF "$HBA_MARKER" "$hba"; then
		return 1 # already done once; something else is wrong
	fi
	log "postgres: enabling trust auth in $hba"
	tmp=$(mktemp)
	{
		printf '%s\n' "$HBA_MARKER" \
			'local   all   all                 trust' \
			'host    all   all   127.0.0.1/32  trust' \
			'host    all   all   ::1/128       trust'
		as_root cat "$hba"
	} >"$tmp"
	# cp onto the existing file keeps its owner and mode.
	as_root cp "$tmp" "$hba"
	rm -f "$tmp"
	pg_ctl reload >/dev/null
}

ensure_postgres() {
	if pg_ok; then
		log "postgres: up"
		return 0
	fi

	if ! pg_ready; then
		pg_server_installed || apt_install postgresql postgresql-client
		pg_server_installed || pg_fail "server binaries still missing after install"

		if ! pg_pick_cluster; then
			local ver
			ver=$(compgen -G '/usr/lib/postgresql/*/bin/postgres' | sed 's#/usr/lib/postgresql/##; s#/.*##' | sort -V | tail -n1)
			log "postgres: creating cluster $ver/main"
			as_root pg_createcluster --port "$PG_PORT" "$ver" main >/dev/null ||
				pg_fail "pg_createcluster $ver main failed"
			pg_pick_cluster || pg_fail "no cluster after pg_createcluster"
		fi

		local changed=1
		pg_fix_config && changed=0
		if [[ $PG_STATUS != online* ]]; then
			pg_ctl start || pg_fail "pg_ctlcluster $PG_VER $PG_NAME start failed"
			log "postgres: started cluster $PG_VER/$PG_NAME"
		elif [[ $changed -eq 0 ]]; then
			log "postgres: restarting cluster $PG_VER/$PG_NAME to apply config"
			pg_ctl restart || pg_fail "pg_ctlcluster $PG_VER $PG_NAME restart failed"
		fi
		# An online cluster that does not answer yet may still be starting up.
		wait_for postgres pg_ready || pg_fail "not accepting connections after ${WAIT}s"
	fi

	# The server answers; make sure a password-less connection is allowed.
	local err
	if ! err=$(pg_psql postgres 'select 1' 2>&1 >/dev/null); then
		[[ -n $PG_VER ]] || pg_pick_cluster || PG_CLUSTER_PORT=
		[[ $PG_CLUSTER_PORT == "$PG_PORT" ]] ||
			die "postgres: something answers on 127.0.0.1:$PG_PORT but refuses password-less login ($err) and it is not a local Debian cluster (see 'pg_lsclusters')"
		pg_fix_hba || pg_fail "password-less login refused even with trust lines in pg_hba.conf: $err"
		wait_for "postgres (trust auth)" pg_psql postgres 'select 1' >/dev/null 2>&1 ||
			pg_fail "password-less login still refused after reloading pg_hba.conf: $(pg_psql postgres 'select 1' 2>&1 || true)"
	fi

	if [[ $(pg_psql postgres "select 1 from pg_database where datname = '$PG_DB'") != 1 ]]; then
		log "postgres: creating database $PG_DB"
		pg_psql postgres "create database $PG_DB" >/dev/null ||
			pg_fail "could not create database $PG_DB"
	fi

	pg_ok || pg_fail "cannot run 'select 1' in database $PG_DB as $PG_USER"
	log "postgres: up"
}

# --- Redis -----------------------------------------------------------------

redis_ok() {
	[[ $(timeout 5 redis-cli -h "$HOST" -p "$REDIS_PORT" ping 2>/dev/null) == PONG ]]
}

redis_fail() {
	if [[ -r $REDIS_LOG ]]; then
		tail -n 5 "$REDIS_LOG" >&2 || true
	fi
	die "redis: $1 (127.0.0.1:$REDIS_PORT). See $REDIS_LOG."
}

# Create $1 if missing and make sure the current user can write to it.
ensure_writable_dir() {
	[[ -d $1 ]] || as_root mkdir -p "$1"
	[[ -w $1 ]] || as_root chown "$(id -u):$(id -g)" "$1"
}

ensure_redis() {
	if redis_ok; then
		log "redis: up"
		return 0
	fi

	have redis-server || apt_install redis-server redis-tools
	have redis-server || redis_fail "redis-server still missing after install"
	# Installing the package may have started it already.
	if redis_ok; then
		log "redis: up"
		return 0
	fi

	ensure_writable_dir "$REDIS_DIR"
	ensure_writable_dir "$(dirname "$REDIS_LOG")"
	if [[ -e $REDIS_LOG && ! -w $REDIS_LOG ]]; then
		as_root chown "$(id -u):$(id -g)" "$REDIS_LOG"
	fi

	redis-server --daemonize yes --bind 127.0.0.1 -::1 --port "$REDIS_PORT" \
		--save "" --appendonly no --dir "$REDIS_DIR" --logfile "$REDIS_LOG" ||
		redis_fail "redis-server failed to start"
	log "redis: started"
	wait_for redis redis_ok || redis_fail "no PONG after ${WAIT}s"
}

# --- main ------------------------------------------------------------------

main() {
	install_missing
	have psql || die "psql is missing (install postgresql-client)"
	have redis-cli || die "redis-cli is missing (install redis-tools)"
	have kcat || die "kcat is missing (install kcat)"
	have jq || die "jq is missing (install jq)"
	have chromium || die "chromium is missing (install chromium)"
	have promtool || die "promtool is missing (install prometheus)"

	ensure_postgres
	ensure_redis
	log "services: ready (postgres 127.0.0.1:$PG_PORT db=$PG_DB, redis 127.0.0.1:$REDIS_PORT)"
}

main "$@"
