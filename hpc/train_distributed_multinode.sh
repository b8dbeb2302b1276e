#!/bin/bash
# Scaled out: 4 nodes x 1 process (gloo), threads inside each process.
# Submit: sbatch hpc/train_distributed_multinode.sh [SCRIPT [ARGS...]]
# Same script as 2 nodes: the world size comes from SLURM (SLURM_NTASKS), not from the code.
#SBATCH --job-name=neural_arch_gloo4
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=40
#SBATCH --time=04:00:00
#SBATCH --output=neural_arch-%j.out
set -euo pipefail
SCRIPT=${1:-examples/train_mlp.py}; shift || true
export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}
export NEURAL_ARCH_BACKEND=gloo
srun python "$SCRIPT" "$@"
