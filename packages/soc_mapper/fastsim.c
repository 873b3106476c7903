/* soc_mapper's compiled fitness path: COMB's decoder (decoder.py) and the schedule simulator (simulator.py),
   operation for operation, so that every float comes out bit-identical to the Python code, which stays the
   oracle (tests/test_soc_mapper/test_fast_fitness.py compares them). The Python loaders are in fastsim.py.

   Why the care with operation order: sums of floats are accumulated in the order the Python code adds them
   (including CPython's sum(), which is compensated from 3.12 on), ties are broken exactly as Python's stable
   sorts and strict comparisons break them, and the build disables FMA contraction. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  int32_t L, A, keep, neumaier;     /* neumaier: CPython >= 3.12 compensates sum() of floats */
  const double *lat, *latp, *power; /* L x A */
  const int32_t *pes;               /* L x A */
  const uint64_t *mask;             /* L: accelerators that can run the layer */
  const int32_t *pptr, *pidx;       /* predecessors (CSR), in w.preds order */
  const double *pbytes;
  const int32_t *sptr, *sidx;       /* successors (CSR), in w.succs order */
  const double *sbytes;
  const double *inv_bw;             /* A x A, s per byte */
  const int32_t *npe, *streams;     /* A */
} Tables;

enum { E_NOMEM = -1, E_UNPLACED = -2, E_INPUT = -3, E_NOACC = -4 };

/* --- sum() as CPython computes it: 0 + first item, then plain or Neumaier-compensated additions ------------- */
typedef struct { double hi, lo; int n; } PySum;

static inline void ps_add(PySum *s, double x, int neumaier) {
  if (s->n++ == 0) { s->hi = 0.0 + x; return; }
  if (!neumaier) { s->hi += x; return; }
  double t = s->hi + x;
  if (fabs(s->hi) >= fabs(x)) s->lo += (s->hi - t) + x;
  else s->lo += (x - t) + s->hi;
  s->hi = t;
}

static inline double ps_value(const PySum *s) {
  if (s->n == 0) return 0.0;
  double r = s->hi;
  if (s->lo != 0.0 && isfinite(s->lo)) r += s->lo;
  return r;
}

/* --- usage profiles (profile.py): segment k = [x[k], x[k+1]) with c[k] tasks on u[k] PEs ----------------- */
typedef struct { double *x; int32_t *c, *u; int n, cap, rc; } Prof;

static Prof EMPTY = {NULL, NULL, NULL, 0, 0, 1 << 30};

static Prof *prof_alloc(int cap) {
  Prof *p = malloc(sizeof(Prof));
  if (!p) return NULL;
  if (cap < 8) cap = 8;
  p->x = malloc(sizeof(double) * cap);
  p->c = malloc(sizeof(int32_t) * cap);
  p->u = malloc(sizeof(int32_t) * cap);
  p->n = 0;
  p->cap = cap;
  p->rc = 1;
  if (!p->x || !p->c || !p->u) {
    free(p->x); free(p->c); free(p->u); free(p);
    return NULL;
  }
  return p;
}

static void prof_free(Prof *p) {
  if (!p || p == &EMPTY) return;
  free(p->x); free(p->c); free(p->u); free(p);
}

static void prof_release(Prof *p) {
  if (p && p != &EMPTY && --p->rc == 0) prof_free(p);
}

static Prof *prof_copy(const Prof *p) {
  Prof *q = prof_alloc(p->n + p->n / 4 + 8);
  if (!q) return NULL;
  memcpy(q->x, p->x, sizeof(double) * p->n);
  memcpy(q->c, p->c, sizeof(int32_t) * p->n);
  memcpy(q->u, p->u, sizeof(int32_t) * p->n);
  q->n = p->n;
  return q;
}

static int bisect_right(const double *x, int n, double t) {
  int lo = 0, hi = n;
  while (lo < hi) {
    int m = (lo + hi) >> 1;
    if (t < x[m]) hi = m; else lo = m + 1;
  }
  return lo;
}

static int bisect_left(const double *x, int n, double t) {
  int lo = 0, hi = n;
  while (lo < hi) {
    int m = (lo + hi) >> 1;
    if (x[m] < t) lo = m + 1; else hi = m;
  }
  return lo;
}

/* profile.earliest: the earliest t >= t0 at which [t, t+d) has a free stream and q free PEs */
static double prof_earliest(const Prof *p, double t0, double d, int q, int streams, int npe) {
  int n = p->n;
  if (n == 0 || t0 >= p->x[n - 1]) return t0;
  int k = bisect_right(p->x, n, t0) - 1;
  if (k < 0) k = 0;
  double t = t0, end = t0 + d;
  int cap = npe - q;
  for (; k < n; k++) {
    if (p->x[k] >= end) break;
    if ((p->c[k] >= streams || p->u[k] > cap) && k + 1 < n) { /* the last segment is idle: never full */
      double nxt = p->x[k + 1];
      if (nxt > t) { t = nxt; end = t + d; }
    }
  }
  return t;
}

