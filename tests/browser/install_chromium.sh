#!/usr/bin/env sh
# Debian's Chromium for the suite's browser checks (the report and the table page opened in a
# real browser: tests/workflow/test_report.py, test_bench.py). `make test` runs this first.
#
# Installs the `chromium` package when no Chromium is on PATH and this machine can (root with
# apt-get); otherwise says why on one line and exits 0, and those tests skip with that reason
# (under CI=true they fail instead: tests/conftest.py's chromium_or_skip).
# The reason is also written to the file named by $1, which the tests quote.
reason_file=${1:-}
say() {
    echo "install_chromium: $*" >&2
    if [ -n "$reason_file" ]; then echo "$*" >"$reason_file"; fi
}
if [ -n "$reason_file" ]; then rm -f "$reason_file"; fi
for name in chromium chromium-browser google-chrome; do
    if command -v "$name" >/dev/null 2>&1; then exit 0; fi
done
if [ "$(id -u)" -ne 0 ]; then
    say "no Chromium on PATH, and installing Debian's chromium needs root"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    say "no Chromium on PATH, and no apt-get to install it"
    exit 0
fi
install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1; }
# Without refreshing the package lists first: quick where they are recent.
if ! install; then
    apt-get update -qq >/dev/null 2>&1 || true
    if ! install; then
        say "apt-get could not install Debian's chromium"
        exit 0
    fi
fi
echo "install_chromium: installed $(chromium --version 2>/dev/null)" >&2
