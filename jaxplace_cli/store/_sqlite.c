/* The writer process's SQLite connection through SQLite's C API (issue 29 item 3).

   The writer process (store/writer_process.py) spends most of its time in
   sqlite3.Connection.executemany: measured on 960k rows of bench P6's transfers/buffers
   tables, Python's sqlite3 module took 1.09-1.26 us a row and the same inserts through the C
   API 0.71 us (a bool costs pysqlite an adapter lookup). This type has the three methods
   StoreWriter (store/writer.py) calls -- execute(sql) without parameters, executemany(sql,
   rows), close() -- and raises the sqlite3 module's own exception classes with SQLite's own
   message, so the writer's error handling (disk full, a removed directory) is unchanged.

   Binding (store/_sqlite_api.h, shared with store/_columns.c) is what pysqlite does for the
   types the store holds: None, int (bool included; OverflowError past 64 bits), float, str
   (UTF-8), bytes; anything else is sqlite3.ProgrammingError. Only for a single-threaded
   process: the GIL is held throughout
   (the writer process has no other thread; the in-process writer keeps pysqlite, which
   releases the GIL around each step for the user's threads).

   Optional like the capture extensions: without a compiler or SQLite's header, StoreWriter
   uses the sqlite3 module. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <sqlite3.h>
#include <stdint.h>
#include <string.h>

#include "_sqlite_api.h"


#define N_STMTS 16 /* StoreWriter prepares ~12 distinct statements */

typedef struct {
    PyObject_HEAD
    sqlite3 *db;
    PyObject *sql[N_STMTS]; /* the statement's text, compared by identity first */
    sqlite3_stmt *stmt[N_STMTS];
    int next; /* the slot replaced when all are taken */
    int busy; /* in executemany: the rows' iterator or a str subclass's __eq__ runs Python, which
                 must not close the connection or evict the statement in use */
} Conn;


static void finalize_all(Conn *c) {
    for (int i = 0; i < N_STMTS; i++) {
        if (c->stmt[i]) sqlite3_finalize(c->stmt[i]);
        c->stmt[i] = NULL;
        Py_CLEAR(c->sql[i]);
    }
}

static int conn_init(Conn *self, PyObject *args, PyObject *kw) {
    PyObject *path = NULL;
    if (!PyArg_ParseTuple(args, "O&:Connection", PyUnicode_FSConverter, &path)) return -1;
    if (self->db) {
        PyErr_SetString(ProgrammingError, "Connection is already open");
        Py_DECREF(path);
        return -1;
    }
    sqlite3 *db = NULL;
    /* NOMUTEX: no lock around each call on the connection. Every call here holds the GIL and
       none releases it, so nothing can use this connection concurrently (insert 0.84 -> 0.77 us
       a row, bench/bench_writer.py 800 3, alternated twice). */
    int rc = sqlite3_open_v2(PyBytes_AS_STRING(path), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                             NULL);
    Py_DECREF(path);
    if (rc != SQLITE_OK) {
        sqlite_error(db, rc);
        sqlite3_close_v2(db);
        return -1;
    }
    sqlite3_busy_timeout(db, 5000); /* pysqlite's default timeout: a reader holding a lock */
    self->db = db;
    return 0;
}

static int check_open(Conn *self) {
    if (self->db) return 0;
    PyErr_SetString(ProgrammingError, "Cannot operate on a closed database.");
    return -1;
}

static PyObject *conn_execute(Conn *self, PyObject *sql) {
    if (check_open(self) < 0) return NULL;
    if (self->busy) {
        PyErr_SetString(ProgrammingError, "Recursive use of the connection is not allowed.");
        return NULL;
    }
    const char *text = PyUnicode_AsUTF8(sql);
    if (!text) return NULL;
    int rc = sqlite3_exec(self->db, text, NULL, NULL, NULL);
    if (rc != SQLITE_OK) return sqlite_error(self->db, rc);
    Py_RETURN_NONE;
}

