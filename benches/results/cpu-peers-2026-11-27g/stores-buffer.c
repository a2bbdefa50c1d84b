#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <immintrin.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e6+t.tv_nsec/1e3;}
static float* al(size_t n){void*p; posix_memalign(&p,2<<20,n*4); madvise(p,n*4,MADV_HUGEPAGE); memset(p,0,n*4); return p;}
size_t N; int BUF;
float *A,*B,*C; double *src,*dst; size_t nc;
float buf[8192] __attribute__((aligned(64)));
void nt(){ for(size_t i=0;i<N;i+=16){ __m512 v=_mm512_add_ps(_mm512_load_ps(A+i),_mm512_load_ps(B+i)); _mm512_stream_ps(C+i,v);} _mm_sfence(); }
void nt16(){ for(size_t i=0;i<N;i+=16){ __m512 v=_mm512_add_ps(_mm512_load_ps(A+i),_mm512_load_ps(B+i)); _mm512_store_ps(buf,v); for(int k=0;k<16;k+=4) _mm_stream_si128((__m128i*)(C+i+k),_mm_load_si128((__m128i*)(buf+k)));} _mm_sfence(); }
void viabuf(){ for(size_t b=0;b<N;b+=BUF){ for(int i=0;i<BUF;i++) buf[i]=A[b+i]+B[b+i]; for(int k=0;k<BUF;k+=4) _mm_stream_si128((__m128i*)(C+b+k),_mm_load_si128((__m128i*)(buf+k)));} _mm_sfence(); }
void viabuf64(){ for(size_t b=0;b<N;b+=BUF){ for(int i=0;i<BUF;i++) buf[i]=A[b+i]+B[b+i]; for(int k=0;k<BUF;k+=16) _mm512_stream_ps(C+b+k,_mm512_load_ps(buf+k));} _mm_sfence(); }
int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
double tm(void(*f)(), int between){ double r[21]; for(int k=0;k<21;k++){ if(between){memcpy(dst,src,nc*8); f();} double s=now(); f(); r[k]=now()-s;} qsort(r,21,8,cmp); return r[10]; }
int main(int c,char**v){ N=(size_t)atoi(v[1])*atoi(v[1]); A=al(N);B=al(N);C=al(N); for(size_t i=0;i<N;i++){A[i]=i;B[i]=1;}
 nc=N*3/2; src=(double*)al(nc*2); dst=(double*)al(nc*2);
 for(int rep=0;rep<3;rep++){ printf("nt %.0f nt16 %.0f ", tm(nt,1),tm(nt16,1)); BUF=256; printf("buf256 %.0f / %.0f ", tm(viabuf,1), tm(viabuf64,1)); BUF=2048; printf("buf2048 %.0f / %.0f\n", tm(viabuf,1), tm(viabuf64,1));}}
