#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#ifdef DB_PYLIST
#include <Python.h>
#endif

typedef struct {
  int n, nt, nslots;
  int *types, *indeg, *sptr, *sidx, *arity;
  int64_t *argflat;      /* (source, output) per argument slot */
  int *off, *head, *tail, *seg;
  int *h, *dep;          /* heights / depths (NULL until requested) */
  int *fmaxh, *fmind;    /* per type: max height / min depth of the current frontier */
  int *out, *bend;
  int64_t *loc;          /* batch and row of every node (2n), set by dbs_steps_py */
  int nout, nb, executed;
} Sim;

static void push(Sim *s, int v) {
  int t = s->types[v];
  if (t != 0 && s->tail[t] == s->head[t]) {
    if (s->h) s->fmaxh[t] = -1;
    if (s->dep) s->fmind[t] = 1 << 30;
  }
  s->seg[s->tail[t]++] = v;
  if (s->h && s->h[v] > s->fmaxh[t]) s->fmaxh[t] = s->h[v];
  if (s->dep && s->dep[v] < s->fmind[t]) s->fmind[t] = s->dep[v];
}

static void done(Sim *s, int v) {
  int *sidx = s->sidx, *indeg = s->indeg;
  for (int e = s->sptr[v]; e < s->sptr[v + 1]; e++) {
    int w = sidx[e];
    if (--indeg[w] == 0) push(s, w);
  }
}

static Sim *alloc_sim(int n, int nt, int ns) {
  Sim *s = calloc(1, sizeof(Sim));
  s->n = n; s->nt = nt; s->nslots = ns;
  s->types = malloc(sizeof(int) * (n + 1));
  s->arity = malloc(sizeof(int) * (n + 1));
  s->indeg = malloc(sizeof(int) * (n + 1));
  s->sptr = calloc(n + 1, sizeof(int));
  s->argflat = malloc(sizeof(int64_t) * (2 * ns + 2));
  s->sidx = malloc(sizeof(int) * (ns + 1));
  return s;
}

/* successor lists (by argument slot), per-type segments and buffers, once types/arity/argflat are filled.
   Node ids are a topological order (arguments are recorded before their users). */
static void build(Sim *s) {
  int n = s->n, nt = s->nt, ns = s->nslots;
  for (int v = 0; v < n; v++) s->indeg[v] = s->arity[v];
  for (int e = 0; e < ns; e++) s->sptr[s->argflat[2 * e] + 1]++;
  for (int v = 0; v < n; v++) s->sptr[v + 1] += s->sptr[v];
  int *fill = malloc(sizeof(int) * (n + 1));
  memcpy(fill, s->sptr, sizeof(int) * n);
  int e = 0;
  for (int v = 0; v < n; v++)
    for (int j = 0; j < s->arity[v]; j++, e++) s->sidx[fill[s->argflat[2 * e]]++] = v;  /* successors in id order */
  free(fill);
  s->off = calloc(nt + 1, sizeof(int));
  s->head = malloc(sizeof(int) * (nt + 1));
  s->tail = malloc(sizeof(int) * (nt + 1));
  for (int v = 0; v < n; v++) s->off[s->types[v] + 1]++;
  for (int t = 0; t < nt; t++) s->off[t + 1] += s->off[t];
  for (int t = 0; t <= nt; t++) s->head[t] = s->tail[t] = s->off[t];
  s->seg = malloc(sizeof(int) * (n + 1));
  s->fmaxh = malloc(sizeof(int) * (nt + 1));
  s->fmind = malloc(sizeof(int) * (nt + 1));
  s->out = malloc(sizeof(int) * (n + 1));
  s->bend = malloc(sizeof(int) * (n + 1));
}

void dbs_free(void *p);

/* every type in [0, nt), every argument an earlier node (ids are a topological order) */
static int valid(Sim *s) {
  int e = 0;
  for (int v = 0; v < s->n; v++) {
    if (s->types[v] < 0 || s->types[v] >= s->nt || s->arity[v] < 0) return 0;
    for (int j = 0; j < s->arity[v]; j++, e++)
      if (e >= s->nslots || s->argflat[2 * e] < 0 || s->argflat[2 * e] >= v) return 0;
  }
  return e == s->nslots;
}

/* from numpy arrays: types/arity int32, argflat int64 (source, output) pairs; NULL if inconsistent */
void *dbs_new(int n, int nt, const int32_t *types, const int32_t *arity, const int64_t *argflat) {
  int ns = 0;
  for (int v = 0; v < n; v++) ns += arity[v];
  Sim *s = alloc_sim(n, nt, ns);
  memcpy(s->types, types, sizeof(int) * n);
  memcpy(s->arity, arity, sizeof(int) * n);
  memcpy(s->argflat, argflat, sizeof(int64_t) * 2 * ns);
  if (!valid(s)) { dbs_free(s); return NULL; }
  build(s);
  return s;
}

#ifdef DB_PYLIST
/* straight from the recorder's Python lists (ints): no per-flush numpy conversion (~20 ns per element) */
void dbs_heights(void *p, int32_t *dst);
void dbs_depths(void *p, int32_t *dst);
void dbs_start(void *p);
void *dbs_new_py(int n, int nt, PyObject *types, PyObject *arity, PyObject *argflat, int flags) {
  int ns = (int)(PyList_GET_SIZE(argflat) / 2);
  if (PyList_GET_SIZE(types) < n || PyList_GET_SIZE(arity) < n) return NULL;
  Sim *s = alloc_sim(n, nt, ns);
  for (int v = 0; v < n; v++) {
    s->types[v] = (int)PyLong_AsLong(PyList_GET_ITEM(types, v));
    s->arity[v] = (int)PyLong_AsLong(PyList_GET_ITEM(arity, v));
  }
  for (int e = 0; e < 2 * ns; e++) s->argflat[e] = PyLong_AsLongLong(PyList_GET_ITEM(argflat, e));
  if (PyErr_Occurred()) { PyErr_Clear(); dbs_free(s); return NULL; }  /* not plain ints: caller falls back */
  int tot = 0;
  for (int v = 0; v < n; v++) tot += s->arity[v];
  if (tot != ns || !valid(s)) { dbs_free(s); return NULL; }
  build(s);
  if (flags & 1) dbs_heights(s, NULL);  /* flags: 1 heights, 2 depths, 4 push the sources */
  if (flags & 2) dbs_depths(s, NULL);
  if (flags & 4) dbs_start(s);
  return s;
}
#endif