static int prof_split(Prof *p, double x) {
  int k = bisect_left(p->x, p->n, x);
  if (k < p->n && p->x[k] == x) return k;
  if (p->n == p->cap) {
    int cap = 2 * p->cap;
    double *nx = realloc(p->x, sizeof(double) * cap);
    if (nx) p->x = nx;
    int32_t *nc = realloc(p->c, sizeof(int32_t) * cap);
    if (nc) p->c = nc;
    int32_t *nu = realloc(p->u, sizeof(int32_t) * cap);
    if (nu) p->u = nu;
    if (!nx || !nc || !nu) return -1;
    p->cap = cap;
  }
  int32_t c = k == 0 ? 0 : p->c[k - 1], u = k == 0 ? 0 : p->u[k - 1];
  int m = p->n - k;
  memmove(p->x + k + 1, p->x + k, sizeof(double) * m);
  memmove(p->c + k + 1, p->c + k, sizeof(int32_t) * m);
  memmove(p->u + k + 1, p->u + k, sizeof(int32_t) * m);
  p->x[k] = x;
  p->c[k] = c;
  p->u[k] = u;
  p->n++;
  return k;
}

static int prof_add(Prof *p, double s, double e, int q) {
  if (!(e > s)) return 0;
  int i = prof_split(p, s);
  if (i < 0) return E_NOMEM;
  int j = prof_split(p, e);
  if (j < 0) return E_NOMEM;
  for (int k = i; k < j; k++) { p->c[k] += 1; p->u[k] += q; }
  return 0;
}

/* profile.fold: keep the last `keep` breakpoints; returns 1 and the floor when something was dropped */
static int prof_fold(Prof *p, int keep, double *floor) {
  int cut = p->n - keep;
  if (cut <= 0) return 0;
  *floor = p->x[cut];
  int m = p->n - cut;
  memmove(p->x, p->x + cut, sizeof(double) * m);
  memmove(p->c, p->c + cut, sizeof(int32_t) * m);
  memmove(p->u, p->u + cut, sizeof(int32_t) * m);
  p->n = m;
  return 1;
}

static inline double prof_horizon(const Prof *p) { return p->n ? p->x[p->n - 1] : 0.0; }

/* ============================================ the simulator ============================================== */
typedef struct { double t; int kind, i; } Event;

static int ev_cmp(const void *pa, const void *pb) {
  const Event *a = pa, *b = pb;
  if (a->t < b->t) return -1;
  if (a->t > b->t) return 1;
  if (a->kind != b->kind) return a->kind - b->kind;
  return a->i - b->i;
}

typedef struct { double np; int i; } HeapItem; /* (-power, task): Python's heapq entries */

static inline int h_less(HeapItem a, HeapItem b) { return a.np < b.np || (a.np == b.np && a.i < b.i); }

static void h_push(HeapItem *h, int *n, HeapItem it) {
  int k = (*n)++;
  h[k] = it;
  while (k > 0) {
    int p = (k - 1) >> 1;
    if (!h_less(h[k], h[p])) break;
    HeapItem t = h[k]; h[k] = h[p]; h[p] = t;
    k = p;
  }
}

static void h_pop(HeapItem *h, int *n) {
  h[0] = h[--(*n)];
  int k = 0;
  for (;;) {
    int l = 2 * k + 1, r = l + 1, m = k;
    if (l < *n && h_less(h[l], h[m])) m = l;
    if (r < *n && h_less(h[r], h[m])) m = r;
    if (m == k) break;
    HeapItem t = h[k]; h[k] = h[m]; h[m] = t;
    k = m;
  }
}

/* simulator.phase_energy: sum over elementary intervals of length x highest power among the running tasks */
static int phase_energy(int L, const double *start, const double *finish, const double *power, int neumaier,
                        double *out) {
  Event *ev = malloc(sizeof(Event) * (2 * (size_t)L + 1));
  HeapItem *heap = malloc(sizeof(HeapItem) * ((size_t)L + 1));
  char *alive = calloc((size_t)L + 1, 1);
  if (!ev || !heap || !alive) { free(ev); free(heap); free(alive); return E_NOMEM; }
  for (int i = 0; i < L; i++) {
    ev[2 * i] = (Event){start[i], 1, i};
    ev[2 * i + 1] = (Event){finish[i], 0, i};
  }
  qsort(ev, 2 * (size_t)L, sizeof(Event), ev_cmp);
  int nh = 0, have_last = 0;
  double last = 0.0;
  PySum e = {0.0, 0.0, 0};
  for (int k = 0; k < 2 * L; k++) {
    double t = ev[k].t;
    int i = ev[k].i;
    if (have_last && t > last) {
      while (nh && !alive[heap[0].i]) h_pop(heap, &nh);
      if (nh) ps_add(&e, (t - last) * power[heap[0].i], neumaier);
    }
    last = t;
    have_last = 1;
    if (ev[k].kind == 1) {
      alive[i] = 1;
      h_push(heap, &nh, (HeapItem){-power[i], i});
    } else {
      alive[i] = 0;
    }
  }
  *out = ps_value(&e);
  free(ev); free(heap); free(alive);
  return 0;
}

