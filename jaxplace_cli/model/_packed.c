/* The packed form of jaxplace's raw capture rows (model/raw.py), in C (issue 18).

   Once a writer is attached, the recorder's tables are Sinks of a RowBuffer: every row appended
   to them (by capture/_native.c or by the Python hooks) is encoded and freed at once; the
   writer process turns the bytes back into the very tuples with a Decoder. Optional like
   the hot path: without a compiler, rows stay tuples in the recorder's deques.
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Rows packed into one growing byte buffer instead of kept as tuples in deques: a backlog of
   tuples kept the cycle collector busy (every retained tuple counts towards the next
   collection; a full one took ~80 ms in the middle of bench P2's loop) and the writer thread
   pickled every row under the GIL (~0.3-0.65 us each). Here a row is encoded as it is made
   and its tuple freed at once; the writer sends the bytes as they are and the writer process
   decodes them (Decoder) into the very tuples the hooks would have appended.

   Encoding (native byte order: both ends are this machine): a row is 'R', a table byte, then
   its tuple; a value is 'i' + int64, 'T'/'F' (bool), 'N' (None), 's' + uint32 string id,
   'L' + uint32 length + decimal text (an int past 64 bits), '(' + uint32 count + values. A
   string is defined once per buffer's lifetime, before the first row that uses it: 'S' +
   uint32 id + uint32 length + UTF-8. */

enum { T_OPS = 0, T_TRANSFERS = 1, T_BUFFERS = 2, N_TABLES = 3 };

#include "_packed_api.h"

/* The ids of the strings met last, by the str object's address: a row holds three to five
   strings (names, device labels, APIs), nearly always the very same objects, and a dict lookup
   and an int conversion per string were the largest part of encoding (bench P6's workload
   pinned to one CPU: `encode` 4.8 us an iteration of 71 rows). An entry holds a reference to
   its str, so an address is never reused while it is here. */
#define STR_CACHE 256
typedef struct {
    PyObject *s; /* a strong reference, or NULL */
    uint32_t id;
} StrSlot;

typedef struct {
    PyObject_HEAD
    char *buf;
    Py_ssize_t len, cap;
    char *row;                /* scratch: one row, written after its string definitions */
    Py_ssize_t rlen, rcap;
    PyObject *strings;        /* str -> id */
    Py_ssize_t rows[N_TABLES];
    int busy;                 /* a row is being encoded into `row` (see rb_add) */
    StrSlot cache[STR_CACHE];
} RowBuffer;

static int grow(char **b, Py_ssize_t *cap, Py_ssize_t need) {
    if (need <= *cap) return 0;
    Py_ssize_t c = *cap ? *cap : 65536;
    while (c < need) c *= 2;
    char *n = PyMem_Realloc(*b, (size_t)c);
    if (!n) {
        PyErr_NoMemory();
        return -1;
    }
    *b = n;
    *cap = c;
    return 0;
}

static inline int rput(RowBuffer *rb, const void *p, Py_ssize_t n) {
    if (rb->rlen + n > rb->rcap && grow(&rb->row, &rb->rcap, rb->rlen + n) < 0) return -1;
    memcpy(rb->row + rb->rlen, p, (size_t)n);
    rb->rlen += n;
    return 0;
}

static inline int bput(RowBuffer *rb, const void *p, Py_ssize_t n) {
    if (rb->len + n > rb->cap && grow(&rb->buf, &rb->cap, rb->len + n) < 0) return -1;
    memcpy(rb->buf + rb->len, p, (size_t)n);
    rb->len += n;
    return 0;
}

static int encode(RowBuffer *rb, PyObject *v, int depth);

/* 'i' and the int64: how every int of a row is written (encode, encode1, sink_vrow's 'L'/'K') */
static inline int put_i64(RowBuffer *rb, int64_t x) {
    if (rb->rlen + 9 > rb->rcap && grow(&rb->row, &rb->rcap, rb->rlen + 9) < 0) return -1;
    rb->row[rb->rlen] = 'i';
    memcpy(rb->row + rb->rlen + 1, &x, 8);
    rb->rlen += 9;
    return 0;
}