void dbs_free(void *p) {
  Sim *s = p;
  if (!s) return;
  free(s->types); free(s->arity); free(s->argflat); free(s->indeg); free(s->sptr); free(s->sidx); free(s->off);
  free(s->head); free(s->tail); free(s->seg); free(s->h); free(s->dep); free(s->fmaxh); free(s->fmind);
  free(s->out); free(s->bend); free(s->loc);
  free(s);
}

/* longest path (edges) to a sink; node ids are topological, so one reverse pass */
void dbs_heights(void *p, int32_t *dst) {
  Sim *s = p;
  if (!s->h) {
    s->h = calloc(s->n + 1, sizeof(int));
    for (int v = s->n - 1; v >= 0; v--) {
      int m = -1;
      for (int e = s->sptr[v]; e < s->sptr[v + 1]; e++) if (s->h[s->sidx[e]] > m) m = s->h[s->sidx[e]];
      s->h[v] = m + 1;
    }
  }
  if (dst) memcpy(dst, s->h, sizeof(int) * s->n);
}

/* longest path from a source (depth), in one forward pass over the successor lists */
void dbs_depths(void *p, int32_t *dst) {
  Sim *s = p;
  if (!s->dep) {
    s->dep = calloc(s->n + 1, sizeof(int));
    for (int v = 0; v < s->n; v++)
      for (int e = s->sptr[v]; e < s->sptr[v + 1]; e++) {
        int w = s->sidx[e];
        if (s->dep[v] + 1 > s->dep[w]) s->dep[w] = s->dep[v] + 1;
      }
  }
  if (dst) memcpy(dst, s->dep, sizeof(int) * s->n);
}

/* push the sources (in id order); call after dbs_heights / dbs_depths if the frontier extrema are wanted */
void dbs_start(void *p) {
  Sim *s = p;
  for (int v = 0; v < s->n; v++) if (s->indeg[v] == 0) push(s, v);
}

/* run every ready unbatchable node (and those they free) one per batch, FIFO; returns #batches added */
int dbs_drain(void *p) {
  Sim *s = p;
  int k = 0;
  while (s->head[0] < s->tail[0]) {
    int v = s->seg[s->head[0]++];
    s->out[s->nout++] = v;
    s->bend[s->nb++] = s->nout;
    s->executed++;
    done(s, v);
    k++;
  }
  return k;
}

/* the batch of every ready node of type t; returns its size (0: empty frontier) */
int dbs_step(void *p, int t) {
  Sim *s = p;
  int a = s->head[t], b = s->tail[t];
  if (a == b) return 0;
  s->head[t] = b;
  int o = s->nout;
  memcpy(s->out + o, s->seg + a, sizeof(int) * (b - a));
  s->nout += b - a;
  s->bend[s->nb++] = s->nout;
  s->executed += b - a;
  for (int i = o; i < o + (b - a); i++) done(s, s->out[i]);
  return b - a;
}

/* ready batchable types in increasing id order; returns their number */
int dbs_ready(void *p, int32_t *buf) {
  Sim *s = p;
  int k = 0;
  for (int t = 1; t < s->nt; t++) if (s->tail[t] > s->head[t]) buf[k++] = t;
  return k;
}

/* one policy step in one call: run type t (t < 0: none), drain the unbatchable nodes, list the ready types.
   Returns #ready types, or -1 when t had an empty frontier. */
int dbs_next(void *p, int t, int32_t *buf) {
  if (t >= 0 && !dbs_step(p, t)) return -1;
  dbs_drain(p);
  return dbs_ready(p, buf);
}

/* critical-path choice among the ready types: max (frontier max height, frontier size), first by type id */
int dbs_cp(void *p) {
  Sim *s = p;
  int best = -1, bh = -2, bc = -1;
  for (int t = 1; t < s->nt; t++) {
    int c = s->tail[t] - s->head[t];
    if (!c) continue;
    int h = s->fmaxh[t];
    if (h > bh || (h == bh && c > bc)) { best = t; bh = h; bc = c; }
  }
  return best;
}

/* node ids of the last batch into buf; returns their number */
int dbs_last(void *p, int32_t *buf) {
  Sim *s = p;
  if (!s->nb) return 0;
  int a = s->nb > 1 ? s->bend[s->nb - 2] : 0, k = s->bend[s->nb - 1] - a;
  memcpy(buf, s->out + a, sizeof(int) * k);
  return k;
}

int dbs_count(void *p, int t) { Sim *s = p; return s->tail[t] - s->head[t]; }
int dbs_mind(void *p, int t) { Sim *s = p; return s->fmind[t]; }

/* copy the node ids of the current frontier of t into buf; returns their number */
int dbs_frontier(void *p, int t, int32_t *buf) {
  Sim *s = p;
  int k = s->tail[t] - s->head[t];
  memcpy(buf, s->seg + s->head[t], sizeof(int) * k);
  return k;
}

/* the schedule: node ids in order (nout of them) and batch end offsets; returns #batches */
int dbs_result(void *p, int32_t *out, int32_t *bend) {
  Sim *s = p;
  memcpy(out, s->out, sizeof(int) * s->nout);
  memcpy(bend, s->bend, sizeof(int) * s->nb);
  return s->nb;
}

void dbs_bend(void *p, int32_t *bend) { Sim *s = p; memcpy(bend, s->bend, sizeof(int) * s->nb); }
void dbs_firsts(void *p, int32_t *buf) {
  Sim *s = p;
  for (int b = 0; b < s->nb; b++) buf[b] = s->out[b ? s->bend[b - 1] : 0];
}