static const double *g_start, *g_finish; /* qsort has no context argument; calls hold no shared state */
static const int32_t *g_acc;

static int task_cmp(const void *pa, const void *pb) {
  int a = *(const int *)pa, b = *(const int *)pb;
  if (g_acc[a] != g_acc[b]) return g_acc[a] - g_acc[b];
  if (g_start[a] < g_start[b]) return -1;
  if (g_start[a] > g_start[b]) return 1;
  if (g_finish[a] < g_finish[b]) return -1;
  if (g_finish[a] > g_finish[b]) return 1;
  return a - b; /* Python's sort is stable over the layer index */
}

/* simulator._streams: first-fit stream of every task per accelerator and the time with >= 1 task running */
static int streams_busy(int L, int A, const int32_t *pl, const double *start, const double *finish,
                        int64_t *stream, double *busy) {
  int *idx = malloc(sizeof(int) * ((size_t)L + 1));
  double *free_at = malloc(sizeof(double) * ((size_t)L + 1));
  if (!idx || !free_at) { free(idx); free(free_at); return E_NOMEM; }
  for (int i = 0; i < L; i++) idx[i] = i;
  g_start = start; g_finish = finish; g_acc = pl;
  qsort(idx, (size_t)L, sizeof(int), task_cmp);
  for (int a = 0; a < A; a++) busy[a] = 0.0;
  int k = 0;
  while (k < L) {
    int a = pl[idx[k]], nf = 0;
    double cover_end = -1.0;
    for (; k < L && pl[idx[k]] == a; k++) {
      int v = idx[k];
      double s = start[v], f = finish[v];
      int q = -1;
      for (int m = 0; m < nf; m++)
        if (free_at[m] <= s + 1e-15) { q = m; break; }
      if (q < 0) { free_at[nf] = f; q = nf++; } else free_at[q] = f;
      stream[v] = q;
      if (f > cover_end) {
        busy[a] += f - (cover_end > s ? cover_end : s);
        cover_end = f;
      }
    }
  }
  free(idx); free(free_at);
  return 0;
}

/* simulator._simulate: list scheduling in dispatch order. phase / pinned may be NULL; stream / busy NULL skips
   the stream colouring (the GA's fitness needs only latency and energy). */
int sm_simulate(const Tables *T, const int32_t *placement, const int32_t *order, const int64_t *phase,
                const uint8_t *pinned, const int32_t *streams, double *start, double *finish, int64_t *stream,
                double *busy, double *out /* latency, energy */) {
  int L = T->L, A = T->A, rc = 0;
  Prof **prof = calloc((size_t)A, sizeof(Prof *));
  int32_t *pl = malloc(sizeof(int32_t) * ((size_t)L + 1));
  double *fin = calloc((size_t)L + 1, sizeof(double));
  double *pw = malloc(sizeof(double) * ((size_t)L + 1));
  if (!prof || !pl || !fin || !pw) { rc = E_NOMEM; goto done; }
  for (int a = 0; a < A; a++)
    if (!(prof[a] = prof_alloc(64))) { rc = E_NOMEM; goto done; }
  for (int v = 0; v < L; v++) pl[v] = -1;
  double barrier = 0.0, horizon = 0.0;
  int64_t cur_phase = 0;
  int have_phase = 0;
  for (int k = 0; k < L; k++) {
    int v = order[k];
    if (v < 0 || v >= L) { rc = E_INPUT; goto done; }
    if (phase && (!have_phase || phase[v] != cur_phase)) {
      if (horizon > barrier) barrier = horizon;
      cur_phase = phase[v];
      have_phase = 1;
    }
    int a = placement[v];
    if (a < 0 || a >= A) { rc = E_INPUT; goto done; }
    int q = T->pes[(size_t)v * A + a];
    if (q > T->npe[a] || streams[a] < 1) { rc = E_INPUT; goto done; }
    pl[v] = a;
    double d = (pinned && pinned[v] ? T->latp : T->lat)[(size_t)v * A + a];
    double t = barrier;
    for (int e = T->pptr[v]; e < T->pptr[v + 1]; e++) {
      int u = T->pidx[e];
      int pa = pl[u] < 0 ? A - 1 : pl[u]; /* SimState.placement of an unplaced layer is -1: the last row */
      double r = fin[u] + T->pbytes[e] * T->inv_bw[(size_t)pa * A + a];
      if (r > t) t = r;
    }
    t = prof_earliest(prof[a], t, d, q, streams[a], T->npe[a]);
    double f = t + d;
    start[v] = t;
    finish[v] = f;
    fin[v] = f;
    if ((rc = prof_add(prof[a], t, f, q)) < 0) goto done;
    if (f > horizon) horizon = f;
  }
  double mk = 0.0;
  for (int v = 0; v < L; v++) {
    if (v == 0 || finish[v] > mk) mk = finish[v];
    pw[v] = T->power[(size_t)v * A + placement[v]];
  }
  out[0] = mk;
  if ((rc = phase_energy(L, start, finish, pw, T->neumaier, &out[1])) < 0) goto done;
  if (stream && busy) rc = streams_busy(L, A, placement, start, finish, stream, busy);
done:
  if (prof)
    for (int a = 0; a < A; a++) prof_free(prof[a]);
  free(prof); free(pl); free(fin); free(pw);
  return rc;
}

