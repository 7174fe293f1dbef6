// walk.go - a Go program walking one large slice at random, for `hugetune bench
// programs`: the slice lives in the Go runtime's own heap arenas (its own
// mmaps; the runtime makes its own system calls, so a preload cannot enter and
// a plan is applied from outside). The same dependent xorshift walk as
// mmap_walk.c. Usage: walk MIB STEPS; prints one line that depends only on
// the arguments.
package main

import (
	"fmt"
	"os"
	"strconv"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: walk MIB STEPS")
		os.Exit(2)
	}
	mib, err1 := strconv.ParseUint(os.Args[1], 10, 64)
	steps, err2 := strconv.ParseUint(os.Args[2], 10, 64)
	if err1 != nil || err2 != nil || mib == 0 {
		fmt.Fprintln(os.Stderr, "walk: MIB (positive) and STEPS must be numbers")
		os.Exit(2)
	}
	n := (mib << 20) / 8
	buf := make([]uint64, n)
	for i := range buf {
		buf[i] = uint64(i) * 0x9e3779b97f4a7c15
	}
	x, sum := uint64(88172645463325252), uint64(0)
	for s := uint64(0); s < steps; s++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		i := (x ^ sum) % n
		sum += buf[i]
		buf[i] = sum
	}
	fmt.Printf("walk mib=%d steps=%d checksum=%x\n", mib, steps, sum)
}
