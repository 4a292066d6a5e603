#!/usr/bin/env python3
"""For scripts/real-gpu-check: a job's GPU energy as wattsond recorded it, against the counter
read every few microseconds by read_only_check over the same instants.

  real-gpu-compare.py ACCT_JSON JOB_CSV

The reference counter at an instant: the steps seen in JOB_CSV (each at the middle of the window
that saw it), the step in progress at the instant interpolated linearly. Prints per GPU the
recorded energy, the reference, their difference, and one step's energy for scale.
"""
import bisect
import csv
import json
import sys


def main():
    jobs = json.load(open(sys.argv[1]))["jobs"]
    steps = {}
    for row in csv.DictReader(open(sys.argv[2])):
        if row["kind"] == "counter":
            at = int(row["t_ns"]) - int(row["window_ns"]) / 2
            steps.setdefault(row["gpu"], []).append((at, int(row["value"])))
    for job in jobs:
        for gpu in job["gpus"]:
            seen = steps.get(gpu["uuid"], [])
            times = [t for t, _ in seen]

            def counter(t):
                k = bisect.bisect_right(times, t)
                (t0, e0), (t1, e1) = seen[k - 1], seen[k]
                return e0 + (e1 - e0) * (t - t0) / (t1 - t0)

            begin, end = gpu["first_reading_ns"], gpu["last_reading_ns"]
            if not times or begin <= times[0] or end >= times[-1]:
                print(f"job {job['id']} GPU {gpu['uuid']}: not within the steps the check saw")
                continue
            reference = (counter(end) - counter(begin)) / 1e3
            step = (seen[-1][1] - seen[0][1]) / max(1, len(seen) - 1) / 1e3
            recorded = gpu["energy_j"]
            print(
                f"job {job['id']} GPU {gpu['uuid']}: {(end - begin) / 1e9:.3f} s, recorded {recorded:.3f} J, "
                f"counter read alongside {reference:.3f} J, difference {recorded - reference:+.3f} J "
                f"({(recorded / reference - 1) * 100:+.4f}%); one step is {step:.3f} J on average"
            )


if __name__ == "__main__":
    main()