/* ============================================== the decoder ============================================== */
typedef struct { int acc, moff, mcnt; double t, f, occ; } PGroup; /* a placed group */

typedef struct { PGroup *g; int ng, capg; int32_t *m; int nm, capm; } Placed;

static int placed_push(Placed *P, int acc, double t, double f, double occ, const int32_t *mem, int cnt) {
  if (P->ng == P->capg) {
    int cap = P->capg ? 2 * P->capg : 64;
    PGroup *g = realloc(P->g, sizeof(PGroup) * cap);
    if (!g) return E_NOMEM;
    P->g = g;
    P->capg = cap;
  }
  if (P->nm + cnt > P->capm) {
    int cap = P->capm ? 2 * P->capm : 64;
    while (cap < P->nm + cnt) cap *= 2;
    int32_t *m = realloc(P->m, sizeof(int32_t) * cap);
    if (!m) return E_NOMEM;
    P->m = m;
    P->capm = cap;
  }
  memcpy(P->m + P->nm, mem, sizeof(int32_t) * cnt);
  P->g[P->ng++] = (PGroup){acc, P->nm, cnt, t, f, occ};
  P->nm += cnt;
  return 0;
}

/* The accelerators' state of a DP chain or of a candidate window: profiles (shared copy-on-write) + floors. */
typedef struct { Prof **prs; double *floor; char *own; } Boxes;

/* Group statistics of the window being grown (decoder._decode's gstat), indexed by the position in the window
   counted from its end (k = i-1-pos), with members as linked lists. */
typedef struct {
  int J, A, step; /* step: i of the DP */
  int *parent, *roots, nroots, *mhead, *mtail, *mnext;
  uint64_t *gmask;
  double *sumlat, *busy, *ready, *key; /* J x A (key: J) */
  int32_t *maxpes;                     /* J x A */
  int32_t *memb;                       /* scratch: one group's members */
} Win;

typedef struct {
  const Tables *T;
  int barriers, J;
  const int32_t *pos, *order;
  int32_t *cur_pl; /* placement and finish times of chain[i-1] (decoder's prev / prev_fin) */
  double *cur_fin;
  double *nr;      /* node_ready scratch (A) */
} Dec;

static int find(int *parent, int x) {
  while (parent[x] != x) { parent[x] = parent[parent[x]]; x = parent[x]; }
  return x;
}

/* decoder.node_ready: arrival of v's inputs produced before the window (position < lo), per accelerator */
static void node_ready(const Dec *D, int v, int lo, double *out) {
  const Tables *T = D->T;
  int A = T->A;
  for (int a = 0; a < A; a++) out[a] = 0.0;
  for (int e = T->pptr[v]; e < T->pptr[v + 1]; e++) {
    int u = T->pidx[e];
    if (D->pos[u] < lo) {
      const double *row = T->inv_bw + (size_t)D->cur_pl[u] * A;
      double base = D->barriers ? 0.0 : D->cur_fin[u], b = T->pbytes[e];
      for (int a = 0; a < A; a++) {
        double t = base + b * row[a];
        if (t > out[a]) out[a] = t;
      }
    }
  }
}

/* decoder._place_window: longest first, each group where it finishes earliest. `src`: the chain's boxes (NULL:
   idle accelerators after a barrier); `steal`: src is never read again, so a profile only it holds may be
   written in place. The candidate's state goes to `cb`, its groups to `P` (emptied on a give-up). */
