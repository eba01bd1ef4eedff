/* The compiled reader of a line's XEvent messages (hlo_doctor.trace.cwire wraps it).

   decode_line(buf, off_id, dur_id, wanted, at_end) walks the XLine fields in buf (a chunk of
   one line's bytes, from its first event on) and decodes every ``events`` field (number 4) into
   columns; other fields of the line are skipped by their wire type and their places returned (the
   caller has the protobuf runtime read them). Every read is bounded: a varint by ten bytes and by
   the end of its message, a length by the end of its message, a nested message by its length.

   Returns (consumed, need, mids, offsets, durations, occurrences, stats, others):
     consumed   bytes of buf used (whole fields only); the caller reads on from there;
     need       when not at_end and the next field does not fit in buf: its size, else 0;
     mids...    int64 columns as bytes, one entry per event (occurrences as written, 0 unset);
     stats      int64 rows (event, stat id, kind, value, end) of the stats whose id is in wanted;
     others     int64 pairs (start, end) of the line's fields that are not events.
   Returns a str (why) for anything the protobuf runtime must read instead (as wire.Unread). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The columns grow while the GIL is released (decode_line), so they use the raw allocator, the one
   that may be called without it: PyMem_Realloc needs the GIL (a crash on Python 3.12). */
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

static PyObject *vec_bytes(vec *v) {
    return PyBytes_FromStringAndSize((const char *)v->data, v->len * (Py_ssize_t)sizeof(int64_t));
}

/* The decoder's small readers are inlined into its loops (a call per field was half its time). */
#if defined(__GNUC__)
#define HOT_INLINE static inline __attribute__((always_inline))
#else
#define HOT_INLINE static inline
#endif

/* A varint at p (before end): 0 and *out, *p moved past it; -1: runs past end; -2: over ten bytes. */
HOT_INLINE int varint(const uint8_t **p, const uint8_t *end, uint64_t *out) {
    const uint8_t *q = *p;
    uint64_t value = 0;
    for (int k = 0; k < 10; k++) {
        if (q >= end) return -1;
        uint8_t b = *q++;
        value |= (uint64_t)(b & 0x7F) << (7 * k);
        if (b < 0x80) {
            *out = value;
            *p = q;
            return 0;
        }
    }
    return -2;
}

/* One field's head at p (before end): number, wire type, its value (a varint) or payload start,
   and its end. Returns NULL or why it cannot be read. A field past end is an error here: the
   caller, where a field may continue in the next chunk, checks that first. */
HOT_INLINE const char *field(const uint8_t **p, const uint8_t *end, uint64_t *number, int *wire,
                             uint64_t *value, const uint8_t **stop) {
    uint64_t tag;
    int r = varint(p, end, &tag);
    if (r) return r == -1 ? "a field reaches past its message" : "a varint longer than ten bytes";
    *number = tag >> 3;
    *wire = (int)(tag & 7);
    if (*number == 0 || *number > 536870911) return "a field number out of range";
    switch (*wire) {
    case 0:
        r = varint(p, end, value);
        if (r) return r == -1 ? "a varint reaches past its message" : "a varint longer than ten bytes";
        *stop = *p;
        return NULL;
    case 1:
    case 5: {
        size_t width = *wire == 1 ? 8 : 4;
        if ((size_t)(end - *p) < width) return "a field reaches past its message";
        *value = 0;
        *stop = *p + width;
        return NULL;
    }
    case 2: {
        uint64_t length;
        r = varint(p, end, &length);
        if (r) return r == -1 ? "a varint reaches past its message" : "a varint longer than ten bytes";
        if (length > (uint64_t)(end - *p)) return "a field reaches past its message";
        *stop = *p + length;
        return NULL;
    }
    default:
        return "a group or an unknown wire type";
    }
}

/* Whether p[0:n] is UTF-8 as the protobuf runtime requires of a string field (no overlong form,
   no surrogate, nothing above U+10FFFF). */
static int utf8_ok(const uint8_t *p, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = p[i];
        if (c < 0x80) { i++; continue; }
        size_t k;
        uint32_t lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) k = 1;
        else if (c >= 0xE0 && c <= 0xEF) {
            k = 2;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            k = 3;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
        } else return 0;
        if (n - i <= k) return 0;
        if (p[i + 1] < lo || p[i + 1] > hi) return 0;
        for (size_t j = 2; j <= k; j++)
            if ((p[i + j] & 0xC0) != 0x80) return 0;
        i += k + 1;
    }
    return 1;
}

