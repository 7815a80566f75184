#!/usr/bin/env bash
# Installs Debian's Chromium for the browser tests when it is missing (root, apt-get).
# Playwright's Python package drives it; `playwright install` is never used.
set -u
# Thai and Japanese glyphs for the screenshots of those pages (the tests do not depend on them)
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1 && ! { fc-list 2>/dev/null | grep -qi tlwg && fc-list 2>/dev/null | grep -qi ipagothic; }; then
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q fonts-thai-tlwg-ttf fonts-ipafont-gothic >/dev/null 2>&1 || true
fi
[ -x /usr/bin/chromium ] && exit 0
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "browser: installing chromium (apt-get)" >&2
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q chromium >/dev/null 2>&1 \
    || { apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q chromium >/dev/null 2>&1; } \
    || echo "browser: could not install chromium; the browser tests will fail in CI and skip elsewhere" >&2
else
  echo "browser: no /usr/bin/chromium (install it: apt-get install chromium)" >&2
fi
exit 0