static sqlite3_stmt *prepared(Conn *self, PyObject *sql) {
    for (int i = 0; i < N_STMTS; i++)
        if (self->sql[i] == sql) return self->stmt[i];
    for (int i = 0; i < N_STMTS; i++) {
        if (!self->sql[i]) continue;
        int eq = PyObject_RichCompareBool(self->sql[i], sql, Py_EQ);
        if (eq < 0) return NULL;
        if (eq) return self->stmt[i];
    }
    Py_ssize_t n;
    const char *text = PyUnicode_AsUTF8AndSize(sql, &n);
    if (!text) return NULL;
    sqlite3_stmt *stmt = NULL;
    int rc = sqlite3_prepare_v2(self->db, text, (int)n, &stmt, NULL);
    if (rc != SQLITE_OK || !stmt) {
        if (stmt) sqlite3_finalize(stmt);
        if (rc == SQLITE_OK) PyErr_SetString(ProgrammingError, "empty statement");
        else sqlite_error(self->db, rc);
        return NULL;
    }
    int slot = self->next;
    self->next = (self->next + 1) % N_STMTS;
    if (self->stmt[slot]) sqlite3_finalize(self->stmt[slot]);
    Py_XDECREF(self->sql[slot]);
    Py_INCREF(sql);
    self->sql[slot] = sql;
    self->stmt[slot] = stmt;
    return stmt;
}

static PyObject *executemany_(Conn *self, PyObject *sql, PyObject *rows);

static PyObject *conn_executemany(Conn *self, PyObject *args) {
    PyObject *sql, *rows;
    if (!PyArg_ParseTuple(args, "UO:executemany", &sql, &rows)) return NULL;
    if (check_open(self) < 0) return NULL;
    if (self->busy) {
        PyErr_SetString(ProgrammingError, "Recursive use of the connection is not allowed.");
        return NULL;
    }
    self->busy = 1;
    PyObject *r = executemany_(self, sql, rows);
    self->busy = 0;
    return r;
}

static PyObject *executemany_(Conn *self, PyObject *sql, PyObject *rows) {
    sqlite3_stmt *stmt = prepared(self, sql);
    if (!stmt) return NULL;
    int want = sqlite3_bind_parameter_count(stmt);
    PyObject *it = PyObject_GetIter(rows);
    if (!it) return NULL;
    PyObject *row, *result = Py_None;
    while ((row = PyIter_Next(it))) {
        PyObject *seq = PySequence_Fast(row, "executemany: each row must be a sequence");
        Py_DECREF(row);
        if (!seq) { result = NULL; break; }
        Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
        if (n != want) {
            PyErr_Format(ProgrammingError, "Incorrect number of bindings supplied. The current statement "
                         "uses %d, and there are %zd supplied.", want, n);
            Py_DECREF(seq);
            result = NULL;
            break;
        }
        PyObject **items = PySequence_Fast_ITEMS(seq);
        int ok = 1;
        for (Py_ssize_t j = 0; j < n && ok; j++)
            ok = bind_value(self->db, stmt, (int)j + 1, items[j]) == 0; /* the row holds the values until the step */
        if (ok) {
            int rc = sqlite3_step(stmt);
            if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
                rc = sqlite3_reset(stmt); /* the statement's real error code */
                sqlite_error(self->db, rc);
                ok = 0;
            } else {
                sqlite3_reset(stmt);
            }
        }
        Py_DECREF(seq); /* after the step: the bound text points into the row's objects */
        if (!ok) { result = NULL; break; }
    }
    Py_DECREF(it);
    if (result && PyErr_Occurred()) result = NULL; /* the iterator failed */
    sqlite3_reset(stmt);
    sqlite3_clear_bindings(stmt);
    if (!result) return NULL;
    Py_RETURN_NONE;
}

static PyObject *conn_close(Conn *self, PyObject *unused) {
    if (self->busy) {
        PyErr_SetString(ProgrammingError, "Cannot close the connection inside executemany.");
        return NULL;
    }
    finalize_all(self);
    if (self->db) {
        int rc = sqlite3_close_v2(self->db);
        self->db = NULL;
        if (rc != SQLITE_OK) return sqlite_error(NULL, rc);
    }
    Py_RETURN_NONE;
}

