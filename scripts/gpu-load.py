#!/usr/bin/env python3
"""A GPU load in phases, for scripts/real-gpu-check: PHASE:SECONDS[:ON_MS:OFF_MS] ...

`idle:5 full:10 pulse:10:500:500` idles 5 s, runs bf16 matrix products for 10 s, then for 10 s
alternates 500 ms of products with 500 ms idle. Prints each phase's start (ns since the epoch).
"""
import sys
import time

import torch


def busy(a, b, until):
    while time.time() < until:
        for _ in range(4):
            a @ b
        torch.cuda.synchronize()


def main():
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    for phase in sys.argv[1:]:
        kind, seconds, *pulse = phase.split(":")
        print(f"phase {phase} at {time.time_ns()}", flush=True)
        end = time.time() + float(seconds)
        if kind == "idle":
            time.sleep(float(seconds))
        elif kind == "full":
            busy(a, b, end)
        elif kind == "pulse":
            on, off = (float(x) / 1e3 for x in pulse)
            while time.time() < end:
                busy(a, b, min(end, time.time() + on))
                time.sleep(max(0.0, min(off, end - time.time())))
        else:
            sys.exit(f"unknown phase {kind}")
    print(f"done at {time.time_ns()}", flush=True)


if __name__ == "__main__":
    main()
