#!/bin/bash
# 2 nodes x 1 process, gloo over the network, threads inside each process.
# Submit: sbatch hpc/train_distributed.sh [SCRIPT [ARGS...]]
# No MASTER_ADDR/RANK exports needed: init_process_group() detects the srun step (rank =
# SLURM_PROCID, master = first host of SLURM_JOB_NODELIST, port derived from the job id;
# set MASTER_PORT to override). Check with: srun neural-arch env
#SBATCH --job-name=neural_arch_gloo
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=40
#SBATCH --time=04:00:00
#SBATCH --output=neural_arch-%j.out
set -euo pipefail
SCRIPT=${1:-examples/train_mlp.py}; shift || true
export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}
export NEURAL_ARCH_BACKEND=gloo
srun python "$SCRIPT" "$@"