int dbs_executed(void *p) { return ((Sim *)p)->executed; }
int dbs_nbatches(void *p) { return ((Sim *)p)->nb; }

/* Argument resolution of a whole schedule (the planner's numpy passes in one loop; executor._resolve_python is
   the element-wise reference). Per (batch, argument position) group: kind 0 = view, 1 = broadcast, 2 = gather,
   and its runs (batch, output, row start, row end) of consecutive location keys. Returns #groups. */
static int resolve_core(int n, int nb, const int32_t *flat, const int32_t *bend, const int32_t *arity,
                        const int64_t *argflat, int64_t *lb, int64_t *lr, int32_t *gbatch, int32_t *gkind,
                        int32_t *grun0, int32_t *gnrun, int32_t *gsize, int32_t *gsrc, int32_t *rb, int32_t *ro,
                        int32_t *rr, int32_t *re, int32_t *nruns) {
  int64_t *aptr = malloc(sizeof(int64_t) * (n + 1));
  aptr[0] = 0;
  for (int v = 0; v < n; v++) aptr[v + 1] = aptr[v] + arity[v];
  for (int b = 0, a = 0; b < nb; b++) {
    for (int i = a; i < bend[b]; i++) { lb[flat[i]] = b; lr[flat[i]] = i - a; }
    a = bend[b];
  }
  const int64_t W = (int64_t)n << 16;
  int G = 0, R = 0;
  for (int b = 0, a = 0; b < nb; b++) {
    int e = bend[b], k = e - a, A = arity[flat[a]];
    for (int j = 0; j < A; j++) {
      int r0 = R, neq = 0, brk = 0;
      int64_t prev = 0;
      for (int i = a; i < e; i++) {
        int64_t sl = aptr[flat[i]] + j, u = argflat[2 * sl], o = argflat[2 * sl + 1];
        int64_t key = lb[u] * W + lr[u] + o * n;
        if (i == a) {
          gsrc[G] = (int32_t)u;
        } else if (key == prev + 1) {
          re[R - 1]++; prev = key; continue;
        } else {
          brk++;
          if (key == prev) neq++;
        }
        rb[R] = (int32_t)lb[u]; ro[R] = (int32_t)o; rr[R] = (int32_t)lr[u]; re[R] = (int32_t)lr[u] + 1; R++;
        prev = key;
      }
      gbatch[G] = b; grun0[G] = r0; gnrun[G] = R - r0; gsize[G] = k;
      gkind[G] = brk == 0 ? 0 : (neq == k - 1 ? 1 : 2);
      G++;
    }
    a = e;
  }
  free(aptr);
  *nruns = R;
  return G;
}

/* resolution of any schedule given as numpy arrays (flat/bend int32, arity int32, argflat int64 pairs) */
int dbs_resolve(int n, int nb, const int32_t *flat, const int32_t *bend, const int32_t *arity,
                const int64_t *argflat, int64_t *lb, int64_t *lr, int32_t *gbatch, int32_t *gkind,
                int32_t *grun0, int32_t *gnrun, int32_t *gsize, int32_t *gsrc, int32_t *rb, int32_t *ro,
                int32_t *rr, int32_t *re, int32_t *nruns) {
  return resolve_core(n, nb, flat, bend, arity, argflat, lb, lr, gbatch, gkind, grun0, gnrun, gsize, gsrc,
                      rb, ro, rr, re, nruns);
}

/* the schedule this simulator produced (its own arrays: nothing crosses the boundary), resolved into two blocks:
   loc = [lb (n) | lr (n)] int64, blk = 6 group columns of gmax then 4 run columns of
   smax, int32; returns #groups, *nruns = #runs */
int dbs_resolve_blk(void *p, int64_t *loc, int32_t *blk, int gmax, int smax, int32_t *nruns) {
  Sim *s = p;
  int32_t *g = blk, *r = blk + 6 * (int64_t)gmax;
  return resolve_core(s->n, s->nb, s->out, s->bend, s->arity, s->argflat, loc, loc + s->n, g, g + gmax,
                      g + 2 * gmax, g + 3 * gmax, g + 4 * gmax, g + 5 * gmax, r, r + smax, r + 2 * smax,
                      r + 3 * smax, nruns);
}

/* upper bound of #groups of the simulator's schedule (sum of the arity of each batch's first node) */
int dbs_ngroups(void *p);

#ifdef DB_PYLIST
static PyObject *tup4(PyObject *head, long a, long b, long c, long d) {
  /* (head, a, b, c, d) or, with head NULL, (a, b, c, d): PyTuple_New + PyLong_FromLong, no format parsing */
  int o = head ? 1 : 0;
  PyObject *t = PyTuple_New(4 + o);
  if (head) { Py_INCREF(head); PyTuple_SET_ITEM(t, 0, head); }
  PyTuple_SET_ITEM(t, o, PyLong_FromLong(a));
  PyTuple_SET_ITEM(t, o + 1, PyLong_FromLong(b));
  PyTuple_SET_ITEM(t, o + 2, PyLong_FromLong(c));
  PyTuple_SET_ITEM(t, o + 3, PyLong_FromLong(d));
  PyObject_GC_UnTrack(t);  /* ints (and an interned str) only: no cycles, keep the young GC generation short */
  return t;
}

/* The planner's argument specs as Python objects, built here (no per-run tuple building in Python): a list per
   batch of ("view", b, o, r0, r1) / ("bcast", b, o, r0, k) / ("gather", [(b, o, r0, r1), ...], None) specs, and a
   list of (batch, position, size, first source, output) of the gathers, whose byte counts need the shapes.
   Returns (steps, gathers); locations stay in the simulator (dbs_loc). */
