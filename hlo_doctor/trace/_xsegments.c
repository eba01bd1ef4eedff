/* The compiled walk of a host thread's nested events into labelled segments (wrapped by
   hlo_doctor.trace.cwire.segments; the walk it replaces, and judges it: hlo_doctor.opstats.host_time).

   An extension of its own beside _xwire.c (the reader of a capture's wire bytes): optional as that one
   is, and where it is not built the walk runs in Python with the same results. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Growable int64 columns, grown with the raw allocator as _xwire.c's are. */
typedef struct {
    int64_t *data;
    Py_ssize_t len, cap;
} vec;

static int vec_push(vec *v, int64_t x) {
    if (v->len == v->cap) {
        Py_ssize_t cap = v->cap ? v->cap * 2 : 4096;
        int64_t *d = (int64_t *)PyMem_RawRealloc(v->data, (size_t)cap * sizeof(int64_t));
        if (!d) return -1;
        v->data = d;
        v->cap = cap;
    }
    v->data[v->len++] = x;
    return 0;
}

static int vec_reserve(vec *v, Py_ssize_t cap) {
    if (cap <= v->cap) return 0;
    int64_t *d = (int64_t *)PyMem_RawRealloc(v->data, (size_t)cap * sizeof(int64_t));
    if (!d) return -1;
    v->data = d;
    v->cap = cap;
    return 0;
}

static PyObject *vec_bytes(vec *v) {
    return PyBytes_FromStringAndSize((const char *)v->data, v->len * (Py_ssize_t)sizeof(int64_t));
}

/* A (parent label, name) -> label table, open addressing; keys are (parent + 1) << 32 | name. */
typedef struct {
    uint64_t *keys; /* 0: empty (a key is never 0: the name code is stored + 1) */
    int64_t *values;
    size_t cap, len;
} table_t;

static int table_put(table_t *t, uint64_t key, int64_t value);

static int64_t *table_get(table_t *t, uint64_t key) {
    if (!t->cap) return NULL;
    size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 17) & (t->cap - 1);
    while (t->keys[i]) {
        if (t->keys[i] == key) return &t->values[i];
        i = (i + 1) & (t->cap - 1);
    }
    return NULL;
}

static int table_grow(table_t *t) {
    table_t bigger = {NULL, NULL, t->cap ? t->cap * 2 : 1024, 0};
    bigger.keys = (uint64_t *)PyMem_Calloc(bigger.cap, sizeof(uint64_t));
    bigger.values = (int64_t *)PyMem_Calloc(bigger.cap, sizeof(int64_t));
    if (!bigger.keys || !bigger.values) {
        PyMem_Free(bigger.keys);
        PyMem_Free(bigger.values);
        return -1;
    }
    for (size_t i = 0; i < t->cap; i++)
        if (t->keys[i]) table_put(&bigger, t->keys[i], t->values[i]);
    PyMem_Free(t->keys);
    PyMem_Free(t->values);
    *t = bigger;
    return 0;
}

static int table_put(table_t *t, uint64_t key, int64_t value) {
    if ((t->len + 1) * 2 > t->cap && table_grow(t)) return -1;
    size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 17) & (t->cap - 1);
    while (t->keys[i] && t->keys[i] != key) i = (i + 1) & (t->cap - 1);
    if (!t->keys[i]) t->len++;
    t->keys[i] = key;
    t->values[i] = value;
    return 0;
}

/* segments(starts, ends, names, untraced, label_of): a thread's nested events (float64 starts and
   ends, int32 name codes, sorted by start, longest first) cut into labelled segments that do not
   overlap, as hlo_doctor.opstats.host_time.host_segments walks them: a stack of open events, each
   event's label from its parent's label and its name. label_of(parent, name) gives that label's
   code (parent -1: the thread's root) and is called once per pair. The segments tile the time they
   cover (each one starts where the one before it ends: the walk emits from where it stands), so they
   are returned as their n + 1 bounds and n labels, as bytes (float64, int32): a third less than
   starts and ends apart, for a thread's millions of segments. */