static int place_window(const Dec *D, Win *W, Boxes *src, int steal, double limit, Boxes *cb, Placed *P,
                        double *span_out) {
  const Tables *T = D->T;
  int A = T->A, nr = W->nroots, rc;
  int sorted[64], *srt = nr <= 64 ? sorted : malloc(sizeof(int) * nr);
  if (!srt) return E_NOMEM;
  for (int k = 0; k < nr; k++) { /* stable insertion sort by decreasing key (Python: sorted by -key) */
    int r = W->roots[k], m = k;
    while (m > 0 && -W->key[srt[m - 1]] > -W->key[r]) { srt[m] = srt[m - 1]; m--; }
    srt[m] = r;
  }
  for (int a = 0; a < A; a++) {
    cb->prs[a] = src ? src->prs[a] : &EMPTY;
    cb->floor[a] = src ? src->floor[a] : 0.0;
    cb->own[a] = 0;
  }
  P->ng = P->nm = 0;
  double span = 0.0;
  for (int k = 0; k < nr; k++) {
    int g = srt[k];
    const double *sumlat = W->sumlat + (size_t)g * A, *ready = W->ready + (size_t)g * A;
    const int32_t *pes = W->maxpes + (size_t)g * A;
    int ba = -1;
    double bf = INFINITY, bt = 0.0;
    for (uint64_t m = W->gmask[g]; m; m &= m - 1) {
      int a = __builtin_ctzll(m);
      double t0 = ready[a] > cb->floor[a] ? ready[a] : cb->floor[a], d = sumlat[a];
      double t = prof_earliest(cb->prs[a], t0, d, pes[a], T->streams[a], T->npe[a]), f = t + d;
      if (f < bf) { ba = a; bf = f; bt = t; }
    }
    if (ba < 0) { rc = E_NOACC; goto fail; }
    if (!cb->own[ba]) {
      Prof *p = cb->prs[ba];
      if (steal && p != &EMPTY && p->rc == 1) {
        src->prs[ba] = NULL;
      } else if (!(p = prof_copy(p))) { rc = E_NOMEM; goto fail; }
      cb->prs[ba] = p;
      cb->own[ba] = 1;
    }
    Prof *pr = cb->prs[ba];
    if ((rc = prof_add(pr, bt, bf, pes[ba])) < 0) goto fail;
    double fl;
    if (pr->n > T->keep && prof_fold(pr, T->keep, &fl) && fl > cb->floor[ba]) cb->floor[ba] = fl;
    if (bf > span) {
      span = bf;
      if (span >= limit) { P->ng = P->nm = 0; span = INFINITY; break; }
    }
    double d = bf - bt;
    double occ = d > 0 ? W->busy[(size_t)g * A + ba] / ((double)T->npe[ba] * d) : 0.0;
    int cnt = 0;
    for (int x = W->mhead[g]; x >= 0; x = W->mnext[x]) W->memb[cnt++] = D->order[W->step - 1 - x];
    if ((rc = placed_push(P, ba, bt, bf, occ, W->memb, cnt)) < 0) goto fail;
  }
  if (srt != sorted) free(srt);
  *span_out = span;
  return 0;
fail:
  if (srt != sorted) free(srt);
  return rc;
}

static void boxes_drop_owned(Boxes *b, int A) {
  for (int a = 0; a < A; a++)
    if (b->own[a]) { prof_free(b->prs[a]); b->own[a] = 0; }
}

/* Adds the layer at window position lo to the window's groups, merging it with its consumers inside the window
   (decoder._decode's inner loop up to the group's key). Returns 1 when its group has no accelerator. */