typedef struct {
    vec mids, offs, durs, occs, stats, others;
} out_t;

static int wanted_has(const int64_t *wanted, Py_ssize_t n, int64_t sid) {
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (wanted[mid] < sid) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && wanted[lo] == sid;
}

/* Wire type each known field must have (index: field number); -1: any (unknown field). */
static const int EVENT_WIRES[6] = {-1, 0, 0, 0, 2, 0};
static const int STAT_WIRES[8] = {-1, 0, 1, 0, 0, 2, 2, 0};

typedef struct {
    int64_t mid, off, dur, occ;
} event_t;

static const char *decode_event(const uint8_t *p, const uint8_t *end, const uint8_t *base, int64_t index,
                                int64_t off_id, int64_t dur_id, const int64_t *wanted, Py_ssize_t nwanted,
                                out_t *out, event_t *ev) {
    uint64_t mid = 0, off = 0, dur = 0, occ = 0;
    int have_off = 0, have_dur = 0; /* a device clock stat seen: its value replaces the event's */
    uint64_t dev_off = 0, dev_dur = 0;
    while (p < end) {
        uint64_t number, value = 0;
        int wire;
        const uint8_t *stop, *payload;
        const char *why = field(&p, end, &number, &wire, &value, &stop);
        if (why) return why;
        payload = p;
        if (number <= 5 && EVENT_WIRES[number] >= 0 && EVENT_WIRES[number] != wire)
            return "a known field of another wire type";
        switch (number) {
        case 1: mid = value; break;
        case 2: off = value; occ = 0; break; /* the oneof keeps the member written last */
        case 5: occ = value; off = 0; break;
        case 3: dur = value; break;
        case 4: {
            uint64_t sid = 0, sval = 0;
            int kind = 0;
            const uint8_t *q = payload, *send = stop, *sstop = stop;
            while (q < send) {
                uint64_t sn, sv = 0;
                int sw;
                const uint8_t *st, *sp;
                const char *w2 = field(&q, send, &sn, &sw, &sv, &st);
                if (w2) return w2;
                sp = q;
                if (sn <= 7 && STAT_WIRES[sn] >= 0 && STAT_WIRES[sn] != sw)
                    return "a known field of another wire type";
                if (sn == 5 && !utf8_ok(sp, (size_t)(st - sp))) return "a str_value that is not UTF-8";
                if (sn == 1) {
                    sid = sv;
                } else if (sn >= 2 && sn <= 7) {
                    kind = (int)sn;
                    /* a varint's value; else where the payload starts (double, str, bytes) */
                    sval = (sw == 0) ? sv : (uint64_t)(sp - base);
                    sstop = st;
                }
                q = st;
            }
            int64_t ssid = (int64_t)sid;
            if ((off_id >= 0 && ssid == off_id) || (dur_id >= 0 && ssid == dur_id)) {
                /* ``int64_value or uint64_value``: the member written, 0 for any other */
                uint64_t v = (kind == 3 || kind == 4) ? sval : 0;
                if (kind == 3 && sval >= ((uint64_t)1 << 63)) return "a uint64 device time above 2**63";
                if (off_id >= 0 && ssid == off_id) { dev_off = v; have_off = 1; }
                else { dev_dur = v; have_dur = 1; }
            } else if (nwanted && wanted_has(wanted, nwanted, ssid)) {
                if (vec_push(&out->stats, index) || vec_push(&out->stats, ssid) ||
                    vec_push(&out->stats, kind) || vec_push(&out->stats, (int64_t)sval) ||
                    vec_push(&out->stats, (int64_t)(sstop - base)))
                    return "";
            }
            break;
        }
        default: break;
        }
        p = stop;
    }
    if (have_off) off = dev_off;
    if (have_dur) dur = dev_dur;
    ev->mid = (int64_t)mid;
    ev->off = (int64_t)off;
    ev->dur = (int64_t)dur;
    ev->occ = (int64_t)occ;
    return NULL;
}

