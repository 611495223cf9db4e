#!/usr/bin/env bash
# Times the README's two commands on a fresh clone of one commit, with ../shared beside it as CI has it.
# Usage (from the project root): bench/fresh_clone_timing.sh COMMIT LABEL
# Prints, per command, its exit status, seconds and the load average at its end, then the venv size and
# package count. Run two commits at the same time to compare them under the same load.
set -u
commit=$1; label=$2
root=$(git rev-parse --show-toplevel) || exit 2
work=$(mktemp -d "/tmp/timed-$label.XXXXXX")
git clone -q "$root" "$work/project" && cd "$work/project" && git checkout -q "$commit" || exit 2
ln -s "$(cd "$root/../shared" && pwd)" "$work/shared"
for target in test demo; do
  start=$(date +%s)
  env -u VIRTUAL_ENV make "$target" > "$work/make-$target.log" 2>&1; rc=$?
  echo "$label $commit make $target rc=$rc seconds=$(( $(date +%s) - start )) load=$(cut -d' ' -f1 /proc/loadavg)"
done
echo "$label venv $(du -sh .venv | cut -f1) packages=$(.venv/bin/python -m pip list 2>/dev/null | tail -n +3 | wc -l)"
echo "$label logs in $work"