static void conn_dealloc(Conn *self) {
    finalize_all(self);
    if (self->db) sqlite3_close_v2(self->db);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef conn_methods[] = {
    {"execute", (PyCFunction)conn_execute, METH_O, "execute(sql): run SQL without parameters."},
    {"executemany", (PyCFunction)conn_executemany, METH_VARARGS,
     "executemany(sql, rows): one prepared statement stepped once per row."},
    {"close", (PyCFunction)conn_close, METH_NOARGS, "close(): finalize the statements, close."},
    {NULL, NULL, 0, NULL}};

static PyTypeObject ConnType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "jaxplace_cli.store._sqlite.Connection",
    .tp_basicsize = sizeof(Conn),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Connection(path): SQLite through its C API, for the writer process only.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)conn_init,
    .tp_dealloc = (destructor)conn_dealloc,
    .tp_methods = conn_methods,
};

/* ---------------------------------------------------------------- finish_rows */

/* finish_core(ops, transfers, buffers, formats, layout) -> (ops, transfers, stacks, buffers), or
   None: store/rows.py's finish_rows for the rows it is always given (issue 29 item 3: 0.38 us a
   row in Python, the writer process's largest cost after the insert). None when a row is not of
   the exact shape this code knows (a list for a tuple, a shape past int64): rows.py then does the
   whole batch in Python, so the result never differs from it. `formats` is rows.py's shape cache
   (shape -> (text, element count)); layout = (op fields, in_bufs, out_bufs, seq, devices, site,
   transfer fields, shape, dtype, committed, op fields with a result): the event contract's
   indices, defined once in Python (model/events.py, model/raw.py). */

typedef struct {
    Py_ssize_t op_fields, in_bufs, out_bufs, seq, devices, site, tr_fields, shape, dtype, committed, with_result;
} Layout;

#define UNKNOWN 1 /* returned by the helpers: not a row this code knows (no exception set) */

/* (text, count) for `shape` (a tuple of ints), from the cache or made and cached: a new
   reference in *fmt. */
static int shape_format(PyObject *formats, PyObject *shape, PyObject **fmt) {
    PyObject *hit = PyDict_GetItemWithError(formats, shape);
    if (hit) {
        if (!PyTuple_CheckExact(hit) || PyTuple_GET_SIZE(hit) != 2) return UNKNOWN;
        *fmt = Py_NewRef(hit);
        return 0;
    }
    if (PyErr_Occurred()) return -1;
    Py_ssize_t nd = PyTuple_GET_SIZE(shape);
    long long n = 1;
    PyObject *text;
    if (nd == 0) {
        text = PyUnicode_FromString("scalar");
    } else {
        char buf[32 * 24];
        Py_ssize_t len = 0;
        if (nd > 24) return UNKNOWN;
        for (Py_ssize_t i = 0; i < nd; i++) {
            PyObject *d = PyTuple_GET_ITEM(shape, i);
            if (!PyLong_CheckExact(d)) return UNKNOWN;
            int overflow = 0;
            long long v = PyLong_AsLongLongAndOverflow(d, &overflow);
            if (overflow || (v == -1 && PyErr_Occurred())) {
                PyErr_Clear();
                return UNKNOWN;
            }
            if (__builtin_mul_overflow(n, v, &n)) return UNKNOWN;
            len += snprintf(buf + len, sizeof(buf) - (size_t)len, i ? "x%lld" : "%lld", v);
        }
        text = PyUnicode_FromStringAndSize(buf, len);
    }
    if (!text) return -1;
    PyObject *count = PyLong_FromLongLong(n);
    PyObject *made = count ? PyTuple_Pack(2, text, count) : NULL;
    Py_DECREF(text);
    Py_XDECREF(count);
    if (!made) return -1;
    if (PyDict_SetItem(formats, shape, made) < 0) {
        Py_DECREF(made);
        return -1;
    }
    *fmt = made; /* ours as well as the cache's: a key's __eq__ may empty the cache */
    return 0;
}

