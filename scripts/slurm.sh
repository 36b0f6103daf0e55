#!/usr/bin/env bash
# Multi-node training under SLURM: one task per GPU, started by srun; Lightning reads SLURM's environment.
#
#   sbatch scripts/slurm.sh                                    # 2 nodes x 8 GPUs, as below
#   sbatch --nodes 4 scripts/slurm.sh --trainer.precision bf16-mixed
#   CONFIG=configs/coco_hard.yaml sbatch scripts/slurm.sh
#
# Pre-emption and time limits: SLURM sends SIGTERM to every task (at pre-emption, and 120 s before the
# time limit with --signal below); each task finishes its batch, writes last.ckpt and exits with 143;
# this script then puts the job back in the queue, and the requeued job resumes with --ckpt_path last.
# Set PartitionName GraceTime (pre-emption) long enough to write one checkpoint.
#SBATCH --job-name=caption
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=8
#SBATCH --time=24:00:00
#SBATCH --signal=TERM@120
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=slurm-%x-%j.out
set -uo pipefail

CONFIG=${CONFIG:-configs/coco_soft.yaml}

srun caption fit --config "$CONFIG" \
  --trainer.strategy ddp --trainer.num_nodes "$SLURM_JOB_NUM_NODES" --trainer.devices "$SLURM_NTASKS_PER_NODE" \
  --ckpt_path last "$@"
status=$?
if [ "$status" -eq 143 ]; then  # stopped by SIGTERM after saving last.ckpt: not finished, continue later
  scontrol requeue "$SLURM_JOB_ID"
fi
exit "$status"
