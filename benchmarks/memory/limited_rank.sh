#!/bin/sh
# One training rank in its own memory cgroup (cgroup v1): limited_rank.sh LIMIT_BYTES OUT_DIR TAG TRAIN_ARGS...
# Started by benchmarks/memory_limit.py through the launcher (--no-python), never by hand. The
# shell joins the group before Python starts, so everything the rank ever allocates (the
# interpreter, torch, the model, its training state) counts against LIMIT_BYTES alone.
set -eu
group="/sys/fs/cgroup/memory/neural_arch_${3}_rank${RANK}"
mkdir -p "$group"
echo "$1" > "$group/memory.limit_in_bytes"
echo "$$" > "$group/cgroup.procs"
exec "${PYTHON:-python3}" "$(dirname "$0")/limited_rank.py" "$@"
