#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static inline float hsum(__m256 v){__m128 a=_mm_add_ps(_mm256_castps256_ps128(v),_mm256_extractf128_ps(v,1));a=_mm_hadd_ps(a,a);a=_mm_hadd_ps(a,a);return _mm_cvtss_f32(a);}
static void dot8(const float*a,size_t s,const float*x,size_t n,float*out,int pf,const float*next){
  __m256 s0=_mm256_setzero_ps(),s1=s0,s2=s0,s3=s0,s4=s0,s5=s0,s6=s0,s7=s0;
  for(size_t j=0;j<n;j+=8){__m256 xv=_mm256_loadu_ps(x+j);
    s0=_mm256_fmadd_ps(_mm256_loadu_ps(a+j),xv,s0);s1=_mm256_fmadd_ps(_mm256_loadu_ps(a+s+j),xv,s1);
    s2=_mm256_fmadd_ps(_mm256_loadu_ps(a+2*s+j),xv,s2);s3=_mm256_fmadd_ps(_mm256_loadu_ps(a+3*s+j),xv,s3);
    s4=_mm256_fmadd_ps(_mm256_loadu_ps(a+4*s+j),xv,s4);s5=_mm256_fmadd_ps(_mm256_loadu_ps(a+5*s+j),xv,s5);
    s6=_mm256_fmadd_ps(_mm256_loadu_ps(a+6*s+j),xv,s6);s7=_mm256_fmadd_ps(_mm256_loadu_ps(a+7*s+j),xv,s7);
    if(pf && (j&15)==0) for(int r=0;r<pf;r++) _mm_prefetch((const char*)(next+r*s+j),HINT);}
  out[0]=hsum(s0);out[1]=hsum(s1);out[2]=hsum(s2);out[3]=hsum(s3);out[4]=hsum(s4);out[5]=hsum(s5);out[6]=hsum(s6);out[7]=hsum(s7);
}
static void add8(float*d,const float*a,size_t s,const float*c,size_t n,int pf,const float*next){
  __m256 c0=_mm256_set1_ps(c[0]),c1=_mm256_set1_ps(c[1]),c2=_mm256_set1_ps(c[2]),c3=_mm256_set1_ps(c[3]),
         c4=_mm256_set1_ps(c[4]),c5=_mm256_set1_ps(c[5]),c6=_mm256_set1_ps(c[6]),c7=_mm256_set1_ps(c[7]);
  for(size_t j=0;j<n;j+=8){
    __m256 v=_mm256_loadu_ps(d+j);
    v=_mm256_fmadd_ps(c0,_mm256_loadu_ps(a+j),v);v=_mm256_fmadd_ps(c1,_mm256_loadu_ps(a+s+j),v);
    v=_mm256_fmadd_ps(c2,_mm256_loadu_ps(a+2*s+j),v);v=_mm256_fmadd_ps(c3,_mm256_loadu_ps(a+3*s+j),v);
    v=_mm256_fmadd_ps(c4,_mm256_loadu_ps(a+4*s+j),v);v=_mm256_fmadd_ps(c5,_mm256_loadu_ps(a+5*s+j),v);
    v=_mm256_fmadd_ps(c6,_mm256_loadu_ps(a+6*s+j),v);v=_mm256_fmadd_ps(c7,_mm256_loadu_ps(a+7*s+j),v);
    _mm256_storeu_ps(d+j,v);
    if(pf && (j&15)==0) for(int r=0;r<pf;r++) _mm_prefetch((const char*)(next+r*s+j),HINT);
  }
}
size_t M,N; float*A,*x,*t,*y; float*part[2];
// B rows a block; pf0 rows of the next block pulled in pass 1 (first rows), pf1 in pass 2 (the rows after)
static void fused(int B,int pf0,int pf1){
  #pragma omp parallel num_threads(2)
  { int me=omp_get_thread_num(); size_t r0=me*M/2,r1=(me+1)*M/2; float*d=part[me]; memset(d,0,N*4);
    for(size_t r=r0;r<r1;r+=B){
      const float*next = (r+B<r1)? A+(r+B)*N : 0;
      for(int g=0;g<B;g+=8) dot8(A+(r+g)*N,N,x,N,t+r+g,next?pf0:0,next?next+(size_t)g*N:0);
      for(int g=0;g<B;g+=8) add8(d,A+(r+g)*N,N,t+r+g,N,next?pf1:0,next?next+(size_t)(g+pf0)*N:0);
    }
  }
  for(size_t j=0;j<N;j++)y[j]=part[0][j]+part[1][j];
}