/* BufferEvent(b, seq, device, text, dtype, count * itemsize, bool(committed), site) appended. */
static int add_buffer(PyObject *out, PyObject *formats, PyObject *b, PyObject *seq, PyObject *device,
                      PyObject *shape, PyObject *dtype_pair, PyObject *committed, PyObject *site) {
    if (!PyTuple_CheckExact(shape) || !PyTuple_CheckExact(dtype_pair) || PyTuple_GET_SIZE(dtype_pair) != 2)
        return UNKNOWN;
    PyObject *fmt = NULL; /* held: a __bool__ or __mul__ below may empty the cache */
    int rc = shape_format(formats, shape, &fmt);
    if (rc) return rc;
    int truth = PyObject_IsTrue(committed);
    PyObject *nbytes = truth < 0 ? NULL : PyNumber_Multiply(PyTuple_GET_ITEM(fmt, 1), PyTuple_GET_ITEM(dtype_pair, 1));
    PyObject *row = nbytes ? PyTuple_Pack(8, b, seq, device, PyTuple_GET_ITEM(fmt, 0), PyTuple_GET_ITEM(dtype_pair, 0),
                                          nbytes, truth ? Py_True : Py_False, site)
                           : NULL;
    Py_XDECREF(nbytes);
    Py_DECREF(fmt);
    if (!row) return -1;
    rc = PyList_Append(out, row);
    Py_DECREF(row);
    return rc;
}

/* rows.py's _ids: buffer ids as stored (the text, one int, or a tuple of them joined by ","). */
static PyObject *ids_text(PyObject *bufs) {
    if (PyUnicode_CheckExact(bufs)) {
        Py_INCREF(bufs);
        return bufs;
    }
    if (PyLong_CheckExact(bufs)) return PyObject_Str(bufs);
    if (!PyTuple_CheckExact(bufs)) return Py_NewRef(Py_None); /* unknown: the caller falls back */
    Py_ssize_t n = PyTuple_GET_SIZE(bufs);
    PyObject *parts = PyList_New(n);
    if (!parts) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_GET_ITEM(bufs, i);
        if (!PyLong_CheckExact(item)) {
            Py_DECREF(parts);
            return Py_NewRef(Py_None);
        }
        PyObject *t = PyObject_Str(item);
        if (!t) {
            Py_DECREF(parts);
            return NULL;
        }
        PyList_SET_ITEM(parts, i, t);
    }
    PyObject *sep = PyUnicode_FromString(",");
    PyObject *joined = sep ? PyUnicode_Join(sep, parts) : NULL;
    Py_XDECREF(sep);
    Py_DECREF(parts);
    return joined;
}

static int finish_op(PyObject *op, const Layout *L, PyObject *formats, PyObject *ops, PyObject *buffers) {
    if (!PyTuple_CheckExact(op)) return UNKNOWN;
    Py_ssize_t n = PyTuple_GET_SIZE(op);
    if (n != L->op_fields && n != L->with_result) return UNKNOWN;
    PyObject *in = PyTuple_GET_ITEM(op, L->in_bufs), *out = PyTuple_GET_ITEM(op, L->out_bufs);
    if (PyUnicode_CheckExact(in) && PyUnicode_CheckExact(out)) /* rows.py: `type(...) is str` */
        return PyList_Append(ops, op);
    if (PyUnicode_Check(in) && !PyUnicode_CheckExact(in)) return UNKNOWN; /* a str subclass */
    if (PyUnicode_Check(out) && !PyUnicode_CheckExact(out)) return UNKNOWN;
    if (n == L->with_result) {
        int rc = add_buffer(buffers, formats, out, PyTuple_GET_ITEM(op, L->seq), PyTuple_GET_ITEM(op, L->devices),
                            PyTuple_GET_ITEM(op, L->shape), PyTuple_GET_ITEM(op, L->dtype),
                            PyTuple_GET_ITEM(op, L->committed), PyTuple_GET_ITEM(op, L->site));
        if (rc) return rc;
    }
    PyObject *row = PyTuple_New(L->op_fields);
    if (!row) return -1;
    for (Py_ssize_t i = 0; i < L->op_fields; i++) {
        PyObject *v;
        if (i == L->in_bufs || i == L->out_bufs) {
            v = ids_text(PyTuple_GET_ITEM(op, i));
            if (!v) {
                Py_DECREF(row);
                return -1;
            }
            if (v == Py_None) {
                Py_DECREF(v);
                Py_DECREF(row);
                return UNKNOWN;
            }
        } else {
            v = Py_NewRef(PyTuple_GET_ITEM(op, i));
        }
        PyTuple_SET_ITEM(row, i, v);
    }
    int rc = PyList_Append(ops, row);
    Py_DECREF(row);
    return rc;
}

