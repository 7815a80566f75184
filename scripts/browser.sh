#!/usr/bin/env bash
# Installs Debian's Chromium for the browser tests when it is missing (root, apt-get).
# Playwright's Python package drives it; `playwright install` is never used.
set -u
# Glyphs for the screenshots of the visitor pages in their languages (the test machine's fonts, not the product's:
# Thai, Japanese, Chinese and Korean (WenQuanYi Zen Hei), Devanagari (Lohit); DejaVu covers Arabic and Hebrew)
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1 && ! { fc-list 2>/dev/null | grep -qi tlwg && fc-list 2>/dev/null | grep -qi ipagothic && fc-list 2>/dev/null | grep -qi zenhei && fc-list 2>/dev/null | grep -qi lohit; }; then
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q fonts-thai-tlwg-ttf fonts-ipafont-gothic fonts-wqy-zenhei fonts-lohit-deva fonts-dejavu-core >/dev/null 2>&1 || true
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
