#define _GNU_SOURCE
#include <sys/mman.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
#define REP 7
int main(){
  double r[REP];
  // (a) memset bandwidth over 1 GiB, pre-faulted
  size_t sz=1ul<<30; char*p=mmap(0,sz,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS|MAP_POPULATE,-1,0);
  for(int i=0;i<REP;i++){double t=now(); memset(p,i,sz); r[i]=sz/(now()-t)/1e9;} qsort(r,REP,8,cmp);
  printf("memset_GBps median %.2f min %.2f max %.2f\n",r[REP/2],r[0],r[REP-1]);
  // (a') 4 KiB clears of distinct pages (like clear_page over fresh pages)
  for(int i=0;i<REP;i++){double t=now(); for(size_t o=0;o<sz;o+=4096) memset(p+o,i+1,4096); r[i]=sz/(now()-t)/1e9;} qsort(r,REP,8,cmp);
  printf("memset4k_GBps median %.2f min %.2f max %.2f\n",r[REP/2],r[0],r[REP-1]);
  munmap(p,sz);
  // (b) uncontended lock xadd
  volatile long x=0; long n=100000000;
  for(int i=0;i<REP;i++){double t=now(); for(long k=0;k<n;k++) __atomic_fetch_add(&x,1,__ATOMIC_SEQ_CST); r[i]=(now()-t)/n*1e9;} qsort(r,REP,8,cmp);
  printf("lock_xadd_ns median %.2f min %.2f max %.2f\n",r[REP/2],r[0],r[REP-1]);
  // (c) syscall
  n=2000000;
  for(int i=0;i<REP;i++){double t=now(); for(long k=0;k<n;k++) syscall(SYS_getppid); r[i]=(now()-t)/n*1e9;} qsort(r,REP,8,cmp);
  printf("syscall_ns median %.1f min %.1f max %.1f\n",r[REP/2],r[0],r[REP-1]);
  // (d) 4 KiB read fault on the zero page
  sz=256ul<<20;
  for(int i=0;i<REP;i++){char*q=mmap(0,sz,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0); madvise(q,sz,MADV_NOHUGEPAGE); volatile char s=0; double t=now(); for(size_t o=0;o<sz;o+=4096) s+=q[o]; r[i]=(now()-t)/(sz/4096)*1e9; munmap(q,sz);} qsort(r,REP,8,cmp);
  printf("zero_read_fault_ns median %.1f min %.1f max %.1f\n",r[REP/2],r[0],r[REP-1]);
  // (e) 4 KiB write fault of a fresh anonymous page (do_anonymous_page: allocate, clear,
  // charge, rmap, LRU), each repeat paired with a read fault over a mapping of its own just
  // before it, so that the difference of the pair is taken under the same conditions
  double w[REP],d[REP];
  for(int i=0;i<REP;i++){
    char*q=mmap(0,sz,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0); madvise(q,sz,MADV_NOHUGEPAGE); volatile char s=0; double t=now(); for(size_t o=0;o<sz;o+=4096) s+=q[o]; double rd=(now()-t)/(sz/4096)*1e9; munmap(q,sz);
    q=mmap(0,sz,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0); madvise(q,sz,MADV_NOHUGEPAGE); t=now(); for(size_t o=0;o<sz;o+=4096) q[o]=1; w[i]=(now()-t)/(sz/4096)*1e9; munmap(q,sz);
    d[i]=w[i]-rd;}
  qsort(w,REP,8,cmp); qsort(d,REP,8,cmp);
  printf("anon_write_fault_ns median %.1f min %.1f max %.1f\n",w[REP/2],w[0],w[REP-1]);
  printf("write_less_read_fault_ns median %.1f min %.1f max %.1f\n",d[REP/2],d[0],d[REP-1]);
}
