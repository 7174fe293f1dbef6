// Walk.java - a random walk over one large long[] (the JVM test program of
// crates/hugetune/tests/jvm.rs and the figures in docs/runtimes.md).
//
// Usage: java Walk MIB STEPS
//   MIB    size of the array in MiB (rounded down to a power of two of longs)
//   STEPS  dependent random reads (each index depends on the value read)
// Prints one checksum line, the same for the same arguments whatever backs
// the heap: the test compares it between plain and optimized runs.
public final class Walk {
    public static void main(String[] args) {
        if (args.length != 2) {
            System.err.println("usage: java Walk MIB STEPS");
            System.exit(2);
        }
        long mib = Long.parseLong(args[0]);
        long steps = Long.parseLong(args[1]);
        if (mib < 1 || mib > 8192 || steps < 0) {
            System.err.println("Walk: MIB must be 1..8192 and STEPS >= 0");
            System.exit(2);
        }
        int n = Integer.highestOneBit((int) Math.min(mib * 131072L, 1L << 30));
        long[] a = new long[n];
        for (int i = 0; i < n; i++)
            a[i] = i * 0x9E3779B97F4A7C15L;
        long mask = n - 1, x = 88172645463325252L, sum = 0;
        int i = 0;
        for (long s = 0; s < steps; s++) {
            x ^= x << 13;
            x ^= x >>> 7;
            x ^= x << 17;
            long v = a[i];
            sum += v;
            i = (int) ((x ^ v) & mask);
        }
        System.out.println("walk " + mib + " MiB " + steps + " steps checksum " + Long.toHexString(sum));
    }
}