static int grow_window(const Dec *D, Win *W, int lo) {
  const Tables *T = D->T;
  int A = T->A, i = W->step, k = i - 1 - lo, x = D->order[lo], merged = 0;
  W->parent[k] = k;
  W->mhead[k] = W->mtail[k] = k;
  W->mnext[k] = -1;
  W->gmask[k] = T->mask[x];
  double *sl = W->sumlat + (size_t)k * A, *bz = W->busy + (size_t)k * A;
  int32_t *mp = W->maxpes + (size_t)k * A;
  for (int a = 0; a < A; a++) {
    double l = T->lat[(size_t)x * A + a];
    int p = T->pes[(size_t)x * A + a];
    sl[a] = l;
    mp[a] = p;
    bz[a] = p ? l * p : 0.0;
  }
  node_ready(D, x, lo, W->ready + (size_t)k * A);
  W->roots[W->nroots++] = k;
  for (int e = T->sptr[x]; e < T->sptr[x + 1]; e++) {
    int s = T->sidx[e], ps = D->pos[s];
    if (!(lo < ps && ps < i)) continue;
    int rs = find(W->parent, i - 1 - ps), rx = find(W->parent, k);
    double *gs = W->sumlat + (size_t)rx * A;
    if (rs != rx) {
      int m = 0;
      while (W->roots[m] != rs) m++;
      memmove(W->roots + m, W->roots + m + 1, sizeof(int) * (W->nroots - m - 1));
      W->nroots--;
      W->parent[rs] = rx;
      W->mnext[W->mtail[rx]] = W->mhead[rs];
      W->mtail[rx] = W->mtail[rs];
      W->gmask[rx] &= W->gmask[rs];
      double *os = W->sumlat + (size_t)rs * A, *gb = W->busy + (size_t)rx * A, *ob = W->busy + (size_t)rs * A;
      int32_t *gp = W->maxpes + (size_t)rx * A, *op = W->maxpes + (size_t)rs * A;
      for (int a = 0; a < A; a++) {
        gs[a] = gs[a] + os[a];
        gp[a] = gp[a] > op[a] ? gp[a] : op[a];
        gb[a] = gb[a] + ob[a];
      }
      merged = 1;
    }
    double b = T->sbytes[e]; /* the edge stays inside the accelerator: intra-accelerator bandwidth */
    for (int a = 0; a < A; a++) gs[a] = gs[a] + b * T->inv_bw[(size_t)a * A + a];
  }
  int rx = find(W->parent, k);
  if (W->gmask[rx] == 0) return 1;
  double *rd = W->ready + (size_t)rx * A, *sg = W->sumlat + (size_t)rx * A;
  if (merged) { /* x's consumers now get its output inside the group: the group's inputs again */
    for (int a = 0; a < A; a++) rd[a] = 0.0;
    for (int y = W->mhead[rx]; y >= 0; y = W->mnext[y]) {
      node_ready(D, D->order[i - 1 - y], lo, D->nr);
      for (int a = 0; a < A; a++)
        if (D->nr[a] > rd[a]) rd[a] = D->nr[a];
    }
  }
  int first = 1;
  double key = 0.0;
  for (uint64_t m = W->gmask[rx]; m; m &= m - 1) {
    int a = __builtin_ctzll(m);
    double d = sg[a] + rd[a];
    if (first || d < key) key = d;
    first = 0;
  }
  W->key[rx] = key;
  return 0;
}

static inline int tuple_less(const double *c, double d0, double d1, double d2) {
  return c[0] < d0 || (c[0] == d0 && (c[1] < d1 || (c[1] == d1 && c[2] < d2)));
}

typedef struct {
  int n, A, J;
  int32_t *pos, *back, *gfirst, *gcnt, *stack, *cur_pl;
  double *dp, *cur_fin, *nr; /* dp: (n+1) x 3 */
  Placed pool, cand, best;
  Boxes *ring, cb, bb;       /* ring: chain[i]'s boxes in slot i % (J+1) */
  Win W;
} DecMem;

static int boxes_alloc(Boxes *b, int A) {
  b->prs = calloc((size_t)A, sizeof(Prof *));
  b->floor = calloc((size_t)A, sizeof(double));
  b->own = calloc((size_t)A, 1);
  return b->prs && b->floor && b->own ? 0 : E_NOMEM;
}

static void boxes_free(Boxes *b, int A, int release) {
  if (b->prs && release)
    for (int a = 0; a < A; a++) prof_release(b->prs[a]);
  free(b->prs); free(b->floor); free(b->own);
}

static void decmem_free(DecMem *M) {
  int A = M->A;
  free(M->pos); free(M->back); free(M->gfirst); free(M->gcnt); free(M->stack); free(M->cur_pl);
  free(M->dp); free(M->cur_fin); free(M->nr);
  free(M->pool.g); free(M->pool.m); free(M->cand.g); free(M->cand.m); free(M->best.g); free(M->best.m);
  if (M->ring)
    for (int s = 0; s <= M->J; s++) boxes_free(&M->ring[s], A, 1);
  free(M->ring);
  if (M->cb.own) boxes_drop_owned(&M->cb, A);
  if (M->bb.own) boxes_drop_owned(&M->bb, A);
  boxes_free(&M->cb, A, 0);
  boxes_free(&M->bb, A, 0);
  Win *W = &M->W;
  free(W->parent); free(W->roots); free(W->mhead); free(W->mtail); free(W->mnext); free(W->gmask);
  free(W->sumlat); free(W->busy); free(W->ready); free(W->key); free(W->maxpes); free(W->memb);
}