/* One value of a row as encode() writes it, for the values nearly every row is
   made of: a str met last (the slot cache), an int within int64, a bool, None. Written in
   place after one bounds check instead of encode()'s checks and two rput calls per value
   (callgrind, bench P6's loop: sink_vrow 1,330 -> 850 instructions a row). Anything else, and a
   str not in its slot, goes to encode(). */
static inline int encode1(RowBuffer *rb, PyObject *v, int depth) {
    if (depth > 4) return encode(rb, v, depth); /* it says why */
    if (rb->rlen + 9 > rb->rcap && grow(&rb->row, &rb->rcap, rb->rlen + 9) < 0) return -1;
    char *p = rb->row + rb->rlen;
    PyTypeObject *t = Py_TYPE(v);
    if (t == &PyUnicode_Type) {
        StrSlot *slot = &rb->cache[((uintptr_t)v >> 4) % STR_CACHE];
        if (slot->s == v) {
            p[0] = 's';
            memcpy(p + 1, &slot->id, 4);
            rb->rlen += 5;
            return 0;
        }
    } else if (t == &PyLong_Type) {
        int overflow;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (!overflow) {
            if (x == -1 && PyErr_Occurred()) return -1;
            return put_i64(rb, (int64_t)x);
        }
        /* past int64: encode() writes it as text */
    } else if (t == &PyBool_Type || v == Py_None) {
        p[0] = v == Py_True ? 'T' : v == Py_False ? 'F' : 'N';
        rb->rlen += 1;
        return 0;
    }
    return encode(rb, v, depth);
}

static int encode(RowBuffer *rb, PyObject *v, int depth) {
    char tag;
    if (depth > 4) {
        PyErr_SetString(PyExc_ValueError, "RowBuffer: a row nests deeper than a raw row can");
        return -1;
    }
    if (PyBool_Check(v)) {
        tag = v == Py_True ? 'T' : 'F';
        return rput(rb, &tag, 1);
    }
    if (v == Py_None) {
        tag = 'N';
        return rput(rb, &tag, 1);
    }
    if (PyLong_Check(v) || PyUnicode_Check(v)) {
        /* A str or int subclass is copied to the exact type first: its own Python code
           (__str__, __hash__, __eq__) would otherwise run in the middle of the row, where it
           could append another row to this buffer. Copying runs no Python code (the
           subclass's value is read as CPython stores it); the row keeps the plain value. */
        if (!PyLong_CheckExact(v) && !PyUnicode_CheckExact(v)) {
            PyObject *exact = PyLong_Check(v) ? PyNumber_Index(v) : PyUnicode_FromObject(v);
            if (!exact) return -1;
            int rc = encode(rb, exact, depth);
            Py_DECREF(exact);
            return rc;
        }
    }
    if (PyLong_CheckExact(v)) {
        int overflow;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (!overflow) {
            if (x == -1 && PyErr_Occurred()) return -1;
            return put_i64(rb, (int64_t)x);
        }
        PyObject *text = PyObject_Str(v); /* an exact int: CPython's own conversion */
        if (!text) return -1;
        Py_ssize_t n;
        const char *u = PyUnicode_AsUTF8AndSize(text, &n);
        uint32_t n32 = (uint32_t)n;
        tag = 'L';
        int rc = (!u || rput(rb, &tag, 1) < 0 || rput(rb, &n32, 4) < 0 || rput(rb, u, n) < 0) ? -1 : 0;
        Py_DECREF(text);
        return rc;
    }
    if (PyUnicode_CheckExact(v)) {
        StrSlot *slot = &rb->cache[((uintptr_t)v >> 4) % STR_CACHE];
        uint32_t sid;
        if (slot->s == v) {
            tag = 's';
            return rput(rb, &tag, 1) < 0 ? -1 : rput(rb, &slot->id, 4);
        }
        PyObject *id = PyDict_GetItemWithError(rb->strings, v);
        if (id) {
            sid = (uint32_t)PyLong_AsUnsignedLong(id);
        } else {
            if (PyErr_Occurred()) return -1;
            Py_ssize_t n;
            const char *u = PyUnicode_AsUTF8AndSize(v, &n);
            if (!u) return -1;
            sid = (uint32_t)PyDict_GET_SIZE(rb->strings);
            PyObject *o = PyLong_FromUnsignedLong(sid);
            if (!o || PyDict_SetItem(rb->strings, v, o) < 0) {
                Py_XDECREF(o);
                return -1;
            }
            Py_DECREF(o);
            uint32_t n32 = (uint32_t)n;
            tag = 'S';
            if (bput(rb, &tag, 1) < 0 || bput(rb, &sid, 4) < 0 || bput(rb, &n32, 4) < 0 || bput(rb, u, n) < 0)
                return -1;
        }
        /* the old entry's str may be freed here: a str's deallocation runs no Python code */
        Py_XSETREF(slot->s, Py_NewRef(v));
        slot->id = sid;
        tag = 's';
        return rput(rb, &tag, 1) < 0 ? -1 : rput(rb, &sid, 4);
    }
    if (PyTuple_Check(v)) { /* a NamedTuple row (OpEvent) comes back a plain tuple */
        uint32_t n = (uint32_t)PyTuple_GET_SIZE(v);
        tag = '(';
        if (rput(rb, &tag, 1) < 0 || rput(rb, &n, 4) < 0) return -1;
        for (uint32_t i = 0; i < n; i++)
            if (encode1(rb, PyTuple_GET_ITEM(v, i), depth + 1) < 0) return -1;
        return 0;
    }
    PyErr_Format(PyExc_TypeError, "RowBuffer: a raw row holds no %.100s", Py_TYPE(v)->tp_name);
    return -1;
}

