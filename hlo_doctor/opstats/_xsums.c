/* The op sums of a host's events in one compiled pass (wrapped by hlo_doctor.opstats.totals._sums,
   whose numpy loop it replaces, and which judges it: tests/opstats/test_sums_compiled.py).

   Per op (a group of (module, program id, op)): its occurrences, time and self time; per (step, op):
   its time; which devices ran it. The floats are the numpy loop's, bit for bit: the events are taken
   a chunk at a time, each chunk's sums are made in event order from zero, and then added to the
   totals, as np.bincount's per-chunk sums were. An index the numpy loop would read from the end of an
   array (a negative code in a hostile file) or past it is no error here: the call returns None and
   the numpy loop runs instead, with whatever it does. An extension of its own beside the trace's
   (_xwire.c, _xsegments.c): optional as they are; where it is not built, the numpy loop runs. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* A signed integer of 1, 2, 4 or 8 bytes from a column of that width. */
static inline int64_t at(const char *buf, Py_ssize_t width, Py_ssize_t i) {
    switch (width) {
    case 1: return ((const int8_t *)buf)[i];
    case 2: return ((const int16_t *)buf)[i];
    case 4: return ((const int32_t *)buf)[i];
    default: return ((const int64_t *)buf)[i];
    }
}

/* Columns are read a block at a time into int64 (the width switched once a block, not once an
   element: the loops over a block then read plain arrays). */
#define BLOCK 2048

static void load(const char *buf, Py_ssize_t width, Py_ssize_t a, Py_ssize_t len, int64_t *out) {
    switch (width) {
    case 1: for (Py_ssize_t i = 0; i < len; i++) out[i] = ((const int8_t *)buf)[a + i]; break;
    case 2: for (Py_ssize_t i = 0; i < len; i++) out[i] = ((const int16_t *)buf)[a + i]; break;
    case 4: for (Py_ssize_t i = 0; i < len; i++) out[i] = ((const int32_t *)buf)[a + i]; break;
    default: memcpy(out, (const int64_t *)buf + a, (size_t)len * sizeof(int64_t)); break;
    }
}

static int int_column(Py_buffer *b, const char *name, Py_ssize_t n) {
    Py_ssize_t w = b->itemsize;
    if ((w != 1 && w != 2 && w != 4 && w != 8) || b->len != n * w) {
        PyErr_Format(PyExc_ValueError, "%s: a column of %zd integers of 1, 2, 4 or 8 bytes", name, n);
        return -1;
    }
    return 0;
}

static int sized(Py_buffer *b, const char *name, Py_ssize_t count, Py_ssize_t width) {
    if (b->len != count * width) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes, expected %zd", name, b->len, count * width);
        return -1;
    }
    return 0;
}

/* chunk_sums(module, program_id, op, n_p, n_o, lookup, occurrences, duration, self, host, device, width,
              step_of, place, lo, steps, chunk, out_occurrences, out_total, out_self, out_on_device,
              out_by_step) -> True, or None where the numpy loop must run.
   Columns of n events: module/program_id/op/host/device codes, occurrences and step_of integers of any
   width, duration and self float64. lookup: int64, the group of each dense key
   ((module * n_p + program_id) * n_o + op). Steps: the label of each event (< 0: none) is placed by
   place[label - lo] where place is not empty, else by its index in steps (sorted int64). Outputs:
   float64 [g] x3, bool [g, cols] and float64 [s, g] (row-major), added into. */
