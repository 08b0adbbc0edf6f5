#!/usr/bin/env bash
# Install the two system packages the tests use, on Debian-like machines, when this machine allows it:
# bubblewrap, the grader's sandbox (attn_edu/grading/sandbox.py), first, then Chromium for the browser tests.
#
#   bash scripts/install_system_packages.sh      (`make test` starts it in the background before the tests)
#
# Idempotent and never fatal: it exits 0 whether the packages were already there, got installed, or could
# not be installed (no apt-get, not root and no password-less sudo, no network). Without Chromium the
# browser tests skip themselves and say what to install; without bubblewrap the grader runs notebooks without
# its sandbox and says so, and the tests of the sandbox itself skip. Playwright's own browser download is not
# used. CHROMIUM_PATHS (space-separated) overrides where an existing browser is looked for.
set -u

candidates=${CHROMIUM_PATHS:-"${ATTN_EDU_CHROMIUM:-} /usr/bin/chromium chromium chromium-browser google-chrome"}
need_chromium=1
for candidate in $candidates; do
    if [[ -x "$candidate" ]] || { [[ "$candidate" != /* ]] && command -v "$candidate" >/dev/null 2>&1; }; then
        need_chromium=0  # already installed
    fi
done
need_bwrap=1
command -v bwrap >/dev/null 2>&1 && need_bwrap=0
if [[ $need_chromium -eq 0 && $need_bwrap -eq 0 ]]; then
    exit 0
fi

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

log=$(mktemp)
if ! "${sudo[@]}" apt-get update -qq >"$log" 2>&1; then
    echo "Could not update apt's package lists (see below): no bubblewrap, no Chromium." >&2
    tail -n 5 "$log" >&2
    rm -f "$log"
    exit 0
fi
install() {  # install() WHAT PACKAGE...: one apt-get install, its failure reported and not fatal
    local what=$1
    shift
    if "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >>"$log" 2>&1; then
        echo "$what installed"
    else
        echo "Could not install $what (see below)." >&2
        tail -n 5 "$log" >&2
    fi
}
if [[ $need_bwrap -eq 1 ]]; then
    install "bubblewrap (the grader's sandbox)" bubblewrap
fi
if [[ $need_chromium -eq 1 ]]; then
    echo "Installing Chromium for the browser tests (apt-get, about a minute)..."
    install "Chromium; the browser tests will be skipped without it" chromium chromium-driver
fi
rm -f "$log"
exit 0
