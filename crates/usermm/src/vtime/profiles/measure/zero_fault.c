#include <sys/mman.h>
int main(){ size_t sz=256ul<<20; for(int i=0;i<20;i++){char*q=mmap(0,sz,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0); madvise(q,sz,MADV_NOHUGEPAGE); volatile char s=0; for(size_t o=0;o<sz;o+=4096) s+=q[o]; munmap(q,sz);} }