/* Where decode_line's events go: growing columns of int64 as written (cols == NULL), or the
   caller's arrays (cols: int32 metadata ids, float64 start and duration in ns, int32 occurrences,
   each of cap entries, written from at), the times as the reader's numpy path makes them
   (``offset / 1000 + timestamp``, ``duration / 1000``) and an unset occurrence count as 1. */
typedef struct {
    int32_t *mids, *occs;
    double *starts, *durs;
    Py_ssize_t at, cap;
    double ts;
    int full, wide;
} cols_t;

static const char *put_event(out_t *out, cols_t *cols, const event_t *ev) {
    if (!cols) {
        if (vec_push(&out->mids, ev->mid) || vec_push(&out->offs, ev->off) ||
            vec_push(&out->durs, ev->dur) || vec_push(&out->occs, ev->occ))
            return "";
        return NULL;
    }
    int64_t occ = ev->occ ? ev->occ : 1;
    if (ev->mid < INT32_MIN || ev->mid > INT32_MAX || occ < INT32_MIN || occ > INT32_MAX) {
        cols->wide = 1; /* int64 columns: the caller reads the line the other way */
        return NULL;
    }
    Py_ssize_t i = cols->at++;
    cols->mids[i] = (int32_t)ev->mid;
    cols->occs[i] = (int32_t)occ;
    cols->starts[i] = (double)ev->off / 1000.0 + cols->ts;
    cols->durs[i] = (double)ev->dur / 1000.0;
    return NULL;
}

static void out_free(out_t *o) {
    PyMem_RawFree(o->mids.data); PyMem_RawFree(o->offs.data); PyMem_RawFree(o->durs.data);
    PyMem_RawFree(o->occs.data); PyMem_RawFree(o->stats.data); PyMem_RawFree(o->others.data);
}

/* The XLine fields of buf: events decoded into out's stats and columns (or cols), other fields'
   places into out's others. Returns NULL or why the runtime must read the line; *consumed, *need as
   decode_line returns them. Runs without the GIL. */
static const char *walk_line(const uint8_t *base, const uint8_t *end, int at_end, int64_t off_id, int64_t dur_id,
                             const int64_t *wanted, Py_ssize_t nwanted, int64_t index, out_t *out, cols_t *cols,
                             Py_ssize_t *consumed, Py_ssize_t *need) {
    const uint8_t *p = base;
    const char *why = NULL;
    *need = 0;
    while (p < end) {
        if (cols && cols->at == cols->cap) {
            cols->full = 1;
            break;
        }
        const uint8_t *at = p;
        uint64_t number, value = 0;
        int wire;
        const uint8_t *stop;
        if (!at_end) {
            /* A field that may continue past this chunk: stop before it, saying how much it needs. */
            const uint8_t *q = p;
            uint64_t tag, length = 0;
            int r = varint(&q, end, &tag);
            if (r == -1) break;
            if (r == 0 && (tag & 7) == 2) {
                r = varint(&q, end, &length);
                if (r == -1) break;
                if (r == 0 && length > (uint64_t)(end - q)) {
                    uint64_t total = (uint64_t)(q - at) + length;
                    *need = total > (uint64_t)PY_SSIZE_T_MAX ? PY_SSIZE_T_MAX : (Py_ssize_t)total;
                    break;
                }
            } else if (r == 0 && ((tag & 7) == 0 || (tag & 7) == 1 || (tag & 7) == 5)) {
                uint64_t v;
                if ((tag & 7) == 0 ? varint(&q, end, &v) == -1 : (size_t)(end - q) < ((tag & 7) == 1 ? 8u : 4u))
                    break;
            }
        }
        why = field(&p, end, &number, &wire, &value, &stop);
        if (why) break;
        if (number == 4) {
            event_t ev;
            Py_ssize_t stats_before = out->stats.len;
            if (wire != 2) { why = "a known field of another wire type"; break; }
            why = decode_event(p, stop, base, index, off_id, dur_id, wanted, nwanted, out, &ev);
            if (why) break;
            why = put_event(out, cols, &ev);
            if (why) break;
            if (cols && cols->wide) {
                out->stats.len = stats_before; /* (the caller drops this chunk's columns anyway) */
                p = at;
                break;
            }
            index++;
        } else if (vec_push(&out->others, (int64_t)(at - base)) || vec_push(&out->others, (int64_t)(stop - base))) {
            why = "";
            break;
        }
        p = stop;
    }
    *consumed = (Py_ssize_t)(p - base);
    return why;
}

