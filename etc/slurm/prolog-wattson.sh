#!/bin/sh
# Slurm Prolog (runs as root on each node of a job): tells wattsond which GPUs the job owns.
# wattson fails open: whatever happens here, the job starts, and syslog says why accounting
# is missing. Install as e.g. /etc/slurm/prolog.d/50-wattson.sh (see slurm.conf.snippet).
# Jobs without GPUs on this node have nothing to account.
[ -n "${SLURM_JOB_GPUS:-}${CUDA_VISIBLE_DEVICES:-}" ] || exit 0
out=$(/usr/bin/wattson job begin 2>&1) || logger -t wattson -- "job ${SLURM_JOB_ID:-?}: $out"
exit 0
