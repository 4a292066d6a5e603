#!/usr/bin/env python3
"""For scripts/real-gpu-check: what read_only_check's CSV shows of each GPU's counter and power
readings.

  real-gpu-counter.py CSV [LOAD_LOG]

Per GPU: the counter's step period (a least-squares line through the steps, each at the middle
of the window that saw it, numbered by the median gap) and the steps missed; how often the power
reading changes; which mean of the counter's power the reading is (mean absolute difference for
averaging windows and lags); and, with LOAD_LOG (the lines `phase NAME at NS` and `done at NS` of
scripts/gpu-load.py), per load phase inside the CSV's span, the reading against the counter's
mean over the 1 s ending 50 ms before it (the phase's first 1.2 s left out).
"""
import bisect
import csv
import statistics as st
import sys


def main():
    gpus = {}
    for row in csv.DictReader(open(sys.argv[1])):
        g = gpus.setdefault(row["gpu"], {"counter": [], "power": []})
        if row["kind"] == "counter":
            g["counter"].append((int(row["t_ns"]) - int(row["window_ns"]) / 2, int(row["value"])))
        else:
            g["power"].append((int(row["t_ns"]), int(row["value"])))
    phases = []
    if len(sys.argv) > 2:
        for line in open(sys.argv[2]):
            words = line.split()
            if len(words) >= 3 and words[0] in ("phase", "done") and words[-2] == "at":
                phases.append((words[1] if words[0] == "phase" else "after the load", int(words[-1])))
    for uuid, g in gpus.items():
        describe(uuid, g["counter"], g["power"], phases)


def describe(uuid, steps, power, phases):
    times = [t for t, _ in steps]
    gaps = [b - a for a, b in zip(times, times[1:])]
    typical = st.median(gaps)
    index = [0]
    for gap in gaps:
        index.append(index[-1] + max(1, round(gap / typical)))
    mi, mt = st.mean(index), st.mean(times)
    period = sum((i - mi) * (t - mt) for i, t in zip(index, times)) / sum((i - mi) ** 2 for i in index)
    missed = index[-1] + 1 - len(steps)
    print(f"{uuid}: {len(steps)} steps over {(times[-1] - times[0]) / 1e9:.1f} s, period {period / 1e6:.3f} ms, "
          f"{missed} missed")

    def energy(t):
        k = bisect.bisect_right(times, t)
        (t0, e0), (t1, e1) = steps[k - 1], steps[k]
        return e0 + (e1 - e0) * (t - t0) / (t1 - t0)

    def mean_power(t, window, lag):
        a, b = t - (window + lag) * 1e9, t - lag * 1e9
        return (energy(b) - energy(a)) / window if times[0] < a and b < times[-1] else None

    changes, last = [], None
    for t, mw in power:
        if last is not None and mw != last[1]:
            changes.append((t - last[0]) / 1e6)
        if last is None or mw != last[1]:
            last = (t, mw)
    if changes:
        print(f"  power reading changes every {st.median(changes):.1f} ms (median)")
    else:
        print("  power reading never changed")
    fits = []
    for window in (0.1, 0.5, 1.0, 2.0):
        for lag in (0.0, 0.05, 0.1, 0.2):
            diffs = [abs(mw - m) for t, mw in power if (m := mean_power(t, window, lag)) is not None]
            fits.append((st.mean(diffs) / 1e3, window, lag))
    fits.sort()
    print("  reading against the counter's mean over W s ending L s before it, mean |difference|: "
          + ", ".join(f"W {w} L {lag}: {d:.1f} W" for d, w, lag in fits[:3]))
    for (name, start), (_, end) in zip(phases, phases[1:]):
        diffs = [(mw - m) / 1e3 for t, mw in power
                 if start + 1.2e9 <= t < end and (m := mean_power(t, 1.0, 0.05)) is not None]
        if diffs:
            print(f"  {name}: {len(diffs)} readings, difference mean {st.mean(diffs):.1f} W, "
                  f"largest {max(map(abs, diffs)):.1f} W")


if __name__ == "__main__":
    main()
