#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static float* alloc(size_t n){void*p;posix_memalign(&p,2<<20,n*4);madvise(p,n*4,MADV_HUGEPAGE);memset(p,1,n*4);return p;}
int main(int argc,char**argv){
  size_t n=(size_t)8192*8192; int pf=argc>1?atoi(argv[1]):0;
  float*a=alloc(n),*b=alloc(n),*c=alloc(n);
  for(int rep=0;rep<8;rep++){
    double t0=now();
    #pragma omp parallel
    { int t=omp_get_thread_num(),T=omp_get_num_threads(); size_t lo=n/T*t,hi=n/T*(t+1);
      for(size_t i=lo;i<hi;i+=16){ _mm512_stream_ps(c+i,_mm512_load_ps(b+i)); }
      _mm_sfence(); }
    double t1=now(); float s=0;
    #pragma omp parallel reduction(+:s)
    { int t=omp_get_thread_num(),T=omp_get_num_threads(); size_t lo=n/T*t,hi=n/T*(t+1);
      __m512 acc[8]; for(int k=0;k<8;k++)acc[k]=_mm512_setzero_ps();
      for(size_t i=lo;i<hi;i+=128){ if(pf) _mm_prefetch((char*)(a+i+pf),_MM_HINT_T1);
        for(int k=0;k<8;k++) acc[k]=_mm512_add_ps(acc[k],_mm512_load_ps(a+i+16*k)); }
      for(int k=1;k<8;k++)acc[0]=_mm512_add_ps(acc[0],acc[k]); s+=_mm512_reduce_add_ps(acc[0]); }
    double t2=now();
    // 8 streams of rows, like gemv with 8 rows
    size_t N=8192; float s2=0;
    #pragma omp parallel reduction(+:s2)
    { int t=omp_get_thread_num(),T=omp_get_num_threads(); size_t lo=N/T*t,hi=N/T*(t+1);
      for(size_t r=lo;r<hi;r+=8){ __m512 acc[8]; for(int k=0;k<8;k++)acc[k]=_mm512_setzero_ps();
        for(size_t j=0;j<N;j+=16){ __m512 x=_mm512_load_ps(b+j);
          for(int k=0;k<8;k++) acc[k]=_mm512_fmadd_ps(_mm512_load_ps(a+(r+k)*N+j),x,acc[k]);
          if(pf) for(int k=0;k<8;k+=1) if((j&15)==0) _mm_prefetch((char*)(a+(r+8+k)*N+j),_MM_HINT_T1);}
        for(int k=0;k<8;k++) s2+=_mm512_reduce_add_ps(acc[k]); } }
    double t3=now();
    printf("copy %.1f GB/s  sum %.1f GB/s  gemv8 %.1f GB/s (%.0f us) %g %g\n", 2*n*4/(t1-t0)/1e9, n*4/(t2-t1)/1e9, n*4/(t3-t2)/1e9,(t3-t2)*1e6, s,s2);
  }
}
