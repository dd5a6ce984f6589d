#!/usr/bin/env bash
# Run a command with the host kept busy: one CPU hog per core beside it (a shell loop at
# normal priority), stopped when the command ends, however it ends; exits with the
# command's status. CI runs the integration and e2e tiers this way (`make test BUSY=1`), so
# a test that holds only on an idle host fails there rather than on a newcomer's laptop.
#
#   scripts/busy.sh make test-integration
set -u
if [ "$#" -eq 0 ]; then
    echo "usage: $0 COMMAND [ARG...]" >&2
    exit 2
fi
hogs=()
stop_hogs() {
    for pid in "${hogs[@]}"; do
        kill "$pid" 2>/dev/null
    done
    wait 2>/dev/null
}
trap stop_hogs EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
cores=$(nproc)
for _ in $(seq "$cores"); do
    (while :; do :; done) &
    hogs+=("$!")
done
echo "busy.sh: $cores CPU hog(s) running beside: $*" >&2
"$@"
