#!/usr/bin/env bash
# Train on every host of a Cloud TPU pod slice: the same command on all workers, joined by jax.distributed.
#
#   TPU_NAME=my-v4-64 ZONE=us-central2-b REPO_DIR=~/vlp_jax \
#     launch/tpu_pod.sh --config=configs/saco_cc3m.py --workdir=gs://my-bucket/runs/saco --config.data.path=gs://...
#
# Prerequisites, once per slice: the repository at $REPO_DIR on every worker (git clone, or gcloud ... scp
# --worker=all) and `pip install -e "$REPO_DIR"` plus `pip install "jax[tpu]"` there. The workdir and data must be
# paths every worker can read and write (a GCS bucket): orbax writes one checkpoint from all processes.
# VLP_JAX_DISTRIBUTED=1 makes vlp_jax call jax.distributed.initialize(), which reads the slice's topology.
set -euo pipefail
: "${TPU_NAME:?set TPU_NAME to the TPU VM name}"
: "${ZONE:?set ZONE to the TPU zone}"
REPO_DIR="${REPO_DIR:-~/vlp_jax}"
PROJECT_FLAG=${PROJECT:+--project=$PROJECT}
if [ "$#" -eq 0 ]; then
  echo "usage: TPU_NAME=... ZONE=... $0 --config=configs/NAME.py --workdir=gs://... [--config.key=value ...]" >&2
  exit 2
fi
ARGS=$(printf ' %q' "$@")
gcloud compute tpus tpu-vm ssh "$TPU_NAME" --zone="$ZONE" $PROJECT_FLAG --worker=all \
  --command="cd $REPO_DIR && VLP_JAX_DISTRIBUTED=1 python -m vlp_jax.main$ARGS"