static PyObject *chunk_sums(PyObject *self, PyObject *args) {
    Py_buffer mb = {0}, pb = {0}, ob = {0}, lb = {0}, cb = {0}, db = {0}, sb = {0}, hb = {0}, vb = {0};
    Py_buffer stb = {0}, plb = {0}, spb = {0}, o1 = {0}, o2 = {0}, o3 = {0}, o4 = {0}, o5 = {0};
    long long n_p, n_o, width, lo, chunk;
    PyObject *result = NULL;
    double *scratch = NULL, *cell = NULL;
    int32_t *ks = NULL, *qs = NULL; /* a chunk's groups and step places, from pass 1 for pass 2 */
    int64_t *blocks = NULL;         /* a block of each integer column (load) */
    if (!PyArg_ParseTuple(args, "y*y*y*LLy*y*y*y*y*y*Ly*y*Ly*Lw*w*w*w*w*", &mb, &pb, &ob, &n_p, &n_o, &lb, &cb, &db,
                          &sb, &hb, &vb, &width, &stb, &plb, &lo, &spb, &chunk, &o1, &o2, &o3, &o4, &o5))
        return NULL;
    Py_ssize_t n = db.len / (Py_ssize_t)sizeof(double);
    Py_ssize_t space = lb.len / (Py_ssize_t)sizeof(int64_t);
    Py_ssize_t g = o1.len / (Py_ssize_t)sizeof(double);
    Py_ssize_t cols = g ? o4.len / g : 0;
    Py_ssize_t s = g ? o5.len / ((Py_ssize_t)sizeof(double) * g) : 0;
    Py_ssize_t places = plb.len / (Py_ssize_t)sizeof(int64_t), nsteps = spb.len / (Py_ssize_t)sizeof(int64_t);
    if (int_column(&mb, "module", n) || int_column(&pb, "program_id", n) || int_column(&ob, "op", n) ||
        int_column(&cb, "occurrences", n) || int_column(&hb, "host", n) || int_column(&vb, "device", n) ||
        int_column(&stb, "step_of", n) || sized(&sb, "self", n, sizeof(double)) ||
        sized(&o2, "total", g, sizeof(double)) || sized(&o3, "self_ns", g, sizeof(double)) ||
        sized(&o4, "on_device", g, cols) || sized(&o5, "by_step", s * g, sizeof(double)))
        goto done;
    if (chunk <= 0 || n_p <= 0 || n_o <= 0 || width <= 0) {
        PyErr_SetString(PyExc_ValueError, "chunk, n_p, n_o and width must be positive");
        goto done;
    }
    if (g == 0 || n == 0) {
        result = n == 0 ? Py_NewRef(Py_True) : Py_NewRef(Py_None);
        goto done;
    }
    if (g > INT32_MAX || s > INT32_MAX) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    Py_ssize_t per = (Py_ssize_t)chunk < n ? (Py_ssize_t)chunk : n;
    scratch = (double *)PyMem_RawCalloc((size_t)(3 * g), sizeof(double));
    ks = (int32_t *)PyMem_RawMalloc((size_t)per * sizeof(int32_t));
    qs = (int32_t *)PyMem_RawMalloc((size_t)per * sizeof(int32_t));
    blocks = (int64_t *)PyMem_RawMalloc((size_t)(7 * BLOCK) * sizeof(int64_t));
    if (!scratch || !ks || !qs || !blocks) {
        PyErr_NoMemory();
        goto done;
    }
    {
        const char *m = mb.buf, *p = pb.buf, *o = ob.buf, *c = cb.buf, *h = hb.buf, *v = vb.buf, *st = stb.buf;
        const int64_t *lookup = lb.buf, *place = plb.buf, *steps = spb.buf;
        const double *dur = db.buf, *selfns = sb.buf;
        double *occ_out = o1.buf, *total = o2.buf, *self_out = o3.buf, *by_step = o5.buf;
        uint8_t *on_device = o4.buf;
        double *c_occ = scratch, *c_total = scratch + g, *c_self = scratch + 2 * g;
        int64_t *bm = blocks, *bp = blocks + BLOCK, *bo = blocks + 2 * BLOCK, *bc = blocks + 3 * BLOCK,
                *bh = blocks + 4 * BLOCK, *bv = blocks + 5 * BLOCK, *bs = blocks + 6 * BLOCK;
        Py_ssize_t cell_cap = 0;
        int fallback = 0, nomem = 0;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t a = 0; a < n && !fallback && !nomem; a += (Py_ssize_t)chunk) {
            Py_ssize_t b = a + (Py_ssize_t)chunk < n ? a + (Py_ssize_t)chunk : n;
            memset(scratch, 0, (size_t)(3 * g) * sizeof(double));
            int64_t first = INT64_MAX, last = -1;
            /* Pass 1: the op sums, the devices, and the steps this chunk spans. */
            for (Py_ssize_t i0 = a; i0 < b && !fallback; i0 += BLOCK) {
              Py_ssize_t len = b - i0 < BLOCK ? b - i0 : BLOCK;
              load(m, mb.itemsize, i0, len, bm);
              load(p, pb.itemsize, i0, len, bp);
              load(o, ob.itemsize, i0, len, bo);
              load(c, cb.itemsize, i0, len, bc);
              load(h, hb.itemsize, i0, len, bh);
              load(v, vb.itemsize, i0, len, bv);
              load(st, stb.itemsize, i0, len, bs);
              for (Py_ssize_t j = 0; j < len; j++) {
                Py_ssize_t i = i0 + j;
                int64_t key = (bm[j] * n_p + bp[j]) * n_o + bo[j];
                if (key < 0 || key >= space) { fallback = 1; break; }
                int64_t k = lookup[key];
                if (k < 0 || k >= g) { fallback = 1; break; }
                c_occ[k] += (double)bc[j];
                c_total[k] += dur[i];
                c_self[k] += selfns[i];
                int64_t d = bh[j] * width + bv[j];
                if (d < 0 || d >= cols) { fallback = 1; break; }
                on_device[k * cols + d] = 1;
                ks[i - a] = (int32_t)k;
                qs[i - a] = -1;
                int64_t label = bs[j];
                if (label >= 0) {
                    int64_t q;
                    if (places) {
                        if (label - lo < 0 || label - lo >= places) { fallback = 1; break; }
                        q = place[label - lo];
                    } else {
                        Py_ssize_t l = 0, r = nsteps; /* the first step >= label */
                        while (l < r) {
                            Py_ssize_t mid = l + (r - l) / 2;
                            if (steps[mid] < label) l = mid + 1; else r = mid;
                        }
                        q = l;
                    }
                    if (q < 0 || q >= s) { fallback = 1; break; }
                    qs[i - a] = (int32_t)q;
                    if (q < first) first = q;
                    if (q > last) last = q;
                }
              }
            }
            if (fallback) break;
            for (Py_ssize_t k = 0; k < g; k++) {
                occ_out[k] += c_occ[k];
                total[k] += c_total[k];
                self_out[k] += c_self[k];
            }
            if (last < 0) continue;
            /* Pass 2: each (step, op) cell's sum over the chunk, from zero, then added to its total. */
            Py_ssize_t cells = (Py_ssize_t)(last - first + 1) * g;
            if (cells > cell_cap) {
                double *grown = (double *)PyMem_RawRealloc(cell, (size_t)cells * sizeof(double));
                if (!grown) { nomem = 1; break; }
                cell = grown;
                cell_cap = cells;
            }
            memset(cell, 0, (size_t)cells * sizeof(double));
            for (Py_ssize_t i = 0; i < b - a; i++)
                if (qs[i] >= 0) cell[(qs[i] - first) * g + ks[i]] += dur[a + i];
            double *row = by_step + first * g;
            for (Py_ssize_t x = 0; x < cells; x++) row[x] += cell[x];
        }
        Py_END_ALLOW_THREADS
        if (nomem) {
            PyErr_NoMemory();
            goto done;
        }
        result = Py_NewRef(fallback ? Py_None : Py_True);
    }