PyObject *dbs_steps_py(void *p, PyObject *sview, PyObject *sbcast, PyObject *sgather) {
  Sim *s = p;
  int gmax = dbs_ngroups(p) + 1, smax = s->nslots + 1, n = s->n;
  if (!s->loc) s->loc = malloc(sizeof(int64_t) * (2 * (int64_t)n + 2));
  int32_t *blk = malloc(sizeof(int32_t) * (6 * (int64_t)gmax + 4 * (int64_t)smax));
  int32_t *g = blk, *r = blk + 6 * (int64_t)gmax, R = 0;
  int G = resolve_core(n, s->nb, s->out, s->bend, s->arity, s->argflat, s->loc, s->loc + n, g, g + gmax,
                       g + 2 * gmax, g + 3 * gmax, g + 4 * gmax, g + 5 * gmax, r, r + smax, r + 2 * smax,
                       r + 3 * smax, &R);
  int32_t *gb = g, *gk = g + gmax, *gr = g + 2 * gmax, *gn = g + 3 * gmax, *gs = g + 4 * gmax, *gu = g + 5 * gmax;
  int32_t *rb = r, *ro = r + smax, *rr = r + 2 * smax, *re = r + 3 * smax;
  PyObject *steps = PyList_New(s->nb), *gathers = PyList_New(0);
  for (int b = 0; b < s->nb; b++) PyList_SET_ITEM(steps, b, PyList_New(0));
  for (int i = 0; i < G; i++) {
    int f = gr[i], k = gs[i];
    PyObject *spec;
    if (gk[i] == 0) {
      spec = tup4(sview, rb[f], ro[f], rr[f], re[f]);
    } else if (gk[i] == 1) {
      spec = tup4(sbcast, rb[f], ro[f], rr[f], k);
    } else {
      PyObject *runs = PyList_New(gn[i]);
      for (int j = 0; j < gn[i]; j++)
        PyList_SET_ITEM(runs, j, tup4(NULL, rb[f + j], ro[f + j], rr[f + j], re[f + j]));
      spec = Py_BuildValue("(ONO)", sgather, runs, Py_None);
      PyObject *lst = PyList_GET_ITEM(steps, gb[i]);
      PyObject *gi = Py_BuildValue("(iiiii)", gb[i], (int)PyList_GET_SIZE(lst), k, gu[i], ro[f]);
      PyList_Append(gathers, gi);
      Py_DECREF(gi);
    }
    PyList_Append(PyList_GET_ITEM(steps, gb[i]), spec);
    Py_DECREF(spec);
  }
  free(blk);
  return Py_BuildValue("(NN)", steps, gathers);
}
#endif

#ifdef DB_PYLIST
/* One gather of the executor over runs (b, o, r0, r1): rows r0..r1 of output o of batch b, back to back in buf
   (rb bytes a row, at most cap rows). ptrs/rows/grad[b * mo + o]: address, row count, and whether autograd must
   see reads of that output (ptrs 0: not readable as plain fp32 rows).
   mode 0: copy into buf, refusing (-2) a run whose source needs grad; mode 1: copy, grad or not (the forward of the
   differentiable gather); mode 2: the backward, buf holds the gradient of the gathered rows and ptrs the gradient
   buffers of the sources: add each run's rows into them (a row gathered twice gets both).
   Returns the rows covered, or -1 (a malformed or out-of-range run: the caller gathers with torch). */
long long dbx_gather(PyObject *runs, const int64_t *ptrs, const int64_t *rows, const int8_t *grad, int nsrc, int mo,
                     char *buf, long long rb, long long cap, int mode) {
  PyObject *seq = PySequence_Fast(runs, "runs");
  if (!seq) { PyErr_Clear(); return -1; }
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  PyObject **it = PySequence_Fast_ITEMS(seq);
  long long done = 0;
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *t = it[i];
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 4) { done = -1; break; }
    long b = PyLong_AsLong(PyTuple_GET_ITEM(t, 0)), o = PyLong_AsLong(PyTuple_GET_ITEM(t, 1));
    long r0 = PyLong_AsLong(PyTuple_GET_ITEM(t, 2)), r1 = PyLong_AsLong(PyTuple_GET_ITEM(t, 3));
    long long slot = (long long)b * mo + o;
    if (PyErr_Occurred() || b < 0 || o < 0 || o >= mo || slot >= nsrc || !ptrs[slot] || r0 < 0 || r1 < r0 ||
        r1 > rows[slot] || done + (r1 - r0) > cap) { PyErr_Clear(); done = -1; break; }
    if (mode == 0 && grad[slot]) { done = -2; break; }
    char *src = (char *)(intptr_t)ptrs[slot] + (long long)r0 * rb;
    size_t nb = (size_t)((r1 - r0) * rb);
    if (mode == 2) {
      float *d = (float *)src;
      const float *g = (const float *)(buf + done * rb);
      for (size_t e = 0; e < nb / sizeof(float); e++) d[e] += g[e];
    } else {
      memcpy(buf + done * rb, src, nb);
    }
    done += r1 - r0;
  }
  Py_DECREF(seq);
  return done;
}
#endif

/* batch (which 0) or row (which 1) of node v after dbs_steps_py */
long long dbs_loc(void *p, int v, int which) { Sim *s = p; return s->loc[(int64_t)which * s->n + v]; }

int dbs_ngroups(void *p) {
  Sim *s = p;
  int G = 0;
  for (int b = 0, a = 0; b < s->nb; b++) { G += s->arity[s->out[a]]; a = s->bend[b]; }
  return G;
}
int dbs_nslots(void *p) { return ((Sim *)p)->nslots; }

/* ---- beam search over type sequences (the FSM's search step on graphs it does not schedule optimally) ----------
   A state is an executed set; a move runs every ready node of one type (then the unbatchable nodes it frees).
   Score of a state: sum over components (instances) of r_k^p, r_k = the largest height of an unexecuted node of
   instance k (0 when none): how far each instance still is from its end, the longest weighted most. Every
   unexecuted node at height r_k is ready (its ancestors are higher), so a move of type t lowers r_k by exactly one
   when all of them have type t (crit_k == {t}) and leaves it otherwise: children are scored without being built,
   and only the W best distinct ones (Zobrist hash of the executed set) are materialised. */
static int maxpath_counts(Sim *s, int *best);
static int head_tail(Sim *s, const int *best, char *role, int *order);
typedef struct { uint64_t *ex, *rd; int *r; uint64_t *crit; int *cnt; uint64_t *zr; long long *gain; uint64_t hz;
                 long long score; int n0; } BState;
