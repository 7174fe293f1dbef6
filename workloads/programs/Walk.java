// Walk.java - a Java program walking one large long[] at random, for `hugetune
// bench programs`: the array lives in the JVM's heap, which the JVM maps
// itself (a plan reaches it through the JVM's own huge page flags). The same
// dependent xorshift walk as mmap_walk.c. Usage: java -Xmx... Walk MIB STEPS;
// prints one line that depends only on the arguments.
public class Walk {
    public static void main(String[] args) {
        if (args.length != 2) {
            System.err.println("usage: Walk MIB STEPS");
            System.exit(2);
        }
        long mib = Long.parseLong(args[0]);
        long steps = Long.parseLong(args[1]);
        int n = (int) ((mib << 20) / 8);
        long[] buf = new long[n];
        for (int i = 0; i < n; i++) {
            buf[i] = i * 0x9e3779b97f4a7c15L;
        }
        long x = 88172645463325252L, sum = 0;
        for (long s = 0; s < steps; s++) {
            x ^= x << 13;
            x ^= x >>> 7;
            x ^= x << 17;
            int i = (int) Long.remainderUnsigned(x ^ sum, n);
            sum += buf[i];
            buf[i] = sum;
        }
        System.out.printf("walk mib=%d steps=%d checksum=%x%n", mib, steps, sum);
    }
}
