#!/usr/bin/env bash
# Installs Debian's Node.js and npm for the connector tests when they are missing (root, apt-get): the
# Cloudflare Workers run in workerd, which tests/connectors installs from npm on first use.
set -u
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 && exit 0
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "node: installing nodejs and npm (apt-get)" >&2
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q nodejs npm >/dev/null 2>&1 \
    || { apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q nodejs npm >/dev/null 2>&1; } \
    || echo "node: could not install nodejs/npm; the connector tests will fail in CI and skip elsewhere" >&2
else
  echo "node: no node/npm (install them: apt-get install nodejs npm)" >&2
fi
exit 0
