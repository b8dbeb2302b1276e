#!/bin/bash
# ONE process using all cores of one node through threads.
# Submit: sbatch hpc/train.sh [SCRIPT [ARGS...]]    (default SCRIPT: examples/train_mlp.py)
#SBATCH --job-name=neural_arch_threads
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=40
#SBATCH --time=04:00:00
#SBATCH --output=neural_arch-%j.out
set -euo pipefail
SCRIPT=${1:-examples/train_mlp.py}; shift || true
export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}
# One task: detection sees world size 1, every collective is the identity.
srun python "$SCRIPT" "$@"