static int finish_transfer(PyObject *t, Py_ssize_t n, PyObject *transfers, PyObject *stacks) {
    if (!PyTuple_CheckExact(t)) return UNKNOWN;
    if (PyTuple_GET_SIZE(t) <= n) return PyList_Append(transfers, t);
    PyObject *node = PyTuple_GET_ITEM(t, n);
    int truth = PyObject_IsTrue(node);
    if (truth < 0) return -1;
    if (truth) {
        PyObject *pair = PyTuple_Pack(2, PyTuple_GET_ITEM(t, 0), node);
        if (!pair) return -1;
        int rc = PyList_Append(stacks, pair);
        Py_DECREF(pair);
        if (rc < 0) return -1;
    }
    PyObject *head = PyTuple_GetSlice(t, 0, n);
    if (!head) return -1;
    int rc = PyList_Append(transfers, head);
    Py_DECREF(head);
    return rc;
}

static int finish_buffer(PyObject *r, PyObject *formats, PyObject *buffers) {
    if (!PyTuple_CheckExact(r) || PyTuple_GET_SIZE(r) != 7) return UNKNOWN;
    return add_buffer(buffers, formats, PyTuple_GET_ITEM(r, 0), PyTuple_GET_ITEM(r, 1), PyTuple_GET_ITEM(r, 2),
                      PyTuple_GET_ITEM(r, 3), PyTuple_GET_ITEM(r, 4), PyTuple_GET_ITEM(r, 5), PyTuple_GET_ITEM(r, 6));
}

