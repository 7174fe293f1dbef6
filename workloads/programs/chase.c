/* chase.c - a dependent random walk over N MiB (a power of two) for
 * docs/attach.md: each index depends on the value loaded before it, so every
 * TLB miss is on the critical path (the case huge pages help most). Build it
 * statically to test programs the runtime library cannot enter:
 * gcc -O2 -static -o chase-static chase.c; ./chase-static 512 20000000 */
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
int main(int argc,char**argv){ size_t mb=argc>1?atol(argv[1]):512; long n=argc>2?atol(argv[2]):20000000;
 size_t cnt=(mb<<20)/8, mask=cnt-1; uint64_t *a=malloc(cnt*8); for(size_t i=0;i<cnt;i++)a[i]=i*0x9E3779B97F4A7C15ull;
 uint64_t x=1; for(long i=0;i<n;i++){ x=(x^a[x&mask])*0xff51afd7ed558ccdull; x^=x>>29; } printf("%lu\n",(unsigned long)(x&0xffff)); return 0;}
