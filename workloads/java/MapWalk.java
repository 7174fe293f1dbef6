// MapWalk.java - a Java program walking a memory-mapped file at random (an
// index served with FileChannel.map, as search engines and databases on the
// JVM do), for the JVM tests: the file's pages are the JVM's `other` memory
// but not its heap, and -XX:+UseTransparentHugePages leaves them as they are.
// The same dependent xorshift walk as Walk.java, reads only. Usage: java
// MapWalk FILE MIB STEPS (FILE is written first, MIB MiB of it); prints one
// line that depends only on the arguments.
import java.io.RandomAccessFile;
import java.nio.ByteBuffer;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;

public class MapWalk {
    public static void main(String[] args) throws Exception {
        if (args.length != 3) {
            System.err.println("usage: MapWalk FILE MIB STEPS");
            System.exit(2);
        }
        long mib = Long.parseLong(args[1]);
        long steps = Long.parseLong(args[2]);
        long bytes = mib << 20;
        long n = bytes / 8;
        try (RandomAccessFile f = new RandomAccessFile(args[0], "rw")) {
            f.setLength(bytes);
            FileChannel ch = f.getChannel();
            ByteBuffer chunk = ByteBuffer.allocate(1 << 20);
            for (long at = 0; at < bytes; at += chunk.capacity()) {
                chunk.clear();
                for (long i = at / 8; i < (at + chunk.capacity()) / 8; i++) {
                    chunk.putLong(i * 0x9e3779b97f4a7c15L);
                }
                chunk.flip();
                ch.write(chunk, at);
            }
            MappedByteBuffer buf = ch.map(FileChannel.MapMode.READ_ONLY, 0, bytes);
            long x = 88172645463325252L, sum = 0;
            for (long s = 0; s < steps; s++) {
                x ^= x << 13;
                x ^= x >>> 7;
                x ^= x << 17;
                long i = Long.remainderUnsigned(x ^ sum, n);
                sum += buf.getLong((int) (i * 8));
            }
            System.out.printf("mapwalk mib=%d steps=%d checksum=%x%n", mib, steps, sum);
        }
    }
}
