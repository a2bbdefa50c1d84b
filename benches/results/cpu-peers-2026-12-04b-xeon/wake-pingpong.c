#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <time.h>
#include <stdlib.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e6+t.tv_nsec*1e-3;}
atomic_long epoch; atomic_long seen; _Atomic double topen; double lat[10000];
void* helper(void*a){ long e=0; int k=0; while(k<2000){ while(atomic_load(&epoch)==e) __builtin_ia32_pause(); e=atomic_load(&epoch); lat[k++]=now()-topen; atomic_store(&seen,e);} return 0;}
int main(){ pthread_t t; pthread_create(&t,0,helper,0);
  for(int k=0;k<2000;k++){ double w=now(); while(now()-w<300); topen=now(); atomic_fetch_add(&epoch,1); while(atomic_load(&seen)!=k+1); }
  pthread_join(t,0); 
  int c(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;} qsort(lat,2000,8,c);
  printf("latency us: median %.2f p90 %.2f p99 %.2f\n",lat[1000],lat[1800],lat[1980]);}
