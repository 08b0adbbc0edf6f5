#!/usr/bin/env bash
# Install Chromium for the browser tests (tests/ui) on Debian-like machines, when this machine allows it.
#
#   bash scripts/install_chromium.sh      (`make test` calls it before the tests)
#
# Idempotent and never fatal: it exits 0 whether Chromium was already there, got installed, or could
# not be installed (no apt-get, not root and no password-less sudo, no network). Without Chromium the
# browser tests skip themselves and say what to install. Playwright's own browser download is not used.
# CHROMIUM_PATHS (space-separated) overrides where an existing browser is looked for.
set -u

candidates=${CHROMIUM_PATHS:-"${ATTN_EDU_CHROMIUM:-} /usr/bin/chromium chromium chromium-browser google-chrome"}
for candidate in $candidates; do
    if [[ -x "$candidate" ]] || { [[ "$candidate" != /* ]] && command -v "$candidate" >/dev/null 2>&1; }; then
        exit 0  # already installed
    fi
done

if ! command -v apt-get >/dev/null 2>&1; then
    exit 0  # not Debian-like (macOS, Fedora, ...): the browser tests will skip
fi
if [[ ${EUID:-$(id -u)} -eq 0 ]]; then
    sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then
    sudo=(sudo -n)
else
    exit 0  # no root: the browser tests will skip
fi

echo "Installing Chromium for the browser tests (apt-get, about a minute)..."
log=$(mktemp)
if "${sudo[@]}" apt-get update -qq >"$log" 2>&1 &&
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >>"$log" 2>&1; then
    echo "Chromium installed: $(command -v chromium || echo /usr/bin/chromium)"
else
    echo "Could not install Chromium (see below); the browser tests will be skipped." >&2
    tail -n 5 "$log" >&2
fi
rm -f "$log"
exit 0