static int decmem_alloc(DecMem *M, int n, int A, int J) {
  memset(M, 0, sizeof(*M));
  M->n = n; M->A = A; M->J = J;
  size_t n1 = (size_t)n + 1, JA = (size_t)J * A;
  M->pos = malloc(sizeof(int32_t) * n1);
  M->back = calloc(n1, sizeof(int32_t));
  M->gfirst = calloc(n1, sizeof(int32_t));
  M->gcnt = calloc(n1, sizeof(int32_t));
  M->stack = malloc(sizeof(int32_t) * n1);
  M->cur_pl = calloc(n1, sizeof(int32_t));
  M->dp = malloc(sizeof(double) * 3 * n1);
  M->cur_fin = calloc(n1, sizeof(double));
  M->nr = malloc(sizeof(double) * (A + 1));
  M->ring = calloc((size_t)J + 1, sizeof(Boxes));
  int bad = !M->pos || !M->back || !M->gfirst || !M->gcnt || !M->stack || !M->cur_pl || !M->dp || !M->cur_fin ||
            !M->nr || !M->ring;
  if (!bad)
    for (int s = 0; s <= J; s++) bad |= boxes_alloc(&M->ring[s], A) != 0;
  bad |= boxes_alloc(&M->cb, A) != 0;
  bad |= boxes_alloc(&M->bb, A) != 0;
  Win *W = &M->W;
  W->J = J; W->A = A;
  W->parent = malloc(sizeof(int) * J); W->roots = malloc(sizeof(int) * J);
  W->mhead = malloc(sizeof(int) * J); W->mtail = malloc(sizeof(int) * J); W->mnext = malloc(sizeof(int) * J);
  W->gmask = malloc(sizeof(uint64_t) * J); W->key = malloc(sizeof(double) * J);
  W->sumlat = malloc(sizeof(double) * JA); W->busy = malloc(sizeof(double) * JA);
  W->ready = malloc(sizeof(double) * JA); W->maxpes = malloc(sizeof(int32_t) * JA);
  W->memb = malloc(sizeof(int32_t) * J);
  bad |= !W->parent || !W->roots || !W->mhead || !W->mtail || !W->mnext || !W->gmask || !W->key || !W->sumlat ||
         !W->busy || !W->ready || !W->maxpes || !W->memb;
  return bad ? E_NOMEM : 0;
}

/* chain[i] := the winning candidate's boxes (owned profiles move, shared ones gain a reference) */
static void store_chain(DecMem *M, int i) {
  int A = M->A;
  Boxes *slot = &M->ring[i % (M->J + 1)];
  for (int a = 0; a < A; a++) {
    Prof *p = M->bb.prs[a];
    if (!M->bb.own[a] && p != &EMPTY) p->rc++;
    M->bb.own[a] = 0;
    prof_release(slot->prs[a]);
    slot->prs[a] = p;
    slot->floor[a] = M->bb.floor[a];
  }
}

/* chain[i-1] -> chain[i] in cur_pl / cur_fin: re-apply the windows of chain[i] above its common ancestor with
   chain[i-1] in the DP's back-pointer tree (the Python decoder copies the whole arrays instead). */
static void advance_chain(DecMem *M, const Placed *pool, int i, int barriers) {
  int x = i, y = i - 1, ns = 0;
  while (x != y) {
    if (x > y) { M->stack[ns++] = x; x = M->back[x]; } else y = M->back[y];
  }
  for (int s = 0; s < ns; s++) {
    int k = M->stack[s];
    double base = barriers ? M->dp[3 * M->back[k]] : 0.0;
    for (int g = M->gfirst[k]; g < M->gfirst[k] + M->gcnt[k]; g++) {
      const PGroup *G = &pool->g[g];
      for (int m = G->moff; m < G->moff + G->mcnt; m++) {
        M->cur_pl[pool->m[m]] = G->acc;
        M->cur_fin[pool->m[m]] = base + G->f;
      }
    }
  }
}

/* One DP step of decoder._decode: every window ending at i, the best kept in dp[i], back[i], best. */
static int dp_step(DecMem *M, Dec *D, int i) {
  const Tables *T = D->T;
  int J = M->J, A = M->A, barriers = D->barriers, rc, won = 0;
  double *dp = M->dp, lb = 0.0;
  Win *W = &M->W;
  W->step = i;
  W->nroots = 0;
  int jmax = J < i ? J : i;
  for (int j = 1; j <= jmax; j++) {
    int lo = i - j;
    if (grow_window(D, W, lo)) break; /* a component no accelerator can run whole */
    double key = W->key[find(W->parent, i - 1 - lo)], span, c[3];
    if (barriers) {
      if (key > lb) lb = key; /* groups only grow with j, so their shortest durations only grow */
      double base = dp[3 * lo];
      if (base + lb >= dp[3 * i]) continue;
      if ((rc = place_window(D, W, NULL, 0, dp[3 * i] - base, &M->cb, &M->cand, &span)) < 0) return rc;
      c[0] = base + span; c[1] = 0.0; c[2] = 0.0;
    } else {
      Boxes *src = &M->ring[lo % (J + 1)];
      if ((rc = place_window(D, W, src, lo == i - J, INFINITY, &M->cb, &M->cand, &span)) < 0) return rc;
      PySum load = {0.0, 0.0, 0};
      for (int a = 0; a < A; a++) ps_add(&load, prof_horizon(M->cb.prs[a]), T->neumaier);
      c[0] = span; c[1] = ps_value(&load); c[2] = span > dp[3 * lo + 2] ? span : dp[3 * lo + 2];
    }
    if (tuple_less(c, dp[3 * i], dp[3 * i + 1], dp[3 * i + 2])) {
      memcpy(dp + 3 * i, c, sizeof(c));
      M->back[i] = lo;
      Placed t = M->best; M->best = M->cand; M->cand = t;
      boxes_drop_owned(&M->bb, A);
      Boxes b = M->bb; M->bb = M->cb; M->cb = b;
      won = 1;
    } else {
      boxes_drop_owned(&M->cb, A);
    }
  }
  if (!won) return E_UNPLACED;
  M->gfirst[i] = M->pool.ng;
  M->gcnt[i] = M->best.ng;
  for (int g = 0; g < M->best.ng; g++) {
    const PGroup *G = &M->best.g[g];
    if ((rc = placed_push(&M->pool, G->acc, G->t, G->f, G->occ, M->best.m + G->moff, G->mcnt)) < 0) return rc;
  }
  if (barriers) boxes_drop_owned(&M->bb, A);
  else store_chain(M, i);
  advance_chain(M, &M->pool, i, barriers);
  return 0;
}