static PyObject *decode_line(PyObject *self, PyObject *args) {
    Py_buffer buf, wanted_buf;
    long long off_id, dur_id, first_index;
    int at_end;
    if (!PyArg_ParseTuple(args, "y*LLy*pL", &buf, &off_id, &dur_id, &wanted_buf, &at_end, &first_index))
        return NULL;
    const uint8_t *base = (const uint8_t *)buf.buf;
    out_t out;
    memset(&out, 0, sizeof out);
    const char *why;
    Py_ssize_t consumed, need;
    Py_BEGIN_ALLOW_THREADS
    why = walk_line(base, base + buf.len, at_end, (int64_t)off_id, (int64_t)dur_id, (const int64_t *)wanted_buf.buf,
                    wanted_buf.len / (Py_ssize_t)sizeof(int64_t), (int64_t)first_index, &out, NULL, &consumed, &need);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    PyBuffer_Release(&wanted_buf);
    if (why) {
        out_free(&out);
        if (!*why) return PyErr_NoMemory();
        return PyUnicode_FromString(why);
    }
    PyObject *result = Py_BuildValue("(nnNNNNNN)", consumed, need, vec_bytes(&out.mids),
                                     vec_bytes(&out.offs), vec_bytes(&out.durs), vec_bytes(&out.occs),
                                     vec_bytes(&out.stats), vec_bytes(&out.others));
    out_free(&out);
    return result;
}

/* decode_into(buf, off_id, dur_id, wanted, at_end, ts, mids, starts, durations, occurrences, at):
   decode_line's walk, the columns written into the caller's arrays from entry ``at`` on (int32,
   float64, float64, int32; writable, of one length) as described at cols_t; ``at`` is also the line's
   index of the first event (decode_line's first_index: the stats' rows are numbered from it).
   Returns (consumed, need, written, full, wide, stats, others): written, the entries written; full,
   it stopped because the arrays are full (the caller grows them and reads on from consumed); wide,
   an id or count does not fit int32 (the caller reads the line with decode_line). A str: why the
   runtime must read the line. */
static PyObject *decode_into(PyObject *self, PyObject *args) {
    Py_buffer buf, wanted_buf, mb, sb, db, ob;
    long long off_id, dur_id, ts;
    Py_ssize_t at;
    int at_end;
    if (!PyArg_ParseTuple(args, "y*LLy*pLw*w*w*w*n", &buf, &off_id, &dur_id, &wanted_buf, &at_end, &ts,
                          &mb, &sb, &db, &ob, &at))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t cap = mb.len / (Py_ssize_t)sizeof(int32_t);
    if (ob.len != mb.len || sb.len != cap * (Py_ssize_t)sizeof(double) || db.len != sb.len || at < 0 || at > cap) {
        PyErr_SetString(PyExc_ValueError, "decode_into: the columns differ in length or at is outside them");
        goto done;
    }
    {
        const uint8_t *base = (const uint8_t *)buf.buf;
        out_t out;
        memset(&out, 0, sizeof out);
        cols_t cols = {(int32_t *)mb.buf, (int32_t *)ob.buf, (double *)sb.buf, (double *)db.buf, at, cap,
                       (double)ts, 0, 0};
        const char *why;
        Py_ssize_t consumed, need;
        Py_BEGIN_ALLOW_THREADS
        why = walk_line(base, base + buf.len, at_end, (int64_t)off_id, (int64_t)dur_id,
                        (const int64_t *)wanted_buf.buf, wanted_buf.len / (Py_ssize_t)sizeof(int64_t),
                        (int64_t)at, &out, &cols, &consumed, &need);
        Py_END_ALLOW_THREADS
        if (why) {
            out_free(&out);
            result = *why ? PyUnicode_FromString(why) : PyErr_NoMemory();
        } else {
            result = Py_BuildValue("(nnniiNN)", consumed, need, cols.at - at, cols.full, cols.wide,
                                   vec_bytes(&out.stats), vec_bytes(&out.others));
            out_free(&out);
        }
    }
done:
    PyBuffer_Release(&buf);
    PyBuffer_Release(&wanted_buf);
    PyBuffer_Release(&mb);
    PyBuffer_Release(&sb);
    PyBuffer_Release(&db);
    PyBuffer_Release(&ob);
    return result;
}

