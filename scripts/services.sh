#!/usr/bin/env bash
# Starts what the test suites need when it is not already running.
# PostgreSQL and Redis (our Valkey-compatible server) are used by the Valkey/PostgreSQL suites;
# MariaDB by the WordPress plugin's tests (tests/connectors).
set -u
if command -v pg_isready >/dev/null 2>&1 && ! pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then
  if command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /etc/postgresql ]; then
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main start || echo "services: could not start PostgreSQL" >&2
  fi
fi
if command -v redis-cli >/dev/null 2>&1 && ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  if command -v redis-server >/dev/null 2>&1; then
    redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no || echo "services: could not start Redis" >&2
  fi
fi
if command -v mysqladmin >/dev/null 2>&1 && ! mysqladmin -uroot -h127.0.0.1 --protocol=TCP ping >/dev/null 2>&1; then
  if command -v mysqld_safe >/dev/null 2>&1; then
    service mariadb start >/dev/null 2>&1 || (mysqld_safe --bind-address=127.0.0.1 >/dev/null 2>&1 &)
    for _ in $(seq 1 30); do
      mysqladmin -uroot -h127.0.0.1 --protocol=TCP ping >/dev/null 2>&1 && break
      sleep 1
    done
    mysqladmin -uroot -h127.0.0.1 --protocol=TCP ping >/dev/null 2>&1 || echo "services: could not start MariaDB" >&2
  fi
fi
# the database the HTTP suites use on STORE=valkey (its name must end in _test)
if command -v psql >/dev/null 2>&1; then
  psql -h 127.0.0.1 -U postgres -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname='qm_conformance_test'" 2>/dev/null | grep -q 1 \
    || createdb -h 127.0.0.1 -U postgres qm_conformance_test 2>/dev/null || true
  # every run creates and drops about a hundred schemas there: PostgreSQL's own catalogs grow with each
  # run and slow the next; past 64 MB they are compacted (a few seconds) before the suite starts
  size=$(psql -h 127.0.0.1 -U postgres -d qm_conformance_test -tAc \
    "SELECT pg_total_relation_size('pg_catalog.pg_attribute')" 2>/dev/null || echo 0)
  if [ "${size:-0}" -gt 67108864 ] 2>/dev/null; then
    echo "services: compacting the test database's catalogs ($((size / 1048576)) MB of pg_attribute)" >&2
    for t in pg_attribute pg_class pg_depend pg_type pg_index pg_constraint; do
      psql -h 127.0.0.1 -U postgres -d qm_conformance_test -qc "VACUUM FULL pg_catalog.$t" >/dev/null 2>&1 || true
    done
  fi
fi
exit 0