/* The chain of dp[n] as windows in order: groups (placement order) with sorted members. Returns G. */
static int write_windows(DecMem *M, int barriers, int32_t *g_win, int32_t *g_acc, double *g_start,
                         double *g_finish, double *g_occ, int32_t *g_off, int32_t *members) {
  int n = M->n, ns = 0, G = 0, moff = 0;
  for (int i = n; i > 0; i = M->back[i]) M->stack[ns++] = i;
  for (int w = 0; w < ns; w++) {
    int k = M->stack[ns - 1 - w];
    double base = barriers ? M->dp[3 * M->back[k]] : 0.0;
    for (int g = M->gfirst[k]; g < M->gfirst[k] + M->gcnt[k]; g++) {
      const PGroup *P = &M->pool.g[g];
      if (G >= n || moff + P->mcnt > n) return E_INPUT;
      g_win[G] = w; g_acc[G] = P->acc; g_occ[G] = P->occ;
      g_start[G] = base + P->t; g_finish[G] = base + P->f;
      g_off[G] = moff;
      int32_t *out = members + moff;
      for (int m = 0; m < P->mcnt; m++) { /* insertion sort: Group.layers is sorted */
        int v = M->pool.m[P->moff + m], q = m;
        while (q > 0 && out[q - 1] > v) { out[q] = out[q - 1]; q--; }
        out[q] = v;
      }
      moff += P->mcnt;
      G++;
    }
  }
  g_off[G] = moff;
  return G;
}

/* decoder._decode: returns the number of groups G (>= 0) or a negative error (the caller falls back to Python).
   est: the decoder's latency; placement (L); groups: window, accelerator, start, finish, occupancy and the
   member range g_off[g]..g_off[g+1] in members (arrays of L + 1). */
int sm_decode(const Tables *T, const int32_t *order, int barriers, int J, double *est, int32_t *placement,
              int32_t *g_win, int32_t *g_acc, double *g_start, double *g_finish, double *g_occ, int32_t *g_off,
              int32_t *members) {
  int n = T->L, A = T->A, rc = 0;
  if (J < 1 || A < 1 || A > 64) return E_INPUT;
  DecMem M;
  if ((rc = decmem_alloc(&M, n, A, J)) < 0) goto done;
  for (int k = 0; k < n; k++) M.pos[k] = -1;
  for (int k = 0; k < n; k++) {
    int v = order[k];
    if (v < 0 || v >= n || M.pos[v] >= 0) { rc = E_INPUT; goto done; }
    M.pos[v] = k;
  }
  M.dp[0] = M.dp[1] = M.dp[2] = 0.0;
  for (int i = 1; i <= n; i++) M.dp[3 * i] = M.dp[3 * i + 1] = M.dp[3 * i + 2] = INFINITY;
  for (int a = 0; a < A; a++) M.ring[0].prs[a] = &EMPTY;
  Dec D = {T, barriers, J, M.pos, order, M.cur_pl, M.cur_fin, M.nr};
  for (int i = 1; i <= n; i++)
    if ((rc = dp_step(&M, &D, i)) < 0) goto done;
  *est = barriers ? M.dp[3 * n] : M.dp[3 * n + 2];
  memcpy(placement, M.cur_pl, sizeof(int32_t) * n);
  rc = write_windows(&M, barriers, g_win, g_acc, g_start, g_finish, g_occ, g_off, members);
done:
  decmem_free(&M);
  return rc;
}
