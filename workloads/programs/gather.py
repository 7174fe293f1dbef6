# gather.py - python3 with numpy doing random gathers over one large array, for
# `hugetune bench programs` and crates/hugetune/tests/real_programs.rs. The
# array (int64, MIB MiB) is numpy's own allocation (malloc through numpy's data
# allocator, an mmap'd chunk: heap-large); every batch gathers 1 Mi elements at
# random indices, so each element read is a TLB miss on 4 KB pages once the
# array is much larger than the TLB's reach.
#
# Usage: python3 gather.py MIB STEPS   (STEPS elements gathered in all).
# Prints one line that depends only on the arguments (a fixed seed), so a run
# under any page backing must print exactly what a plain run prints.
import sys

import numpy as np


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: gather.py MIB STEPS")
    mib, steps = int(sys.argv[1]), int(sys.argv[2])
    if mib <= 0 or steps < 0:
        sys.exit("gather.py: MIB must be positive and STEPS not negative")
    n = (mib << 20) // 8
    a = np.arange(n, dtype=np.int64) * 7 + 3
    rng = np.random.default_rng(42)
    batch = 1 << 20
    total = 0
    done = 0
    while done < steps:
        k = min(batch, steps - done)
        idx = rng.integers(0, n, size=k)
        total = (total + int(a[idx].sum())) % (1 << 64)
        done += k
    print(f"gather mib={mib} steps={steps} checksum={total:x}")


main()