done:
    PyMem_RawFree(scratch);
    PyMem_RawFree(cell);
    PyMem_RawFree(ks);
    PyMem_RawFree(qs);
    PyMem_RawFree(blocks);
    Py_buffer *all[] = {&mb, &pb, &ob, &lb, &cb, &db, &sb, &hb, &vb, &stb, &plb, &spb, &o1, &o2, &o3, &o4, &o5};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        if (all[i]->obj) PyBuffer_Release(all[i]);
    return result;
}

/* survey(module, program_id, op, n_p, n_o, seen, step_of) -> (lo, hi) or None.
   What _sums finds before its sums, in one pass: seen[key] = 1 for each event's dense key
   ((module * n_p + program_id) * n_o + op; seen: uint8 [space]), and the least and greatest step
   label at or above 0 ((0, -1) where none is). None, seen unfinished, where a key falls outside
   [0, space) (a negative code in a hostile file): the numpy loop then does it, as it would. */
static PyObject *survey(PyObject *self, PyObject *args) {
    Py_buffer mb = {0}, pb = {0}, ob = {0}, sb = {0}, stb = {0};
    long long n_p, n_o;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y*y*y*LLw*y*", &mb, &pb, &ob, &n_p, &n_o, &sb, &stb)) return NULL;
    Py_ssize_t n = mb.itemsize ? mb.len / mb.itemsize : 0, space = sb.len;
    if (int_column(&mb, "module", n) || int_column(&pb, "program_id", n) || int_column(&ob, "op", n) ||
        int_column(&stb, "step_of", n))
        goto done;
    {
        uint8_t *seen = (uint8_t *)sb.buf;
        int64_t lo = 0, hi = -1;
        int outside = 0;
        int64_t *bm = (int64_t *)PyMem_RawMalloc((size_t)(4 * BLOCK) * sizeof(int64_t));
        if (!bm) {
            PyErr_NoMemory();
            goto done;
        }
        int64_t *bp = bm + BLOCK, *bo = bm + 2 * BLOCK, *bs = bm + 3 * BLOCK;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i0 = 0; i0 < n && !outside; i0 += BLOCK) {
            Py_ssize_t len = n - i0 < BLOCK ? n - i0 : BLOCK;
            load(mb.buf, mb.itemsize, i0, len, bm);
            load(pb.buf, pb.itemsize, i0, len, bp);
            load(ob.buf, ob.itemsize, i0, len, bo);
            load(stb.buf, stb.itemsize, i0, len, bs);
            for (Py_ssize_t j = 0; j < len; j++) {
                int64_t key = (bm[j] * n_p + bp[j]) * n_o + bo[j];
                if (key < 0 || key >= space) {
                    outside = 1;
                    break;
                }
                seen[key] = 1;
                int64_t label = bs[j];
                if (label >= 0) {
                    if (hi < lo) lo = hi = label;
                    else if (label < lo) lo = label;
                    else if (label > hi) hi = label;
                }
            }
        }
        Py_END_ALLOW_THREADS
        PyMem_RawFree(bm);
        result = outside ? Py_NewRef(Py_None) : Py_BuildValue("(LL)", (long long)lo, (long long)hi);
    }
