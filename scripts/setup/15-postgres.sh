#!/usr/bin/env bash
# Installs the PostgreSQL server binaries for the tests that start a throwaway cluster
# (flowmem-testsupport's `PgCluster`). Debian's `postgresql` package puts `initdb`,
# `pg_ctl` and `postgres` under /usr/lib/postgresql/<version>/bin and `psql` on PATH.
# Does nothing when an `initdb` is already there.
set -euo pipefail
source "$(dirname "$0")/apt.bash"
have_initdb() {
  compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null
}
if have_initdb; then
  exit 0
fi
apt_install postgresql
have_initdb || { echo 'no /usr/lib/postgresql/*/bin/initdb after installing postgresql' >&2; exit 1; }
