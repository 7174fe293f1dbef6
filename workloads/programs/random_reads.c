/* random_reads.c - a plain C program for docs/attach.md and
 * docs/static-programs.md: fills N MiB with malloc, then reads it at random
 * (independent reads: a xorshift index modulo the count), prints one bit of the
 * sum. Build it statically to test programs the runtime library cannot enter:
 * gcc -O2 -static -o random-reads random_reads.c; ./random-reads 512 20000000 */
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
int main(int argc,char**argv){ size_t mb=argc>1?atol(argv[1]):512; long n=argc>2?atol(argv[2]):20000000;
 size_t len=mb<<20; uint64_t *a=malloc(len); size_t cnt=len/8; for(size_t i=0;i<cnt;i++)a[i]=i*2654435761u;
 uint64_t x=1,s=0; for(long i=0;i<n;i++){x^=x<<13;x^=x>>7;x^=x<<17; s+=a[x%cnt];} printf("%lu\n",(unsigned long)(s&1)); return 0;}