done:
    Py_buffer *all[] = {&mb, &pb, &ob, &sb, &stb};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        if (all[i]->obj) PyBuffer_Release(all[i]);
    return result;
}

/* mark_labels(step_of, lo, present): present[label - lo] = 1 for each label at or above 0 (present:
   uint8, spanning the labels survey found). */
static PyObject *mark_labels(PyObject *self, PyObject *args) {
    Py_buffer stb = {0}, pb = {0};
    long long lo;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y*Lw*", &stb, &lo, &pb)) return NULL;
    Py_ssize_t n = stb.itemsize ? stb.len / stb.itemsize : 0;
    if (int_column(&stb, "step_of", n)) goto done;
    {
        uint8_t *present = (uint8_t *)pb.buf;
        int outside = 0;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++) {
            int64_t label = at(stb.buf, stb.itemsize, i);
            if (label < 0) continue;
            if (label - lo < 0 || label - lo >= pb.len) {
                outside = 1;
                break;
            }
            present[label - lo] = 1;
        }
        Py_END_ALLOW_THREADS
        if (outside) PyErr_SetString(PyExc_ValueError, "mark_labels: a label outside the table");
        else result = Py_NewRef(Py_None);
    }
done:
    if (stb.obj) PyBuffer_Release(&stb);
    if (pb.obj) PyBuffer_Release(&pb);
    return result;
}

