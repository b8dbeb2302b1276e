#!/bin/bash
# One process per GPU, NCCL, over 2 nodes x 4 GPUs.
# Submit: sbatch hpc/train_distributed_gpu.sh [SCRIPT [ARGS...]]
# Each task's LOCAL_RANK is SLURM_LOCALID, which init_process_group() uses to pick its GPU.
#SBATCH --job-name=neural_arch_nccl
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --gres=gpu:4
#SBATCH --cpus-per-task=8
#SBATCH --time=04:00:00
#SBATCH --output=neural_arch-%j.out
set -euo pipefail
SCRIPT=${1:-examples/train_mlp.py}; shift || true
export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}
export NEURAL_ARCH_BACKEND=nccl
srun python "$SCRIPT" "$@"