/* Encode `row` (a raw row of `table`) at the end of the buffer; steals row. */
static int rb_add(RowBuffer *rb, int table, PyObject *row) {
    if (!row) return -1;
    /* Encoding runs no Python code (encode copies str/int subclasses; it allocates no object
       the cycle collector tracks, so no collection and no finalizer starts here), hence
       nothing can append meanwhile. `busy` keeps it so if that ever changes: a row appended
       during another's encoding goes to the Sink's fallback deque, not into the half-written
       scratch row. */
    rb->busy = 1;
    rb->rlen = 0;
    char head[2] = {'R', (char)table};
    int rc = rput(rb, head, 2) < 0 || encode(rb, row, 0) < 0 || bput(rb, rb->row, rb->rlen) < 0 ? -1 : 0;
    rb->busy = 0;
    Py_DECREF(row);
    if (!rc) rb->rows[table]++;
    return rc;
}

static void rb_dealloc(RowBuffer *self) {
    for (int i = 0; i < STR_CACHE; i++) Py_CLEAR(self->cache[i].s);
    PyMem_Free(self->buf);
    PyMem_Free(self->row);
    Py_XDECREF(self->strings);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int rb_init(RowBuffer *self, PyObject *args, PyObject *kw) {
    if (!PyArg_ParseTuple(args, "")) return -1;
    if (!self->strings && !(self->strings = PyDict_New())) return -1;
    return 0;
}

/* take() -> (bytes, ops, transfers, buffers): what was packed since the last take. */
static PyObject *rb_take(RowBuffer *self, PyObject *unused) {
    /* The result tuple first: allocating it can start a collection, whose finalizers and
       callbacks may record a row here. Nothing allocated after it is counted by the collector
       (bytes, ints), so the snapshot and the reset below see the same rows; the other order
       dropped such a row, and the definition of a string it used first, which broke the
       decoding of every later batch. */
    PyObject *r = PyTuple_New(4);
    if (!r) return NULL;
    PyObject *items[4] = {PyBytes_FromStringAndSize(self->buf, self->len), PyLong_FromSsize_t(self->rows[T_OPS]),
                          PyLong_FromSsize_t(self->rows[T_TRANSFERS]), PyLong_FromSsize_t(self->rows[T_BUFFERS])};
    if (!items[0] || !items[1] || !items[2] || !items[3]) {
        for (int i = 0; i < 4; i++) Py_XDECREF(items[i]);
        Py_DECREF(r);
        return NULL;
    }
    for (int i = 0; i < 4; i++) PyTuple_SET_ITEM(r, i, items[i]);
    self->len = 0;
    memset(self->rows, 0, sizeof(self->rows));
    if (self->cap > (16 << 20)) { /* a burst made it large: give the memory back */
        PyMem_Free(self->buf);
        self->buf = NULL;
        self->cap = 0;
    }
    return r;
}

static PyObject *rb_pending(RowBuffer *self, void *unused) {
    return PyLong_FromSsize_t(self->rows[0] + self->rows[1] + self->rows[2]);
}

static PyObject *rb_sink(RowBuffer *self, PyObject *args);

static PyMethodDef rb_methods[] = {
    {"take", (PyCFunction)rb_take, METH_NOARGS, "take() -> (bytes, ops, transfers, buffers), and start again"},
    {"sink", (PyCFunction)rb_sink, METH_VARARGS, "sink(table, fallback_deque) -> Sink"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef rb_getset[] = {
    {"pending", (getter)rb_pending, NULL, "rows packed since the last take()", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject RowBufferType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "jaxplace_cli.model._packed.RowBuffer",
    .tp_basicsize = sizeof(RowBuffer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "RowBuffer(): raw rows packed as bytes (module comment).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)rb_init,
    .tp_dealloc = (destructor)rb_dealloc,
    .tp_methods = rb_methods,
    .tp_getset = rb_getset,
};

typedef struct {
    PyObject_HEAD
    PyObject *strings; /* list: id -> str */
} Decoder;

typedef struct {
    const char *p, *end;
} Reader;

static int rd(Reader *r, void *out, Py_ssize_t n) {
    if (r->end - r->p < n) {
        PyErr_SetString(PyExc_ValueError, "packed rows: truncated");
        return -1;
    }
    memcpy(out, r->p, (size_t)n);
    r->p += n;
    return 0;
}

static PyObject *decode_value(Decoder *d, Reader *r, int depth) {
    char tag;
    if (depth > 4 || rd(r, &tag, 1) < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "packed rows: nested too deep");
        return NULL;
    }
    switch (tag) {
    case 'T': return Py_NewRef(Py_True);
    case 'F': return Py_NewRef(Py_False);
    case 'N': return Py_NewRef(Py_None);
    case 'i': {
        int64_t x;
        return rd(r, &x, 8) < 0 ? NULL : PyLong_FromLongLong((long long)x);
    }
    case 'L': {
        uint32_t n;
        if (rd(r, &n, 4) < 0 || r->end - r->p < (Py_ssize_t)n) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "packed rows: truncated");
            return NULL;
        }
        PyObject *text = PyUnicode_DecodeUTF8(r->p, n, "strict");
        r->p += n;
        if (!text) return NULL;
        PyObject *v = PyLong_FromUnicodeObject(text, 10);
        Py_DECREF(text);
        return v;
    }
    case 's': {
        uint32_t sid;
        if (rd(r, &sid, 4) < 0) return NULL;
        if ((Py_ssize_t)sid >= PyList_GET_SIZE(d->strings)) {
            PyErr_SetString(PyExc_ValueError, "packed rows: an undefined string");
            return NULL;
        }
        return Py_NewRef(PyList_GET_ITEM(d->strings, sid));
    }
    case '(': {
        uint32_t n;
        if (rd(r, &n, 4) < 0) return NULL;
        if ((Py_ssize_t)n > r->end - r->p) {
            PyErr_SetString(PyExc_ValueError, "packed rows: truncated");
            return NULL;
        }
        PyObject *t = PyTuple_New(n);
        if (!t) return NULL;
        for (uint32_t i = 0; i < n; i++) {
            PyObject *v = decode_value(d, r, depth + 1);
            if (!v) {
                Py_DECREF(t);
                return NULL;
            }
            PyTuple_SET_ITEM(t, i, v);
        }
        return t;
    }
    }
    PyErr_Format(PyExc_ValueError, "packed rows: unknown tag 0x%02x", (unsigned char)tag);
    return NULL;
}

/* decode(data) -> (ops, transfers, buffers): lists of raw rows, in the order they were packed */
static PyObject *dec_decode(Decoder *self, PyObject *arg) {
    if (!self->strings) {
        PyErr_SetString(PyExc_RuntimeError, "Decoder used before __init__");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    Reader r = {view.buf, (const char *)view.buf + view.len};
    PyObject *lists[N_TABLES] = {PyList_New(0), PyList_New(0), PyList_New(0)};
    PyObject *result = NULL;
    if (!lists[0] || !lists[1] || !lists[2]) goto done;
    while (r.p < r.end) {
        char tag;
        if (rd(&r, &tag, 1) < 0) goto done;
        if (tag == 'S') {
            uint32_t sid, n;
            if (rd(&r, &sid, 4) < 0 || rd(&r, &n, 4) < 0) goto done;
            if ((Py_ssize_t)sid != PyList_GET_SIZE(self->strings) || r.end - r.p < (Py_ssize_t)n) {
                PyErr_SetString(PyExc_ValueError, "packed rows: strings out of order");
                goto done;
            }
            PyObject *text = PyUnicode_DecodeUTF8(r.p, n, "strict");
            r.p += n;
            if (!text) goto done;
            PyUnicode_InternInPlace(&text);
            int err = PyList_Append(self->strings, text);
            Py_DECREF(text);
            if (err < 0) goto done;
        } else if (tag == 'R') {
            unsigned char table;
            if (rd(&r, &table, 1) < 0) goto done;
            if (table >= N_TABLES) {
                PyErr_SetString(PyExc_ValueError, "packed rows: unknown table");
                goto done;
            }
            PyObject *row = decode_value(self, &r, 0);
            if (!row) goto done;
            int err = PyList_Append(lists[table], row);
            Py_DECREF(row);
            if (err < 0) goto done;
        } else {
            PyErr_Format(PyExc_ValueError, "packed rows: unknown record 0x%02x", (unsigned char)tag);
            goto done;
        }
    }
    result = PyTuple_Pack(3, lists[0], lists[1], lists[2]);
done:
    for (int i = 0; i < N_TABLES; i++) Py_XDECREF(lists[i]);
    PyBuffer_Release(&view);
    return result;
}

static void dec_dealloc(Decoder *self) {
    Py_XDECREF(self->strings);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int dec_init(Decoder *self, PyObject *args, PyObject *kw) {
    if (!PyArg_ParseTuple(args, "")) return -1;
    if (!self->strings && !(self->strings = PyList_New(0))) return -1;
    return 0;
}

static PyMethodDef dec_methods[] = {
    {"decode", (PyCFunction)dec_decode, METH_O, "decode(data) -> (ops, transfers, buffers) raw rows"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject DecoderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "jaxplace_cli.model._packed.Decoder",
    .tp_basicsize = sizeof(Decoder),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Decoder(): a RowBuffer's bytes back into raw rows (keeps its string table).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)dec_init,
    .tp_dealloc = (destructor)dec_dealloc,
    .tp_methods = dec_methods,
};

/* ---------------------------------------------------------------- Sink */

/* What the recorder's ``ops``/``transfers``/``buffers`` become once rows are packed: an object
   with the deque methods the hooks use (``append``, ``len``). Rows the Python hooks append are
   packed too, so no row of any path waits as a tuple for the writer; a row the encoder cannot
   hold (a value of a type no raw row should have), or one appended while another row is
   being encoded (RowBuffer.busy), goes to the fallback deque as before, never an error in the
   user's program. */
typedef struct {
    PyObject_HEAD
    RowBuffer *rb;
    int table;
    PyObject *fallback; /* a collections.deque */
} Sink;

/* The errors a row can raise that send it to the fallback deque instead (a value of a type no
   raw row holds, an int past what it can say): cleared, 1; any other (memory) stays, 0. */
static int declined(void) {
    if (!PyErr_ExceptionMatches(PyExc_TypeError) && !PyErr_ExceptionMatches(PyExc_ValueError) &&
        !PyErr_ExceptionMatches(PyExc_OverflowError))
        return 0;
    PyErr_Clear();
    return 1;
}

/* sink.append(row), stealing row: 0, or -1 with an error set. Also the C entry point
   capture/_native.c calls for a Sink (the `_C_API` capsule), without a method call per row. */
static int sink_add(PyObject *sink, PyObject *row) {
    Sink *self = (Sink *)sink;
    if (PyTuple_Check(row) && !self->rb->busy) {
        Py_INCREF(row);
        if (rb_add(self->rb, self->table, row) == 0) {
            Py_DECREF(row);
            return 0;
        }
        if (!declined()) {
            Py_DECREF(row);
            return -1; /* out of memory: said */
        }
    }
    /* not PyObject_CallMethod(..., "O", row): a tuple built from "O" becomes the argument list */
    PyObject *name = PyUnicode_InternFromString("append");
    PyObject *r = name ? PyObject_CallMethodOneArg(self->fallback, name, row) : NULL;
    Py_XDECREF(name);
    Py_DECREF(row);
    if (!r) return -1;
    Py_DECREF(r);
    return 0;
}

/* See _packed_api.h: the bytes rb_add writes for the tuple of these values, in the same order
   ('R', the table, '(' and the count, each value at depth 1). */
static int sink_vrow(PyObject *sink, const char *fmt, va_list ap) {
    Sink *self = (Sink *)sink;
    RowBuffer *rb = self->rb;
    Py_ssize_t n = (Py_ssize_t)strlen(fmt) - 2;
    if (rb->busy || n < 0 || fmt[0] != '(' || fmt[n + 1] != ')') return 1;
    rb->busy = 1;
    rb->rlen = 0;
    char head[3] = {'R', (char)self->table, '('};
    uint32_t count = (uint32_t)n;
    int rc = rput(rb, head, 3) < 0 || rput(rb, &count, 4) < 0 ? -1 : 0;
    for (Py_ssize_t i = 1; !rc && i <= n; i++) {
        if (fmt[i] == 'L' || fmt[i] == 'K') {
            int64_t x;
            if (fmt[i] == 'L') {
                x = (int64_t)va_arg(ap, long long);
            } else {
                unsigned long long u = va_arg(ap, unsigned long long);
                if (u > (unsigned long long)INT64_MAX) { /* past int64: the tuple's int says it */
                    PyErr_SetString(PyExc_OverflowError, "sink_vrow: an unsigned value past int64");
                    rc = -1;
                    break;
                }
                x = (int64_t)u;
            }
            rc = put_i64(rb, x);
        } else if (fmt[i] == 'O') {
            rc = encode1(rb, va_arg(ap, PyObject *), 1);
        } else {
            PyErr_SetString(PyExc_ValueError, "sink_vrow: a format of 'L', 'K' and 'O' only");
            rc = -1;
        }
    }
    if (!rc) rc = bput(rb, rb->row, rb->rlen);
    rb->busy = 0;
    if (!rc) {
        rb->rows[self->table]++;
        return 0;
    }
    return declined() ? 1 : -1; /* 1: the caller appends the tuple, to the fallback deque as sink_add does */
}

static PyObject *sink_append(Sink *self, PyObject *row) {
    return sink_add((PyObject *)self, Py_NewRef(row)) < 0 ? NULL : Py_NewRef(Py_None);
}

static Py_ssize_t sink_len(Sink *self) {
    Py_ssize_t n = PyObject_Length(self->fallback);
    return n < 0 ? -1 : n + self->rb->rows[self->table];
}

static int sink_traverse(Sink *self, visitproc visit, void *arg) {
    Py_VISIT(self->rb);
    Py_VISIT(self->fallback);
    return 0;
}

static int sink_clear(Sink *self) {
    Py_CLEAR(self->rb);
    Py_CLEAR(self->fallback);
    return 0;
}

static void sink_dealloc(Sink *self) {
    PyObject_GC_UnTrack(self);
    sink_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef sink_methods[] = {
    {"append", (PyCFunction)sink_append, METH_O, "append(row): pack it (or keep it in the fallback deque)"},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods sink_as_sequence = {.sq_length = (lenfunc)sink_len};

static PyTypeObject SinkType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "jaxplace_cli.model._packed.Sink",
    .tp_basicsize = sizeof(Sink),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "RowBuffer.sink(table, fallback): one table's rows, packed as they are appended.",
    .tp_dealloc = (destructor)sink_dealloc,
    .tp_traverse = (traverseproc)sink_traverse,
    .tp_clear = (inquiry)sink_clear,
    .tp_methods = sink_methods,
    .tp_as_sequence = &sink_as_sequence,
};

static PyObject *rb_sink(RowBuffer *self, PyObject *args) {
    int table;
    PyObject *fallback;
    if (!PyArg_ParseTuple(args, "iO", &table, &fallback)) return NULL;
    if (!self->strings) {
        PyErr_SetString(PyExc_RuntimeError, "RowBuffer used before __init__");
        return NULL;
    }
    if (table < 0 || table >= N_TABLES) {
        PyErr_SetString(PyExc_ValueError, "table: 0 ops, 1 transfers, 2 buffers");
        return NULL;
    }
    Sink *s = PyObject_GC_New(Sink, &SinkType);
    if (!s) return NULL;
    Py_INCREF(self);
    s->rb = self;
    s->table = table;
    Py_INCREF(fallback);
    s->fallback = fallback;
    PyObject_GC_Track(s);
    return (PyObject *)s;
}

/* ---------------------------------------------------------------- module */

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "_packed",
                                    "Raw capture rows packed as bytes, and back (issue 18).", -1, NULL};

PyMODINIT_FUNC PyInit__packed(void) {
    if (PyType_Ready(&RowBufferType) < 0 || PyType_Ready(&DecoderType) < 0 || PyType_Ready(&SinkType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&moddef);
    if (!m) return NULL;
    /* for capture/_native.c: the Sink type and its append (see sink_add) */
    static JaxplacePackedAPI api;
    api.version = JAXPLACE_PACKED_API_VERSION;
    api.sink_type = &SinkType;
    api.sink_add = sink_add;
    api.sink_vrow = sink_vrow;
    PyObject *capsule = PyCapsule_New(&api, "jaxplace_cli.model._packed._C_API", NULL);
    if (!capsule || PyModule_AddObject(m, "_C_API", capsule) < 0) {
        Py_XDECREF(capsule);
        Py_DECREF(m);
        return NULL;
    }
    PyTypeObject *types[] = {&RowBufferType, &DecoderType};
    const char *names[] = {"RowBuffer", "Decoder"};
    for (int i = 0; i < 2; i++) {
        Py_INCREF(types[i]);
        if (PyModule_AddObject(m, names[i], (PyObject *)types[i]) < 0) {
            Py_DECREF(types[i]);
            Py_DECREF(m);
            return NULL;
        }
    }
    return m;
}
