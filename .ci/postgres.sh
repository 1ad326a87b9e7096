#!/usr/bin/env bash
# Installs (if missing) and starts a local PostgreSQL for the store's conformance suite, then
# creates role `warden` (password `warden`) and database `warden_test` idempotently. Prints the
# export line for WARDEN_TEST_POSTGRES_URL on stdout (everything else goes to stderr), so a caller
# can do: eval "$(bash .ci/postgres.sh)". Runs as root on Debian.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

log() { echo "postgres.sh: $*" >&2; }

if ! command -v pg_ctlcluster >/dev/null 2>&1 || ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
  log "installing postgresql"
  apt-get update -q >&2
  apt-get install -y -q --no-install-recommends postgresql >&2
fi

# The newest installed major version; create its default cluster if the package did not.
version="$(ls /usr/lib/postgresql | sort -V | tail -n 1)"
if ! pg_lsclusters -h | awk '{print $1" "$2}' | grep -qx "$version main"; then
  log "creating cluster $version/main"
  pg_createcluster "$version" main >&2
fi
port="$(pg_lsclusters -h | awk -v v="$version" '$1 == v && $2 == "main" {print $3}')"
if ! pg_lsclusters -h | awk -v v="$version" '$1 == v && $2 == "main" {print $4}' | grep -q online; then
  log "starting cluster $version/main on port $port"
  pg_ctlcluster "$version" main start >&2
fi

# Wait until it accepts connections (start can return before the socket is ready).
for _ in $(seq 1 60); do
  if runuser -u postgres -- psql -p "$port" -XAtqc 'SELECT 1' >/dev/null 2>&1; then
    break
  fi
  sleep 0.5
done

psql_admin() { runuser -u postgres -- psql -p "$port" -v ON_ERROR_STOP=1 -XAtq "$@"; }

if [ "$(psql_admin -c "SELECT 1 FROM pg_roles WHERE rolname = 'warden'")" != "1" ]; then
  log "creating role warden"
  psql_admin -c "CREATE ROLE warden LOGIN PASSWORD 'warden'" >&2
else
  psql_admin -c "ALTER ROLE warden LOGIN PASSWORD 'warden'" >&2
fi
if [ "$(psql_admin -c "SELECT 1 FROM pg_database WHERE datname = 'warden_test'")" != "1" ]; then
  log "creating database warden_test"
  psql_admin -c "CREATE DATABASE warden_test OWNER warden" >&2
fi

echo "export WARDEN_TEST_POSTGRES_URL=postgres://warden:warden@127.0.0.1:${port}/warden_test"