/* device_index(host, device, width, counts, which) -> True, or None.
   Each event's device as an index into the devices present: key = host * width + device; counts
   (int64 [space]) gets each key's events, and which (int32 or int64 [n]) each event's place among
   the keys present, in key order (what step_spans.device_index's numpy passes make). None, the
   outputs unfinished, where a key falls outside [0, space) (a negative code in a hostile file). */
static PyObject *device_index(PyObject *self, PyObject *args) {
    Py_buffer hb = {0}, db = {0}, cb = {0}, wb = {0};
    long long width;
    PyObject *result = NULL;
    int64_t *lookup = NULL;
    if (!PyArg_ParseTuple(args, "y*y*Lw*w*", &hb, &db, &width, &cb, &wb)) return NULL;
    Py_ssize_t n = hb.itemsize ? hb.len / hb.itemsize : 0, space = cb.len / (Py_ssize_t)sizeof(int64_t);
    if (int_column(&hb, "host", n) || int_column(&db, "device", n) || int_column(&wb, "which", n) ||
        sized(&cb, "counts", space, sizeof(int64_t)) || (wb.itemsize != 4 && wb.itemsize != 8))
        goto done;
    lookup = (int64_t *)PyMem_RawMalloc((size_t)(space ? space : 1) * sizeof(int64_t));
    if (!lookup) {
        PyErr_NoMemory();
        goto done;
    }
    {
        int64_t *count = (int64_t *)cb.buf;
        int outside = 0;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n && !outside; i++) {
            int64_t key = at(hb.buf, hb.itemsize, i) * width + at(db.buf, db.itemsize, i);
            if (key < 0 || key >= space) outside = 1;
            else count[key]++;
        }
        if (!outside) {
            int64_t k = 0;
            for (Py_ssize_t j = 0; j < space; j++) lookup[j] = count[j] ? k++ : -1;
            for (Py_ssize_t i = 0; i < n; i++) {
                int64_t v = lookup[at(hb.buf, hb.itemsize, i) * width + at(db.buf, db.itemsize, i)];
                if (wb.itemsize == 4) ((int32_t *)wb.buf)[i] = (int32_t)v;
                else ((int64_t *)wb.buf)[i] = v;
            }
        }
        Py_END_ALLOW_THREADS
        result = Py_NewRef(outside ? Py_None : Py_True);
    }
done:
    PyMem_RawFree(lookup);
    Py_buffer *all[] = {&hb, &db, &cb, &wb};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        if (all[i]->obj) PyBuffer_Release(all[i]);
    return result;
}

static PyMethodDef methods[] = {
    {"chunk_sums", chunk_sums, METH_VARARGS,
     "chunk_sums(...): a host's op sums, per op and per (step, op), in the numpy loop's order (True), or None."},
    {"survey", survey, METH_VARARGS,
     "survey(module, program_id, op, n_p, n_o, seen, step_of): the keys seen and the step labels' range, or None."},
    {"mark_labels", mark_labels, METH_VARARGS, "mark_labels(step_of, lo, present): the step labels present."},
    {"device_index", device_index, METH_VARARGS,
     "device_index(host, device, width, counts, which): each event's device among those present, or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_xsums", NULL, -1, methods};

PyMODINIT_FUNC PyInit__xsums(void) { return PyModule_Create(&module); }
