#!/usr/bin/env bash
# Runs the explorer with one Caddy-side fix taken out (docs/explore.md, the revert table):
#   bash explore/testdata/reverts/run.sh <name> [EXPLORE_TIME]
# applies <name>.patch to a detached worktree of HEAD, builds the explorer there, runs it
# from EXPLORE_FIRST (default 100000) until the first failing batch or the time is up
# (default 5m), (EXPLORE_AVOID as set), and removes the
# worktree. The last line is the summary (first_failure_after=...).
set -euo pipefail
name=$1
t=${2:-5m}
root=$(git rev-parse --show-toplevel)
dir=$(mktemp -d /tmp/explore-revert-XXXXXX)
trap 'git -C "$root" worktree remove --force "$dir" >/dev/null 2>&1 || true' EXIT
git -C "$root" worktree add --detach "$dir" HEAD >/dev/null 2>&1
git -C "$dir" apply "$root/explore/testdata/reverts/$name.patch"
(cd "$dir" && go build -o bin/explore ./explore)
cd "$dir"
EXPLORE_AVOID=${EXPLORE_AVOID-} EXPLORE_STOP=${EXPLORE_STOP-1} EXPLORE_FIRST=${EXPLORE_FIRST:-100000} \
	EXPLORE_TIME=$t bin/explore
