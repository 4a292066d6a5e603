#!/bin/sh
# Slurm Epilog (runs as root on each node of a job): closes the job's energy record and
# prints nothing to the job. Fails open like the Prolog.
# Jobs without GPUs on this node have nothing to account.
[ -n "${SLURM_JOB_GPUS:-}${CUDA_VISIBLE_DEVICES:-}" ] || exit 0
out=$(/usr/bin/wattson job end 2>&1) || logger -t wattson -- "job ${SLURM_JOB_ID:-?}: $out"
exit 0