typedef struct { long long score; uint64_t hz; int parent, t; } BCand;

/* candidate order: score, then parent (beam order), then type */
static inline int bc_less(const BCand *x, const BCand *y) {
  if (x->score != y->score) return x->score < y->score;
  if (x->parent != y->parent) return x->parent < y->parent;
  return x->t < y->t;
}

/* binary min-heap on bc_less: the beam only takes the first W distinct candidates, so a heap pops those
   (W log nc) instead of sorting all nc */
static void bc_sift(BCand *a, int n, int i) {
  for (;;) {
    int l = 2 * i + 1, m = i;
    if (l < n && bc_less(&a[l], &a[m])) m = l;
    if (l + 1 < n && bc_less(&a[l + 1], &a[m])) m = l + 1;
    if (m == i) return;
    BCand t = a[i]; a[i] = a[m]; a[m] = t;
    i = m;
  }
}

/* Returns the number of types written to seq (heads, the searched steps, tails), or -1 (more than 64 types, a
   sequence longer than maxsteps, no memory). The search runs on the core nodes only, renumbered densely. */
static int beam_run(Sim *s, int W, int power, int32_t *seq, int maxsteps, const int *best0);

int dbs_beam(void *p, int W, int power, int32_t *seq, int maxsteps) {
  return beam_run(p, W, power, seq, maxsteps, NULL);
}