static PyObject *finish_core(PyObject *mod, PyObject *args) {
    PyObject *ops_in, *transfers_in, *buffers_in, *formats, *layout;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!:finish_core", &PyList_Type, &ops_in, &PyList_Type, &transfers_in,
                          &PyList_Type, &buffers_in, &PyDict_Type, &formats, &PyTuple_Type, &layout))
        return NULL;
    Layout L;
    if (!PyArg_ParseTuple(layout, "nnnnnnnnnnn:layout", &L.op_fields, &L.in_bufs, &L.out_bufs, &L.seq, &L.devices,
                          &L.site, &L.tr_fields, &L.shape, &L.dtype, &L.committed, &L.with_result))
        return NULL;
    Py_ssize_t idx[] = {L.in_bufs, L.out_bufs, L.seq, L.devices, L.site, L.shape, L.dtype, L.committed};
    for (size_t i = 0; i < sizeof(idx) / sizeof(idx[0]); i++)
        if (idx[i] < 0 || idx[i] >= L.with_result || (i < 5 && idx[i] >= L.op_fields) || L.op_fields > L.with_result) {
            PyErr_SetString(PyExc_ValueError, "finish_core: a layout index out of range");
            return NULL;
        }
    if (L.tr_fields < 1) {
        PyErr_SetString(PyExc_ValueError, "finish_core: transfer rows need fields");
        return NULL;
    }
    PyObject *ops = PyList_New(0), *transfers = PyList_New(0), *stacks = PyList_New(0), *buffers = PyList_New(0);
    int rc = (ops && transfers && stacks && buffers) ? 0 : -1;
    /* indexed loops that re-read the size: an element's __bool__ or __str__ may run Python */
    for (Py_ssize_t i = 0; rc == 0 && i < PyList_GET_SIZE(ops_in); i++) {
        PyObject *op = Py_NewRef(PyList_GET_ITEM(ops_in, i));
        rc = finish_op(op, &L, formats, ops, buffers);
        Py_DECREF(op);
    }
    for (Py_ssize_t i = 0; rc == 0 && i < PyList_GET_SIZE(buffers_in); i++) {
        PyObject *r = Py_NewRef(PyList_GET_ITEM(buffers_in, i));
        rc = finish_buffer(r, formats, buffers);
        Py_DECREF(r);
    }
    for (Py_ssize_t i = 0; rc == 0 && i < PyList_GET_SIZE(transfers_in); i++) {
        PyObject *t = Py_NewRef(PyList_GET_ITEM(transfers_in, i));
        rc = finish_transfer(t, L.tr_fields, transfers, stacks);
        Py_DECREF(t);
    }
    PyObject *result = NULL;
    if (rc == 0)
        result = PyTuple_Pack(4, ops, transfers, stacks, buffers);
    else if (rc == UNKNOWN)
        result = Py_NewRef(Py_None);
    Py_XDECREF(ops);
    Py_XDECREF(transfers);
    Py_XDECREF(stacks);
    Py_XDECREF(buffers);
    return result;
}

/* frees_core(data, names) -> [(buf, seq, names[how]), ...]: model/raw.py's frees_rows for the
   recorder's packed frees (three native int64 a row, as capture/_native.c writes them); None
   for a kind that is not 0 <= how < len(names), which frees_rows then says in its own words. */
static PyObject *frees_core(PyObject *mod, PyObject *args) {
    Py_buffer view;
    PyObject *names;
    if (!PyArg_ParseTuple(args, "y*O!:frees_core", &view, &PyTuple_Type, &names)) return NULL;
    const Py_ssize_t width = 3 * (Py_ssize_t)sizeof(int64_t);
    if (view.len % width) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "frees_core: not whole rows");
        return NULL;
    }
    Py_ssize_t n = view.len / width;
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out && i < n; i++) {
        int64_t v[3];
        memcpy(v, (const char *)view.buf + i * width, sizeof(v));
        if (v[2] < 0 || v[2] >= PyTuple_GET_SIZE(names)) {
            Py_DECREF(out);
            PyBuffer_Release(&view);
            Py_RETURN_NONE;
        }
        PyObject *b = PyLong_FromLongLong(v[0]), *seq = PyLong_FromLongLong(v[1]);
        PyObject *row = b && seq ? PyTuple_Pack(3, b, seq, PyTuple_GET_ITEM(names, v[2])) : NULL;
        Py_XDECREF(b);
        Py_XDECREF(seq);
        if (!row) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, row);
    }
    PyBuffer_Release(&view);
    return out;
}

static PyMethodDef module_methods[] = {
    {"frees_core", (PyCFunction)frees_core, METH_VARARGS,
     "frees_core(data, names): model/raw.py's frees_rows for packed frees."},
    {"finish_core", (PyCFunction)finish_core, METH_VARARGS,
     "finish_core(ops, transfers, buffers, formats, layout): store/rows.py's finish_rows for "
     "the rows it knows, else None."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "_sqlite",
                                    "The writer process's SQLite connection in C (issue 29).", -1, module_methods};

PyMODINIT_FUNC PyInit__sqlite(void) {
    if (load_sqlite_errors() < 0) return NULL;
    if (PyType_Ready(&ConnType) < 0) return NULL;
    PyObject *m = PyModule_Create(&moddef);
    if (!m) return NULL;
    Py_INCREF(&ConnType);
    if (PyModule_AddObject(m, "Connection", (PyObject *)&ConnType) < 0) {
        Py_DECREF(&ConnType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
