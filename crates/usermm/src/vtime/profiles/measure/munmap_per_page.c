#include <sys/mman.h>
#include <stdio.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(){ size_t sz=(size_t)2<<30; double tot=0; size_t pages=0; for(int r=0;r<8;r++){ char*p=mmap(0,sz,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0); madvise(p,sz,MADV_NOHUGEPAGE); for(size_t i=0;i<sz;i+=4096)p[i]=1; double t1=now(); munmap(p,sz); double t2=now(); tot+=t2-t1; pages+=sz/4096;} printf("munmap %.1f ns/page over %zu pages\n",tot/pages*1e9,pages);}