/* best0: the per-type path maxima when the caller has them (NULL: computed here) */
static int beam_run(Sim *s, int W, int power, int32_t *seq, int maxsteps, const int *best0) {
  void *p = s;
  int n = s->n, nt = s->nt, ret = -1;
  if (nt > 64 || W < 1 || n < 1) return -1;
  dbs_heights(p, NULL);
  int *best = calloc(nt + 1, sizeof(int)), *torder = malloc(sizeof(int) * (nt + 1));
  char *role = calloc(nt + 1, 1);
  int *root = malloc(sizeof(int) * n), *comp = malloc(sizeof(int) * n), *cid = malloc(sizeof(int) * n);
  int *map = malloc(sizeof(int) * n);
  /* everything below is declared up front so that one cleanup path frees it */
  int *ctype = NULL, *ch = NULL, *ccomp = NULL, *csptr = NULL, *csidx = NULL, *cpptr = NULL, *cpidx = NULL;
  int *maxh = NULL, *base = NULL, *lvoff = NULL, *lvnode = NULL, *hpar = NULL, *htyp = NULL, *queue = NULL;
  int *touched = NULL;
  long long *pw = NULL;
  uint64_t *tmask = NULL, *Z = NULL, *seen = NULL;
  char *mem = NULL, *tflag = NULL;
  BState *pool = NULL;
  BCand *cand = NULL;
  if (!best || !torder || !role || !root || !comp || !cid || !map) goto out;
  if (best0) memcpy(best, best0, sizeof(int) * nt);
  else if (maxpath_counts(s, best) < 0) goto out;
  int ntail = head_tail(s, best, role, torder), nhead = 0;
  for (int t = 1; t < nt; t++) if (role[t] == 1) nhead++;
  /* components of the whole graph (union-find), numbered by first node id */
  for (int v = 0; v < n; v++) root[v] = v;
  for (int v = 0, e = 0; v < n; v++)
    for (int j = 0; j < s->arity[v]; j++, e++) {
      int a = v, b = (int)s->argflat[2 * e];
      while (root[a] != a) { root[a] = root[root[a]]; a = root[a]; }
      while (root[b] != b) { root[b] = root[root[b]]; b = root[b]; }
      if (a != b) root[a] = b;
    }
  int K = 0;
  for (int v = 0; v < n; v++) cid[v] = -1;
  for (int v = 0; v < n; v++) {
    int a = v;
    while (root[a] != a) a = root[a];
    if (cid[a] < 0) cid[a] = K++;
    comp[v] = cid[a];
  }
  /* the core graph: nodes of non-head, non-tail types; edges between core nodes (a head argument is executed
     from the start, a tail successor never blocks anything) */
  int m = 0, ne = 0;
  for (int v = 0; v < n; v++) map[v] = role[s->types[v]] ? -1 : m++;
  ctype = malloc(sizeof(int) * (m + 1)); ch = malloc(sizeof(int) * (m + 1)); ccomp = malloc(sizeof(int) * (m + 1));
  csptr = calloc(m + 1, sizeof(int)); cpptr = calloc(m + 1, sizeof(int));
  Z = malloc(sizeof(uint64_t) * (m + 1));
  if (!ctype || !ch || !ccomp || !csptr || !cpptr || !Z) goto out;
  uint64_t x = 0x9E3779B97F4A7C15ULL;
  for (int v = 0, e = 0; v < n; v++) {
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;  /* the keys of the original ids (the Python twin's) */
    int i = map[v];
    if (i < 0) { e += s->arity[v]; continue; }
    ctype[i] = s->types[v]; ch[i] = s->h[v]; ccomp[i] = comp[v]; Z[i] = x * 0x2545F4914F6CDD1DULL;
    for (int j = 0; j < s->arity[v]; j++, e++) {
      int a = map[s->argflat[2 * e]];
      if (a >= 0) { cpptr[i + 1]++; csptr[a + 1]++; ne++; }
    }
  }
  for (int i = 0; i < m; i++) { cpptr[i + 1] += cpptr[i]; csptr[i + 1] += csptr[i]; }
  cpidx = malloc(sizeof(int) * (ne + 1)); csidx = malloc(sizeof(int) * (ne + 1));
  queue = malloc(sizeof(int) * (m + 1));
  if (!cpidx || !csidx || !queue) goto out;
  memcpy(queue, csptr, sizeof(int) * m);  /* fill pointers */
  for (int v = 0, e = 0; v < n; v++) {
    int i = map[v];
    if (i < 0) { e += s->arity[v]; continue; }
    int k = cpptr[i];
    for (int j = 0; j < s->arity[v]; j++, e++) {
      int a = map[s->argflat[2 * e]];
      if (a >= 0) { cpidx[k++] = a; csidx[queue[a]++] = i; }
    }
  }
  /* per component, the core nodes at each height level (CSR over (component, level)) */
  maxh = calloc(K + 1, sizeof(int)); base = malloc(sizeof(int) * (K + 1));
  if (!maxh || !base) goto out;
  for (int i = 0; i < m; i++) if (ch[i] > maxh[ccomp[i]]) maxh[ccomp[i]] = ch[i];
  base[0] = 0;
  for (int k = 0; k < K; k++) base[k + 1] = base[k] + maxh[k] + 1;
  lvoff = calloc(base[K] + 2, sizeof(int)); lvnode = malloc(sizeof(int) * (m + 1));
  if (!lvoff || !lvnode) goto out;
  for (int i = 0; i < m; i++) lvoff[base[ccomp[i]] + ch[i] + 1]++;
  for (int i = 0; i < base[K]; i++) lvoff[i + 1] += lvoff[i];
  {
    int *fill = malloc(sizeof(int) * (base[K] + 1));
    if (!fill) goto out;
    memcpy(fill, lvoff, sizeof(int) * (base[K] + 1));
    for (int i = 0; i < m; i++) lvnode[fill[base[ccomp[i]] + ch[i]]++] = i;
    free(fill);
  }
  int hmax = 0;
  for (int k = 0; k < K; k++) if (maxh[k] > hmax) hmax = maxh[k];
  pw = malloc(sizeof(long long) * (hmax + 2));
  int nw = (m + 63) / 64;
  tmask = calloc((size_t)nt * nw + 1, sizeof(uint64_t));
  if (!pw || !tmask) goto out;
  /* integer scores (exact, so any summation order gives the same ties as the Python twin): the power is lowered
     until hmax^power * (K + 1) fits in 62 bits */
  long long lim = (1LL << 62) / (K + 1);
  for (; power > 1; power--) {
    long long y = 1;
    int ok = 1;
    for (int i = 0; i < power && ok; i++) { if (hmax && y > lim / hmax) ok = 0; else y *= hmax; }
    if (ok) break;
  }
  for (int r = 0; r <= hmax + 1 && r >= 0; r++) {
    long long y = 1;
    for (int i = 0; i < power; i++) y *= r;
    pw[r] = r <= hmax ? y : pw[r - 1];  /* r = hmax + 1 is never used */
  }
  for (int i = 0; i < m; i++) tmask[(size_t)ctype[i] * nw + i / 64] |= 1ULL << (i % 64);
  /* state pools: every array of a state lies in one block from ex on (one memcpy copies a state) */
  size_t ssz = sizeof(uint64_t) * (2 * nw + K + 2 * nt) + sizeof(int) * (K + nt);
  ssz = (ssz + 7) / 8 * 8;  /* the next state's uint64 arrays stay aligned */
  mem = malloc(ssz * 2 * W); pool = malloc(sizeof(BState) * 2 * W);
  int hcap = 256;
  hpar = malloc(sizeof(int) * (size_t)hcap * W); htyp = malloc(sizeof(int) * (size_t)hcap * W);
  cand = malloc(sizeof(BCand) * (size_t)W * nt); touched = malloc(sizeof(int) * (K + 1));
  tflag = calloc(K + 1, 1); seen = malloc(sizeof(uint64_t) * W);
  if (!mem || !pool || !hpar || !htyp || !cand || !touched || !tflag || !seen) goto out;
  for (int i = 0; i < 2 * W; i++) {
    char *q = mem + ssz * i;
    pool[i].ex = (uint64_t *)q; q += sizeof(uint64_t) * nw;
    pool[i].rd = (uint64_t *)q; q += sizeof(uint64_t) * nw;
    pool[i].crit = (uint64_t *)q; q += sizeof(uint64_t) * K;
    pool[i].zr = (uint64_t *)q; q += sizeof(uint64_t) * nt;
    pool[i].gain = (long long *)q; q += sizeof(long long) * nt;
    pool[i].r = (int *)q; q += sizeof(int) * K;
    pool[i].cnt = (int *)q;
  }

#define BIT(a, v) (((a)[(v) / 64] >> ((v) % 64)) & 1ULL)
  /* run core node v in state S: mark it, free its successors (unbatchable ones queued) */
  #define RUN_NODE(S, v, qn) do { \
    int v_ = (v); \
    (S)->ex[v_ / 64] |= 1ULL << (v_ % 64); (S)->rd[v_ / 64] &= ~(1ULL << (v_ % 64)); \
    if (ch[v_] >= (S)->r[ccomp[v_]] && !tflag[ccomp[v_]]) { tflag[ccomp[v_]] = 1; touched[ntouch++] = ccomp[v_]; } \
    for (int e_ = csptr[v_]; e_ < csptr[v_ + 1]; e_++) { \
      int w_ = csidx[e_]; \
      if (BIT((S)->ex, w_) || BIT((S)->rd, w_)) continue; \
      int ok_ = 1; \
      for (int f_ = cpptr[w_]; f_ < cpptr[w_ + 1]; f_++) if (!BIT((S)->ex, cpidx[f_])) { ok_ = 0; break; } \
      if (!ok_) continue; \
      (S)->rd[w_ / 64] |= 1ULL << (w_ % 64); \
      int tw_ = ctype[w_]; \
      if (tw_ == 0) queue[qn++] = w_; else { (S)->cnt[tw_]++; (S)->zr[tw_] ^= Z[w_]; } \
    } } while (0)
  /* r_k: the highest level with an unexecuted node; crit_k: the types there */
  #define SETTLE(S, k, r, cm) do { \
    for (;;) { \
      cm = 0; \
      for (int j_ = lvoff[base[k] + r]; j_ < lvoff[base[k] + r + 1]; j_++) \
        if (!BIT((S)->ex, lvnode[j_])) cm |= 1ULL << ctype[lvnode[j_]]; \
      if (cm || r == 0) break; \
      r--; \
    } } while (0)

  /* gain[t]: how much a type-t move lowers the score (components whose highest level is all type t) */
  #define GAIN(S, k, op) do { \
    uint64_t c_ = (S)->crit[k]; \
    if (c_ && !(c_ & (c_ - 1)) && (S)->r[k] > 0) \
      (S)->gain[__builtin_ctzll(c_)] op##= pw[(S)->r[k]] - pw[(S)->r[k] - 1]; \
  } while (0)

  int ntouch = 0;
  /* initial state: core sources ready, unbatchable ones drained */
  BState *S0 = &pool[0];
  memset(S0->ex, 0, ssz);
  S0->hz = 0; S0->n0 = 0;
  {
    int qn = 0, qh = 0;
    for (int i = 0; i < m; i++) if (cpptr[i] == cpptr[i + 1]) {
      S0->rd[i / 64] |= 1ULL << (i % 64);
      if (ctype[i] == 0) queue[qn++] = i; else { S0->cnt[ctype[i]]++; S0->zr[ctype[i]] ^= Z[i]; }
    }
    while (qh < qn) { int v = queue[qh++]; S0->n0++; RUN_NODE(S0, v, qn); }
    for (int i = 0; i < ntouch; i++) tflag[touched[i]] = 0;
    ntouch = 0;
  }
  S0->score = 0;
  for (int k = 0; k < K; k++) {
    int r = maxh[k];
    uint64_t cm;
    SETTLE(S0, k, r, cm);
    S0->r[k] = r; S0->crit[k] = cm; S0->score += pw[r];
    GAIN(S0, k, +);
  }
  BState *cur = pool, *nxt = pool + W;
  int nb = 1, step = 0;
  while (nb > 0) {
    /* a finished state (nothing ready) ends the search: the first in beam order */
    for (int i = 0; i < nb && ret < 0; i++) {
      int any = 0;
      for (int t = 1; t < nt; t++) if (cur[i].cnt[t]) { any = 1; break; }
      if (any) continue;
      if (nhead + step + ntail > maxsteps) goto out;
      for (int t = 1, j = 0; t < nt; t++) if (role[t] == 1) seq[j++] = t;
      for (int j = step - 1, b = i; j >= 0; j--) {
        seq[nhead + j] = htyp[(size_t)j * W + b];
        b = hpar[(size_t)j * W + b];
      }
      for (int j = 0; j < ntail; j++) seq[nhead + step + j] = torder[j];
      ret = nhead + step + ntail;
    }
    if (ret >= 0) break;
    if (step == hcap) {  /* grow the history */
      hcap *= 2;
      int *a = realloc(hpar, sizeof(int) * (size_t)hcap * W), *b = a ? realloc(htyp, sizeof(int) * (size_t)hcap * W) : NULL;
      if (a) hpar = a;
      if (b) htyp = b;
      if (!a || !b) goto out;
    }
    int nc = 0;
    for (int i = 0; i < nb; i++) {
      BState *S = &cur[i];
      for (int t = 1; t < nt; t++) if (S->cnt[t]) {
        cand[nc].score = S->score - S->gain[t]; cand[nc].hz = S->hz ^ S->zr[t];
        cand[nc].parent = i; cand[nc].t = t; nc++;
      }
    }
    for (int i = nc / 2 - 1; i >= 0; i--) bc_sift(cand, nc, i);
    int nn = 0;
    while (nc > 0 && nn < W) {
      BCand cb = cand[0];
      cand[0] = cand[--nc];
      bc_sift(cand, nc, 0);
      int dup = 0;
      for (int j = 0; j < nn; j++) if (seen[j] == cb.hz) { dup = 1; break; }
      if (dup) continue;
      seen[nn] = cb.hz;
      BState *P = &cur[cb.parent], *C = &nxt[nn];
      memcpy(C->ex, P->ex, ssz);
      C->hz = cb.hz; C->n0 = P->n0;
      int t = cb.t, qn = 0, qh = 0;
      ntouch = 0;
      uint64_t *tm = tmask + (size_t)t * nw;
      C->cnt[t] = 0; C->zr[t] = 0;  /* before the batch runs: it may free type-t successors (the next frontier) */
      for (int wi = 0; wi < nw; wi++) {
        uint64_t b = P->rd[wi] & tm[wi];
        while (b) { int v = wi * 64 + __builtin_ctzll(b); b &= b - 1; RUN_NODE(C, v, qn); }
      }
      while (qh < qn) { int v = queue[qh++]; C->n0++; RUN_NODE(C, v, qn); }
      for (int i = 0; i < ntouch; i++) {
        int k = touched[i], r = C->r[k];
        uint64_t cm;
        tflag[k] = 0;
        GAIN(C, k, -);
        SETTLE(C, k, r, cm);
        C->r[k] = r; C->crit[k] = cm;
        GAIN(C, k, +);
      }
      long long sc = P->score;
      for (int i = 0; i < ntouch; i++) sc += pw[C->r[touched[i]]] - pw[P->r[touched[i]]];
      C->score = sc;
      hpar[(size_t)step * W + nn] = cb.parent;
      htyp[(size_t)step * W + nn] = t;
      nn++;
    }
    BState *tmp = cur; cur = nxt; nxt = tmp;
    nb = nn;
    step++;
  }
