#!/usr/bin/env python3
"""One decode step's kernels from an Nsight Compute CSV (`ncu --csv --page raw --metrics
gpu__time_duration.sum`, tools/gpu/profile-decode.sh): the step is the launches between the
last two embedding kernels (every step starts with one), grouped by kernel name — launches,
summed and mean duration, grid — largest first. The sum is the step's kernel time without the
gaps between kernels; the gap to the step's measured time is launch latency and dependencies."""
import collections
import csv
import lzma
import re
import sys


def rows_of(path):
    opener = lzma.open if path.endswith('.xz') else open
    with opener(path, 'rt', errors='replace') as f:
        lines = [l for l in f if l.startswith('"')]
    reader = csv.reader(lines)
    hdr = next(reader)
    units = next(reader)
    k, t, g = hdr.index('Kernel Name'), hdr.index('gpu__time_duration.sum'), hdr.index('Grid Size')
    scale = {'nsecond': 1e-3, 'ns': 1e-3, 'usecond': 1.0, 'us': 1.0, 'msecond': 1e3, 'ms': 1e3}.get(units[t], 1.0)
    out = []
    for r in reader:
        try:
            out.append((r[k], float(r[t].replace(',', '')) * scale, r[g]))
        except (ValueError, IndexError):
            pass
    return out


def short(name):
    name = name.replace('(anonymous namespace)::', '')
    name = re.sub(r'^void ', '', name)
    name = re.sub(r'[<(].*', '', name)
    return name.split('::')[-1].strip()


def main():
    rows = rows_of(sys.argv[1])
    starts = [i for i, (n, _, _) in enumerate(rows) if 'embed_kernel' in n]
    print(f'{len(rows)} kernels profiled; step starts (embedding launches) at {starts[-6:]}')
    if len(starts) < 2:
        print('fewer than two embedding launches: no whole step in the profile')
        return 1
    a, b = starts[-2], starts[-1]
    step = rows[a:b]
    total = sum(t for _, t, _ in step)
    print(f'one step: {len(step)} kernels, {total:.1f} us of kernel time\n')
    agg = collections.OrderedDict()
    for n, t, g in step:
        e = agg.setdefault(short(n), [0, 0.0, set()])
        e[0] += 1
        e[1] += t
        e[2].add(g)
    print('| kernel | launches | us | share | mean us | grids |')
    print('|---|---|---|---|---|---|')
    for name, (c, t, grids) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
        print(f'| {name} | {c} | {t:.1f} | {100 * t / total:.1f}% | {t / c:.2f} | {", ".join(sorted(grids)[:3])} |')
    return 0


if __name__ == '__main__':
    sys.exit(main())
