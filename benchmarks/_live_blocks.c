/* Allocation tracker for benchmarks/live_blocks.py (LD_PRELOAD): records every live heap
 * block's size, allocating thread, the pass it was allocated in and its call stack, and dumps
 * the blocks of chosen passes. A diagnosis tool, slow (a backtrace per allocation). */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <pthread.h>
#include <execinfo.h>
#include <dlfcn.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <errno.h>

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

#define DEPTH 12
#define CAP (1u << 23)
typedef struct { uintptr_t p; size_t size; int tid; int epoch; void *bt[DEPTH]; } Ent;
static Ent *tab;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static __thread int inside;
static volatile int epoch_now;
static volatile int enabled;

static inline uint32_t h(uintptr_t p) { p >>= 4; p ^= p >> 17; p *= 0x9E3779B97F4A7C15ull; return (uint32_t)(p >> 40) & (CAP - 1); }

static void add(void *ptr, size_t size) {
  if (!ptr || !enabled || inside) return;
  inside = 1;
  void *bt[DEPTH + 2]; int n = backtrace(bt, DEPTH + 2);
  int tid = (int)syscall(SYS_gettid);
  pthread_mutex_lock(&mu);
  uint32_t i = h((uintptr_t)ptr);
  while (tab[i].p && tab[i].p != 1) i = (i + 1) & (CAP - 1);
  Ent *e = &tab[i]; e->p = (uintptr_t)ptr; e->size = size; e->tid = tid; e->epoch = epoch_now;
  memset(e->bt, 0, sizeof e->bt);
  for (int k = 2; k < n && k - 2 < DEPTH; k++) e->bt[k - 2] = bt[k];
  pthread_mutex_unlock(&mu);
  inside = 0;
}
static void del(void *ptr) {
  if (!ptr || !tab) return;
  pthread_mutex_lock(&mu);
  uint32_t i = h((uintptr_t)ptr);
  while (tab[i].p) { if (tab[i].p == (uintptr_t)ptr) { tab[i].p = 1; break; } i = (i + 1) & (CAP - 1); }
  pthread_mutex_unlock(&mu);
}
void *malloc(size_t s) { void *p = __libc_malloc(s); add(p, s); return p; }
void free(void *p) { del(p); __libc_free(p); }
void *calloc(size_t a, size_t b) { void *p = __libc_calloc(a, b); add(p, a * b); return p; }
void *realloc(void *o, size_t s) { del(o); void *p = __libc_realloc(o, s); add(p, s); return p; }
void *memalign(size_t a, size_t s) { void *p = __libc_memalign(a, s); add(p, s); return p; }
void *aligned_alloc(size_t a, size_t s) { void *p = __libc_memalign(a, s); add(p, s); return p; }
int posix_memalign(void **out, size_t a, size_t s) { void *p = __libc_memalign(a, s); if (!p) return ENOMEM; add(p, s); *out = p; return 0; }

void lb_start(void) {
  if (!tab) { tab = mmap(NULL, sizeof(Ent) * (size_t)CAP, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0); }
  void *bt[4]; backtrace(bt, 4);  /* loads libgcc_s before tracking */
  enabled = 1;
}
void lb_pass(int e) { epoch_now = e; }
/* live blocks allocated from pass 1 on by threads other than the main one */
void lb_dump(const char *path) {
  inside = 1;
  FILE *f = fopen(path, "w");
  pthread_mutex_lock(&mu);
  for (uint32_t i = 0; i < CAP; i++) {
    Ent *e = &tab[i]; if (e->p <= 1 || e->epoch < 1 || e->tid == getpid()) continue;
    fprintf(f, "%d %d %zu %lx", e->tid, e->epoch, e->size, (unsigned long)e->p);
    for (int k = 0; k < DEPTH && e->bt[k]; k++) {
      Dl_info d; if (dladdr(e->bt[k], &d) && d.dli_fname) {
        const char *b = strrchr(d.dli_fname, '/'); b = b ? b + 1 : d.dli_fname;
        fprintf(f, " %s:%s+%lx", b, d.dli_sname ? d.dli_sname : "?", (unsigned long)((char *)e->bt[k] - (char *)(d.dli_saddr ? d.dli_saddr : d.dli_fbase)));
      } else fprintf(f, " %p", e->bt[k]);
    }
    fputc('\n', f);
  }
  pthread_mutex_unlock(&mu);
  fclose(f);
  inside = 0;
}