#undef SETTLE
#undef GAIN
#undef RUN_NODE
#undef BIT
out:
  free(best); free(torder); free(role); free(root); free(comp); free(cid); free(map);
  free(ctype); free(ch); free(ccomp); free(csptr); free(csidx); free(cpptr); free(cpidx);
  free(maxh); free(base); free(lvoff); free(lvnode); free(hpar); free(htyp); free(queue); free(touched);
  free(pw); free(tmask); free(Z); free(seen); free(mem); free(tflag); free(pool); free(cand);
  return ret;
}

/* a fresh simulator over the same graph (static arrays copied, nothing run yet, sources pushed) */
void *dbs_clone(void *p) {
  Sim *o = p;
  Sim *s = alloc_sim(o->n, o->nt, o->nslots);
  memcpy(s->types, o->types, sizeof(int) * o->n);
  memcpy(s->arity, o->arity, sizeof(int) * o->n);
  memcpy(s->argflat, o->argflat, sizeof(int64_t) * 2 * o->nslots);
  build(s);
  if (o->h) { s->h = malloc(sizeof(int) * (o->n + 1)); memcpy(s->h, o->h, sizeof(int) * o->n); }
  dbs_start(s);
  return s;
}

/* the critical-path policy to the end in one call (the FSM with an empty table: every state misses and the
   fallback decides); returns the number of decisions among several ready types, -1 on a corrupt graph */