// dot of the 8 rows at an (next block, from memory) with x into out, and d += sum c[r]*a[r] (this block, from L2), one loop
static void skew8(const float*an,const float*a,size_t s,const float*x,float*out,const float*c,float*d,size_t n){
  __m256 s0=_mm256_setzero_ps(),s1=s0,s2=s0,s3=s0,s4=s0,s5=s0,s6=s0,s7=s0;
  __m256 c0=_mm256_set1_ps(c[0]),c1=_mm256_set1_ps(c[1]),c2=_mm256_set1_ps(c[2]),c3=_mm256_set1_ps(c[3]),
         c4=_mm256_set1_ps(c[4]),c5=_mm256_set1_ps(c[5]),c6=_mm256_set1_ps(c[6]),c7=_mm256_set1_ps(c[7]);
  for(size_t j=0;j<n;j+=8){__m256 xv=_mm256_loadu_ps(x+j);
    s0=_mm256_fmadd_ps(_mm256_loadu_ps(an+j),xv,s0);s1=_mm256_fmadd_ps(_mm256_loadu_ps(an+s+j),xv,s1);
    s2=_mm256_fmadd_ps(_mm256_loadu_ps(an+2*s+j),xv,s2);s3=_mm256_fmadd_ps(_mm256_loadu_ps(an+3*s+j),xv,s3);
    s4=_mm256_fmadd_ps(_mm256_loadu_ps(an+4*s+j),xv,s4);s5=_mm256_fmadd_ps(_mm256_loadu_ps(an+5*s+j),xv,s5);
    s6=_mm256_fmadd_ps(_mm256_loadu_ps(an+6*s+j),xv,s6);s7=_mm256_fmadd_ps(_mm256_loadu_ps(an+7*s+j),xv,s7);
    __m256 v=_mm256_loadu_ps(d+j);
    v=_mm256_fmadd_ps(c0,_mm256_loadu_ps(a+j),v);v=_mm256_fmadd_ps(c1,_mm256_loadu_ps(a+s+j),v);
    v=_mm256_fmadd_ps(c2,_mm256_loadu_ps(a+2*s+j),v);v=_mm256_fmadd_ps(c3,_mm256_loadu_ps(a+3*s+j),v);
    v=_mm256_fmadd_ps(c4,_mm256_loadu_ps(a+4*s+j),v);v=_mm256_fmadd_ps(c5,_mm256_loadu_ps(a+5*s+j),v);
    v=_mm256_fmadd_ps(c6,_mm256_loadu_ps(a+6*s+j),v);v=_mm256_fmadd_ps(c7,_mm256_loadu_ps(a+7*s+j),v);
    _mm256_storeu_ps(d+j,v);}
  out[0]=hsum(s0);out[1]=hsum(s1);out[2]=hsum(s2);out[3]=hsum(s3);out[4]=hsum(s4);out[5]=hsum(s5);out[6]=hsum(s6);out[7]=hsum(s7);
}
static void skewed(int lag){
  #pragma omp parallel num_threads(2)
  { int me=omp_get_thread_num(); size_t r0=me*M/2,r1=(me+1)*M/2; float*d=part[me]; memset(d,0,N*4);
    size_t L=8*lag;
    for(size_t r=r0;r<r0+L;r+=8) dot8(A+r*N,N,x,N,t+r,0,0);
    for(size_t r=r0;r+L<r1;r+=8) skew8(A+(r+L)*N,A+r*N,N,x,t+r+L,t+r,d,N);
    for(size_t r=r1-L;r<r1;r+=8) add8(d,A+r*N,N,t+r,N,0,0);
  }
  for(size_t j=0;j<N;j++)y[j]=part[0][j]+part[1][j];
}
static void unfused(){
  #pragma omp parallel num_threads(2)
  { int me=omp_get_thread_num(); size_t r0=me*M/2,r1=(me+1)*M/2; for(size_t r=r0;r<r1;r+=8) dot8(A+r*N,N,x,N,t+r,0,0);}
  #pragma omp parallel num_threads(2)
  { int me=omp_get_thread_num(); size_t r0=me*M/2,r1=(me+1)*M/2; float*d=part[me]; memset(d,0,N*4);
    for(size_t r=r0;r<r1;r+=8) add8(d,A+r*N,N,t+r,N,0,0);}
  for(size_t j=0;j<N;j++)y[j]=part[0][j]+part[1][j];
}
int main(int argc,char**argv){ M=N=argc>0?8192:0; if(getenv("NN")) M=N=atoi(getenv("NN")); A=aligned_alloc(64,M*N*4); x=malloc(N*4);t=malloc(M*4);y=malloc(N*4);part[0]=aligned_alloc(64,N*4);part[1]=aligned_alloc(64,N*4);
  #pragma omp parallel for num_threads(2)
  for(size_t i=0;i<M*N;i++)A[i]=(i%13)*1e-3f;
  for(size_t i=0;i<N;i++)x[i]=1;
  int rounds=atoi(argv[1]); int nv=(argc-2)/2; int pf0[16],pf1[16];
  for(int v=0;v<nv;v++){pf0[v]=atoi(argv[2+2*v]);pf1[v]=atoi(argv[3+2*v]);}
  for(int k=0;k<rounds;k++){ double tt[17];
    for(int q=0;q<=nv;q++){ int v=(q+k)%(nv+1); double t0=now(); if(v==nv)unfused(); else if(pf0[v]<0) skewed(pf1[v]); else fused(8,pf0[v],pf1[v]); tt[v]=now()-t0;}
    printf("%.3f",tt[nv]*1e3); for(int v=0;v<nv;v++)printf(" %.4f",tt[nv]/tt[v]); printf("\n");
  }
}