/* A varint as varint() reads it, refused (-2) where its value needs more than 64 bits (a tenth byte
   above 1), as the Python walker refuses it. */
static int varint64(const uint8_t **p, const uint8_t *end, uint64_t *out) {
    const uint8_t *q = *p;
    int r = varint(p, end, out);
    if (r == 0 && *p - q == 10 && (*p)[-1] > 1) return -2;
    return r;
}

/* walk_fields(buf, base, end): the fields of a message from buf[0] (at file offset base) on, until
   the message's end (file offset end) or until a field's head no longer fits in buf. Returns
   (rows, stopped): rows int64 (number, start, value, stop) per field as bytes, file offsets (value:
   a varint field's value, else where its payload starts); stopped, the file offset the walk reached.
   A field whose payload runs past buf is still listed (its head is enough) and the walk stops after
   it. The walk also stops, before it, at any field that is not well formed or reaches past the
   message: the caller reads that one itself (and says what is wrong with it). */
static PyObject *walk_fields(PyObject *self, PyObject *args) {
    Py_buffer buf;
    long long base, msg_end;
    if (!PyArg_ParseTuple(args, "y*LL", &buf, &base, &msg_end)) return NULL;
    const uint8_t *start = (const uint8_t *)buf.buf, *p = start;
    long long avail = msg_end - base < (long long)buf.len ? msg_end - base : (long long)buf.len;
    const uint8_t *end = start + (avail > 0 ? avail : 0);
    vec rows;
    memset(&rows, 0, sizeof rows);
    int oom = 0;
    long long stopped = base;
    Py_BEGIN_ALLOW_THREADS
    while (p < end) {
        const uint8_t *q = p;
        uint64_t tag, value = 0, length;
        if (varint64(&q, end, &tag)) break;
        uint64_t number = tag >> 3;
        int wire = (int)(tag & 7);
        if (number == 0) break;
        long long at = base + (long long)(p - start), stop;
        if (wire == 0) {
            if (varint64(&q, end, &value)) break;
            stop = base + (long long)(q - start);
        } else if (wire == 2) {
            if (varint64(&q, end, &length)) break;
            value = (uint64_t)(base + (long long)(q - start));
            if (length > (uint64_t)(msg_end - (long long)value)) break;
            stop = (long long)value + (long long)length;
        } else if (wire == 1 || wire == 5) {
            value = (uint64_t)(base + (long long)(q - start));
            stop = (long long)value + (wire == 1 ? 8 : 4);
            if (stop > msg_end) break;
        } else {
            break;
        }
        if (vec_push(&rows, (int64_t)number) || vec_push(&rows, at) || vec_push(&rows, (int64_t)value) ||
            vec_push(&rows, stop)) {
            oom = 1;
            break;
        }
        stopped = stop;
        if (stop > base + (long long)(end - start)) break;
        p = start + (stop - base);
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    if (oom) {
        PyMem_RawFree(rows.data);
        return PyErr_NoMemory();
    }
    PyObject *result = Py_BuildValue("(NL)", vec_bytes(&rows), stopped);
    PyMem_RawFree(rows.data);
    return result;
}

static PyMethodDef methods[] = {

    {"walk_fields", walk_fields, METH_VARARGS,
     "walk_fields(buf, base, end): a message's fields from buf on, as (number, start, value, stop) rows."},
    {"decode_line", decode_line, METH_VARARGS,
     "decode_line(buf, off_id, dur_id, wanted, at_end, first_index): a line's events as columns."},
    {"decode_into", decode_into, METH_VARARGS,
     "decode_into(buf, off_id, dur_id, wanted, at_end, ts, mids, starts, durations, occurrences, at): "
     "decode_line's walk into the caller's columns."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_xwire", NULL, -1, methods};

PyMODINIT_FUNC PyInit__xwire(void) { return PyModule_Create(&module); }