int dbs_run_cp(void *p) {
  Sim *s = p;
  int32_t *buf = malloc(sizeof(int32_t) * (s->nt + 1));
  if (!buf) return -1;
  int decisions = 0, k = dbs_next(p, -1, buf);
  while (k > 0) {
    int t = buf[0];
    if (k > 1) { t = dbs_cp(p); decisions++; }
    k = dbs_next(p, t, buf);
  }
  free(buf);
  return (k < 0 || s->executed != s->n) ? -1 : decisions;
}

/* The FSM's search step in one call: the type-wise bound into *lb; when it is below `threshold` (the batches of
   the schedule in hand), the beam search, replayed into this (fresh) simulator. Returns the search's batch count,
   0 when the bound already equals the threshold (no search), -1 on failure. */
int dbs_search(void *p, int W, int power, int threshold, int32_t *lb) {
  Sim *s = p;
  int *best = calloc(s->nt + 1, sizeof(int));
  int b = best ? maxpath_counts(s, best) : -1;
  if (b >= 0) for (int t = 1; t < s->nt; t++) b += best[t];
  *lb = b;
  if (b < 0 || b >= threshold) { free(best); return b < 0 ? -1 : 0; }
  int32_t *seq = malloc(sizeof(int32_t) * (s->n + 1)), *buf = malloc(sizeof(int32_t) * (s->nt + 1));
  int k = (seq && buf) ? beam_run(s, W, power, seq, s->n + 1, best) : -1, ret = -1;
  free(best);
  if (k >= 0 && dbs_next(p, -1, buf) >= 0) {
    int i = 0;
    while (i < k && dbs_next(p, seq[i], buf) >= 0) i++;
    if (i == k && s->executed == s->n) ret = s->nb;
  }
  free(seq); free(buf);
  return ret;
}

/* per batchable type: the most type-t nodes on one path (best[t]); returns #unbatchable nodes, -1 on no memory */
static int maxpath_counts(Sim *s, int *best) {
  int n = s->n, nt = s->nt;
  int *c = calloc((size_t)n * nt + 1, sizeof(int));
  if (!c) return -1;
  int unb = 0, e = 0;
  for (int v = 0; v < n; v++) {
    int *cv = c + (size_t)v * nt;
    for (int j = 0; j < s->arity[v]; j++, e++) {
      int *cp = c + (size_t)s->argflat[2 * e] * nt;
      for (int t = 1; t < nt; t++) if (cp[t] > cv[t]) cv[t] = cp[t];
    }
    if (s->types[v]) { if (++cv[s->types[v]] > best[s->types[v]]) best[s->types[v]] = cv[s->types[v]]; }
    else unb++;
  }
  free(c);
  return unb;
}

/* Types the search can leave out (role 1: head, 2: tail), and the tail types in a runnable order (returns their
   number). A head type has only source nodes: one batch of it first is its minimum and frees the same nodes as
   any other schedule. A tail type's nodes only feed tail-type nodes, at most one of its nodes lies on any path,
   and the tail types are acyclic: one batch of each at the end, in that order, is their minimum. Restricting an
   optimal schedule to the other (core) types gives a schedule of the core problem, so
   heads + best core schedule + tails is optimal when the core schedule is. */
static int head_tail(Sim *s, const int *best, char *role, int *order) {
  int n = s->n, nt = s->nt;
  for (int t = 0; t < nt; t++) role[t] = t ? 1 : 0;
  for (int v = 0; v < n; v++) if (s->arity[v]) role[s->types[v]] = 0;
  for (int t = 0; t < nt; t++) if (t && !role[t] && best[t] == 1) role[t] = 2;
  int *indeg = malloc(sizeof(int) * (nt + 1)), norder = 0;
  char *edge = calloc((size_t)nt * nt + 1, 1);
  for (;;) {
    for (int changed = 1; changed;) {  /* closure: a tail node feeds tail nodes only */
      changed = 0;
      for (int v = 0; v < n; v++) {
        if (role[s->types[v]] != 2) continue;
        for (int e = s->sptr[v]; e < s->sptr[v + 1]; e++)
          if (role[s->types[s->sidx[e]]] != 2) { role[s->types[v]] = 0; changed = 1; break; }
      }
    }
    memset(edge, 0, (size_t)nt * nt);
    for (int v = 0; v < n; v++) if (role[s->types[v]] == 2)
      for (int e = s->sptr[v]; e < s->sptr[v + 1]; e++) edge[(size_t)s->types[v] * nt + s->types[s->sidx[e]]] = 1;
    for (int t = 0; t < nt; t++) indeg[t] = 0;
    for (int a = 0; a < nt; a++) for (int b = 0; b < nt; b++) if (edge[(size_t)a * nt + b] && a != b) indeg[b]++;
    norder = 0;
    int ntail = 0;
    for (int t = 0; t < nt; t++) if (role[t] == 2) { ntail++; if (!indeg[t]) order[norder++] = t; }
    for (int i = 0; i < norder; i++)
      for (int b = 0; b < nt; b++)
        if (b != order[i] && edge[(size_t)order[i] * nt + b] && --indeg[b] == 0) order[norder++] = b;
    if (norder == ntail) break;
    for (int t = 0; t < nt; t++) if (role[t] == 2 && indeg[t] > 0) role[t] = 0;  /* on a type cycle: core */
  }
  free(indeg); free(edge);
  return norder;
}
