#!/usr/bin/env bash
# Train on every host of a Cloud TPU pod slice: the same command on all workers, joined by jax.distributed, restarted
# as a whole when it stops for a reason worth retrying.
#
#   TPU_NAME=my-v4-64 ZONE=us-central2-b REPO_DIR=~/vlp_jax \
#     launch/tpu_pod.sh --config=configs/saco_cc3m.py --workdir=gs://my-bucket/runs/saco --config.data.path=gs://...
#
# Prerequisites, once per slice: the repository at $REPO_DIR on every worker (git clone, or gcloud ... scp
# --worker=all) and `pip install -e "$REPO_DIR[tpu,gcs]"` there (jax for the TPU, gcsfs for gs:// paths). The workdir
# and data must be paths every worker can read and write (a GCS bucket, which must exist, writable by the VMs'
# service account): orbax writes one checkpoint from all processes, into the bucket itself, so a re-created slice
# resumes from it. A run that cannot write there stops at start with exit code 2 (docs/usage.md).
# VLP_JAX_DISTRIBUTED=1 makes vlp_jax call jax.distributed.initialize(), which reads the slice's topology.
#
# Supervision (docs/reliability.md, "Lost or hung hosts"): each worker prints its exit code. Once one worker has
# failed, the others get GRACE seconds to stop by themselves (the watchdog and the peer monitor end them within
# config.watchdog's timeouts), then every vlp_jax process left on the slice is stopped. The first failing code
# decides: a retryable one restarts the whole job from its last checkpoint, at most MAX_RESTARTS times; any other
# ends the script with that code.
set -euo pipefail
: "${TPU_NAME:?set TPU_NAME to the TPU VM name}"
: "${ZONE:?set ZONE to the TPU zone}"
REPO_DIR="${REPO_DIR:-~/vlp_jax}"
MAX_RESTARTS="${MAX_RESTARTS:-3}"
GRACE="${GRACE:-120}"
POLL="${POLL:-5}"  # seconds between looks at the workers' exit codes
# 75 preempted, 76 a peer lost, 77 a step hung (vlp_jax/errors.py); 137 killed by SIGKILL (OOM killer, maintenance);
# 134 aborted by jax's distributed client when the coordinator (process 0) is lost.
RETRY_CODES=" 75 76 77 134 137 "
PROJECT_FLAG=${PROJECT:+--project=$PROJECT}
if [ "$#" -eq 0 ]; then
  echo "usage: TPU_NAME=... ZONE=... $0 --config=configs/NAME.py --workdir=gs://... [--config.key=value ...]" >&2
  exit 2
fi
ARGS=$(printf ' %q' "$@")
MARK=vlp_jax-exit-code

on_all_workers() {
  gcloud compute tpus tpu-vm ssh "$TPU_NAME" --zone="$ZONE" $PROJECT_FLAG --worker=all --command="$1"
}

first_failure() {  # the first non-zero exit code a worker printed, or nothing
  grep -o "^$MARK=[0-9]*" "$1" | cut -d= -f2 | grep -v '^0$' | head -n 1 || true
}

LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT
restarts=0
while true; do
  : > "$LOG"
  # a subshell holding the pipe, not a process substitution: once it ends, tee has written every line
  (on_all_workers "cd $REPO_DIR && VLP_JAX_DISTRIBUTED=1 python -m vlp_jax.main$ARGS; echo $MARK=\$?" 2>&1 \
    | tee -a "$LOG"; exit "${PIPESTATUS[0]}") &
  job=$!
  failed_since=""
  while kill -0 "$job" 2>/dev/null; do
    sleep "$POLL"
    if [ -z "$failed_since" ] && [ -n "$(first_failure "$LOG")" ]; then
      failed_since=$SECONDS
    elif [ -n "$failed_since" ] && [ $((SECONDS - failed_since)) -ge "$GRACE" ]; then
      echo "tpu_pod.sh: a worker failed ${GRACE}s ago; stopping the vlp_jax processes left" >&2
      on_all_workers "pkill -TERM -f '[v]lp_jax.main'; sleep 10; pkill -KILL -f '[v]lp_jax.main'; true" || true
      break
    fi
  done
  set +e; wait "$job"; ssh_code=$?; set -e
  code=$(first_failure "$LOG")
  code=${code:-$ssh_code}
  if [ "$code" -eq 0 ]; then
    exit 0
  fi
  if [[ "$RETRY_CODES" != *" $code "* ]] || [ "$restarts" -ge "$MAX_RESTARTS" ]; then
    echo "tpu_pod.sh: stopped with exit code $code after $restarts restarts (retryable:$RETRY_CODES)" >&2
    exit "$code"
  fi
  restarts=$((restarts + 1))
  echo "tpu_pod.sh: exit code $code is retryable; restart $restarts of $MAX_RESTARTS" >&2
  on_all_workers "pkill -KILL -f '[v]lp_jax.main'; true" || true  # nothing of the last attempt may hold the TPU
done
