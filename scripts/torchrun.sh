#!/usr/bin/env bash
# Multi-GPU and multi-node training with torchrun: one process per GPU, Lightning reads torchrun's
# environment. Run the same command on every node; extra arguments go to `caption fit`.
#
#   scripts/torchrun.sh                                        # this machine, all its GPUs
#   NNODES=2 MASTER_ADDR=node0 scripts/torchrun.sh             # on node0 and on node1
#   scripts/torchrun.sh --trainer.precision bf16-mixed --periodic_checkpoint.every_n_train_steps 500
#
# The run resumes from <trainer.default_root_dir>/checkpoints/last.ckpt when there is one (--ckpt_path
# last), so re-running the same command after a crash, and torchrun's own restarts (MAX_RESTARTS), continue it.
set -euo pipefail

CONFIG=${CONFIG:-configs/coco_soft.yaml}
NNODES=${NNODES:-1}
GPUS_PER_NODE=${GPUS_PER_NODE:-$(nvidia-smi --list-gpus | wc -l)}
MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
MASTER_PORT=${MASTER_PORT:-29500}
MAX_RESTARTS=${MAX_RESTARTS:-3}
RUN_ID=${RUN_ID:-caption}

exec torchrun \
  --nnodes "$NNODES" --nproc-per-node "$GPUS_PER_NODE" --max-restarts "$MAX_RESTARTS" \
  --rdzv-backend c10d --rdzv-endpoint "$MASTER_ADDR:$MASTER_PORT" --rdzv-id "$RUN_ID" \
  -m caption.cli fit --config "$CONFIG" \
  --trainer.strategy ddp --trainer.num_nodes "$NNODES" --trainer.devices "$GPUS_PER_NODE" \
  --ckpt_path last "$@"