static PyObject *segments(PyObject *self, PyObject *args) {
    Py_buffer sb, eb, nb;
    long long untraced;
    PyObject *label_of;
    if (!PyArg_ParseTuple(args, "y*y*y*LO", &sb, &eb, &nb, &untraced, &label_of)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = sb.len / (Py_ssize_t)sizeof(double);
    const double *starts = (const double *)sb.buf, *ends = (const double *)eb.buf;
    const int32_t *names = (const int32_t *)nb.buf;
    vec os = {0}, ol = {0}; /* the bounds (float64 bits) and the labels (two int32 to an element) */
    Py_ssize_t nl = 0;       /* labels written */
    double last_end = 0.0;   /* the end of the last segment */
    table_t children = {0};
    double *stack_end = NULL;
    int64_t *stack_label = NULL;
    Py_ssize_t depth = 0;
    if (eb.len != sb.len || nb.len != n * (Py_ssize_t)sizeof(int32_t)) {
        PyErr_SetString(PyExc_ValueError, "starts, ends and names differ in length");
        goto done;
    }
    /* Each event cuts at most two segments (one as it opens, one as it closes): the columns are
       sized for that at once, and only the pages written become resident (no copy as they grow).
       Where the system will not reserve that much, they grow as they fill instead. */
    (void)(vec_reserve(&os, 2 * n + 2) || vec_reserve(&ol, n + 1));
    stack_end = (double *)PyMem_Malloc((size_t)(n ? n : 1) * sizeof(double));
    stack_label = (int64_t *)PyMem_Malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    if (!stack_end || !stack_label) {
        PyErr_NoMemory();
        goto done;
    }
#define EMIT(a, b, k)                                                                           \
    do {                                                                                        \
        double a_ = (a), b_ = (b);                                                              \
        if (b_ > a_) {                                                                          \
            int64_t ai;                                                                         \
            memcpy(&ai, &a_, 8);                                                                \
            if (vec_push(&os, ai) || (nl % 2 == 0 && vec_push(&ol, 0))) {                       \
                PyErr_NoMemory();                                                               \
                goto done;                                                                      \
            }                                                                                   \
            ((int32_t *)ol.data)[nl++] = (int32_t)(k);                                          \
            last_end = b_;                                                                      \
        }                                                                                       \
    } while (0)
    double t = n ? starts[0] : 0.0;
    for (Py_ssize_t i = 0; i < n; i++) {
        double start = starts[i], end = ends[i];
        while (depth && stack_end[depth - 1] <= start) {
            double top_end = stack_end[depth - 1];
            int64_t k = stack_label[depth - 1];
            depth--;
            EMIT(t, top_end, k);
            t = top_end > t ? top_end : t;
        }
        EMIT(t, start, depth ? stack_label[depth - 1] : untraced);
        t = start > t ? start : t;
        int64_t parent = depth ? stack_label[depth - 1] : -1;
        if (depth && stack_end[depth - 1] < end) end = stack_end[depth - 1];
        if (names[i] < 0 || parent >= 0x7FFFFFFFll) {
            PyErr_SetString(PyExc_ValueError, "a name or label code out of range");
            goto done;
        }
        uint64_t key = ((uint64_t)(parent + 1) << 32) | (uint64_t)(names[i] + 1);
        int64_t *known = table_get(&children, key), label;
        if (known) {
            label = *known;
        } else {
            PyObject *got = PyObject_CallFunction(label_of, "LL", (long long)parent, (long long)names[i]);
            if (!got) goto done;
            label = PyLong_AsLongLong(got);
            Py_DECREF(got);
            if (label == -1 && PyErr_Occurred()) goto done;
            if (label < 0 || label >= 0x7FFFFFFFll) {
                PyErr_SetString(PyExc_ValueError, "a label code out of range");
                goto done;
            }
            if (table_put(&children, key, label)) {
                PyErr_NoMemory();
                goto done;
            }
        }
        stack_end[depth] = end;
        stack_label[depth] = label;
        depth++;
    }
    while (depth) {
        double top_end = stack_end[depth - 1];
        int64_t k = stack_label[depth - 1];
        depth--;
        EMIT(t, top_end, k);
        t = top_end > t ? top_end : t;
    }
#undef EMIT
    if (nl) { /* the last bound: the last segment's end */
        int64_t bi;
        memcpy(&bi, &last_end, 8);
        if (vec_push(&os, bi)) {
            PyErr_NoMemory();
            goto done;
        }
    }
    {
        /* Each column copied out and freed before the next: the two are not held twice at once. */
        PyObject *bounds = vec_bytes(&os), *labels = NULL;
        PyMem_RawFree(os.data);
        os.data = NULL;
        if (!bounds) goto done;
        labels = PyBytes_FromStringAndSize((const char *)ol.data, nl * (Py_ssize_t)sizeof(int32_t));
        if (!labels) {
            Py_DECREF(bounds);
            goto done;
        }
        result = Py_BuildValue("(NN)", bounds, labels);
    }
done:
    PyMem_RawFree(os.data);
    PyMem_RawFree(ol.data);
    PyMem_Free(children.keys);
    PyMem_Free(children.values);
    PyMem_Free(stack_end);
    PyMem_Free(stack_label);
    PyBuffer_Release(&sb);
    PyBuffer_Release(&eb);
    PyBuffer_Release(&nb);
    return result;
}

/* enclosing(starts, span_starts, span_ends, out): for each event start, the last span whose start is
   at or before it (span_starts sorted) where that span's end is at or after it, else -1, into out
   (int64): numpy's ``searchsorted(span_starts, starts, side="right") - 1``, kept where
   ``span_ends[run] >= start``. Events mostly come by start, so the spans are walked alongside them;
   an event before the one ahead of it is searched for. Returns False, out unwritten, where a value is
   NaN (numpy orders NaN last; the caller does it numpy's way). */
static PyObject *enclosing(PyObject *self, PyObject *args) {
    Py_buffer sb, hb, eb, ob;
    if (!PyArg_ParseTuple(args, "y*y*y*w*", &sb, &hb, &eb, &ob)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = sb.len / (Py_ssize_t)sizeof(double), m = hb.len / (Py_ssize_t)sizeof(double);
    if (eb.len != hb.len || ob.len != n * (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "enclosing: the spans' starts and ends, or the events and out, differ in length");
        goto done;
    }
    {
        const double *x = (const double *)sb.buf, *hay = (const double *)hb.buf, *ends = (const double *)eb.buf;
        int64_t *out = (int64_t *)ob.buf;
        int nan = 0;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t j = 0; j < m && !nan; j++)
            nan = hay[j] != hay[j] || ends[j] != ends[j];
        for (Py_ssize_t i = 0; i < n && !nan; i++)
            nan = x[i] != x[i];
        if (!nan) {
            Py_ssize_t j = 0; /* spans with a start at or before x[i-1] */
            double last = 0.0;
            for (Py_ssize_t i = 0; i < n; i++) {
                double v = x[i];
                if (i == 0 || v < last) { /* a binary search: the first span starting after v */
                    Py_ssize_t lo = 0, hi = m;
                    while (lo < hi) {
                        Py_ssize_t mid = lo + (hi - lo) / 2;
                        if (hay[mid] <= v) lo = mid + 1;
                        else hi = mid;
                    }
                    j = lo;
                } else {
                    while (j < m && hay[j] <= v) j++;
                }
                last = v;
                out[i] = (j > 0 && ends[j - 1] >= v) ? (int64_t)(j - 1) : -1;
            }
        }
        Py_END_ALLOW_THREADS
        result = PyBool_FromLong(!nan);
    }
done:
    PyBuffer_Release(&sb);
    PyBuffer_Release(&hb);
    PyBuffer_Release(&eb);
    PyBuffer_Release(&ob);
    return result;
}

/* self_times(starts, durations, out): each event's duration less its children's (events of one line,
   sorted by start, longest first: properly nested or disjoint), into out (float64, a copy of the
   durations on entry), as hlo_doctor.trace.columns.self_times walks them in Python: a stack of open
   events' (end, index); a child's time is taken from its innermost enclosing event, in event order,
   so the floats are the loop's to the bit (NaN compares as it does there). */
static PyObject *self_times(PyObject *self, PyObject *args) {
    Py_buffer sb, db, ob;
    if (!PyArg_ParseTuple(args, "y*y*w*", &sb, &db, &ob)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = sb.len / (Py_ssize_t)sizeof(double);
    double *stack_end = NULL;
    Py_ssize_t *stack_at = NULL;
    if (db.len != sb.len || ob.len != sb.len) {
        PyErr_SetString(PyExc_ValueError, "self_times: starts, durations and out differ in length");
        goto done;
    }
    {
        const double *starts = (const double *)sb.buf, *durs = (const double *)db.buf;
        double *out = (double *)ob.buf;
        Py_ssize_t depth = 0, cap = 0;
        int failed = 0;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++) {
            double start = starts[i], dur = durs[i], end = start + dur;
            while (depth && stack_end[depth - 1] <= start) depth--;
            if (depth && end <= stack_end[depth - 1]) out[stack_at[depth - 1]] -= dur;
            if (depth == cap) { /* the stack grows with the nesting's depth, not the line's length */
                Py_ssize_t grown = cap ? cap * 2 : 64;
                double *e = (double *)PyMem_RawRealloc(stack_end, (size_t)grown * sizeof(double));
                if (e) stack_end = e;
                Py_ssize_t *a = e ? (Py_ssize_t *)PyMem_RawRealloc(stack_at, (size_t)grown * sizeof(Py_ssize_t)) : NULL;
                if (a) stack_at = a;
                if (!e || !a) {
                    failed = 1;
                    break;
                }
                cap = grown;
            }
            stack_end[depth] = end;
            stack_at[depth] = i;
            depth++;
        }
        Py_END_ALLOW_THREADS
        if (failed) {
            PyErr_NoMemory();
            goto done;
        }
        result = Py_NewRef(Py_None);
    }
done:
    PyMem_RawFree(stack_end);
    PyMem_RawFree(stack_at);
    PyBuffer_Release(&sb);
    PyBuffer_Release(&db);
    PyBuffer_Release(&ob);
    return result;
}

/* parents(starts, ends, out): each event's enclosing event (its index; -1 at the top) on one thread
   (float64 events sorted by start), into out (int64), as hlo_doctor.lint.intervals.parents walks
   them: a stack of open events, popped while the top ends at or before the event starts. */
static PyObject *parents(PyObject *self, PyObject *args) {
    Py_buffer sb, eb, ob;
    if (!PyArg_ParseTuple(args, "y*y*w*", &sb, &eb, &ob)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = sb.len / (Py_ssize_t)sizeof(double);
    int64_t *stack = NULL;
    if (eb.len != sb.len || ob.len != n * (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "parents: starts, ends and out differ in length");
        goto done;
    }
    stack = (int64_t *)PyMem_RawMalloc((size_t)(n ? n : 1) * sizeof(int64_t));
    if (!stack) {
        PyErr_NoMemory();
        goto done;
    }
    {
        const double *starts = (const double *)sb.buf, *ends = (const double *)eb.buf;
        int64_t *out = (int64_t *)ob.buf;
        Py_ssize_t depth = 0;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++) {
            double start = starts[i];
            while (depth && ends[stack[depth - 1]] <= start) depth--;
            out[i] = depth ? stack[depth - 1] : -1;
            stack[depth++] = (int64_t)i;
        }
        Py_END_ALLOW_THREADS
        result = Py_NewRef(Py_None);
    }
done:
    PyMem_RawFree(stack);
    PyBuffer_Release(&sb);
    PyBuffer_Release(&eb);
    PyBuffer_Release(&ob);
    return result;
}

/* inside(parent, flag, out): out[i] = parent[i] >= 0 and (flag[parent[i]] or out[parent[i]]), in
   event order (int64 parents, uint8 flags and out), as hlo_doctor.lint.intervals.inside does;
   IndexError for a parent past the end, as there. */
static PyObject *inside(PyObject *self, PyObject *args) {
    Py_buffer pb, fb, ob;
    if (!PyArg_ParseTuple(args, "y*y*w*", &pb, &fb, &ob)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = pb.len / (Py_ssize_t)sizeof(int64_t);
    if (fb.len != n || ob.len != n) {
        PyErr_SetString(PyExc_ValueError, "inside: parent, flag and out differ in length");
        goto done;
    }
    {
        const int64_t *parent = (const int64_t *)pb.buf;
        const uint8_t *flag = (const uint8_t *)fb.buf;
        uint8_t *out = (uint8_t *)ob.buf;
        int past = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            int64_t p = parent[i];
            if (p >= n) {
                past = 1;
                break;
            }
            out[i] = p >= 0 && (flag[p] || out[p]);
        }
        if (past) PyErr_SetString(PyExc_IndexError, "inside: a parent past the end");
        else result = Py_NewRef(Py_None);
    }
done:
    PyBuffer_Release(&pb);
    PyBuffer_Release(&fb);
    PyBuffer_Release(&ob);
    return result;
}

static PyMethodDef methods[] = {
    {"segments", segments, METH_VARARGS,
     "segments(starts, ends, names, untraced, label_of): a thread's nested events as labelled segments."},
    {"enclosing", enclosing, METH_VARARGS,
     "enclosing(starts, span_starts, span_ends, out): each start's enclosing span (its index, else -1)."},
    {"parents", parents, METH_VARARGS, "parents(starts, ends, out): each nested event's enclosing event, into out."},
    {"inside", inside, METH_VARARGS, "inside(parent, flag, out): whether an ancestor of each event is flagged."},
    {"self_times", self_times, METH_VARARGS,
     "self_times(starts, durations, out): each nested event's duration less its children's, into out."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_xsegments", NULL, -1, methods};

PyMODINIT_FUNC PyInit__xsegments(void) { return PyModule_Create(&module); }
