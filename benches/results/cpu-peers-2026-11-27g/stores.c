#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <immintrin.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e6+t.tv_nsec/1e3;}
static float* al(size_t n){void*p; posix_memalign(&p,2<<20,n*4); madvise(p,n*4,MADV_HUGEPAGE); memset(p,0,n*4); return p;}
size_t N;
float *A,*B,*C; double *src,*dst; size_t nc;
void nt(){ for(size_t i=0;i<N;i+=16){ __m512 v=_mm512_add_ps(_mm512_load_ps(A+i),_mm512_load_ps(B+i)); _mm512_stream_ps(C+i,v);} _mm_sfence(); }
void nt32(){ for(size_t i=0;i<N;i+=8){ __m256 v=_mm256_add_ps(_mm256_load_ps(A+i),_mm256_load_ps(B+i)); _mm256_stream_ps(C+i,v);} _mm_sfence(); }
void nt16(){ for(size_t i=0;i<N;i+=4){ __m128 v=_mm_add_ps(_mm_load_ps(A+i),_mm_load_ps(B+i)); _mm_stream_ps(C+i,v);} _mm_sfence(); }
void plain(){ for(size_t i=0;i<N;i+=16){ __m512 v=_mm512_add_ps(_mm512_load_ps(A+i),_mm512_load_ps(B+i)); _mm512_store_ps(C+i,v);} }
void cp16(){ for(size_t i=0;i<nc*2;i+=2) _mm_stream_si128((__m128i*)(dst+i),_mm_load_si128((__m128i*)(src+i))); _mm_sfence();}
void cp64(){ for(size_t i=0;i<nc*2;i+=8) _mm512_stream_pd(dst+i,_mm512_load_pd(src+i)); _mm_sfence();}
int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
double tm(void(*f)(), int between){ double r[21]; for(int k=0;k<21;k++){ if(between){memcpy(dst,src,nc*8); f();} double s=now(); f(); r[k]=now()-s;} qsort(r,21,8,cmp); return r[10]; }
int main(int c,char**v){ N=(size_t)atoi(v[1])*atoi(v[1]); A=al(N);B=al(N);C=al(N); for(size_t i=0;i<N;i++){A[i]=i;B[i]=1;}
 nc=N*3/4; src=(double*)al(nc*2); dst=(double*)al(nc*2);
 for(int rep=0;rep<3;rep++){ printf("nt64 %.0f nt32 %.0f nt16 %.0f plain %.0f | copy16 %.0f copy64 %.0f\n", tm(nt,1),tm(nt32,1),tm(nt16,1),tm(plain,1),tm(cp16,0),tm(cp64,0));}}
