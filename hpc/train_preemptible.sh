#!/bin/bash
# A training job that survives its time limit and preemption: it saves and comes back.
# Submit: sbatch hpc/train_preemptible.sh --config gpt [--set key=value ...]
# 120 s before the time limit (or when an admin sends `scancel --signal=USR1 JOB`), SLURM
# sends SIGUSR1 to every task; each rank finishes its step, they save one checkpoint
# together, and rank 0 runs `scontrol requeue $SLURM_JOB_ID` (checkpoint.requeue_on_stop).
# The job then queues again under the same id and `neural-arch train` resumes from that
# checkpoint: the final weights equal an uninterrupted run's, bit for bit (tests/training/test_stop.py).
#SBATCH --job-name=neural_arch_preemptible
#SBATCH --ntasks=2
#SBATCH --cpus-per-task=1
#SBATCH --time=04:00:00
#SBATCH --signal=USR1@120
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=neural_arch-%j.out
set -uo pipefail
export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}
echo "job $SLURM_JOB_ID start $(date -Is), restart ${SLURM_RESTART_COUNT:-0}"
srun python -m neural_arch.cli train "$@" --set checkpoint.requeue_on_stop=true
