/* The writer process's SQLite connection through SQLite's C API (issue 29 item 3).

   The writer process (store/writer_process.py) spends most of its time in
   sqlite3.Connection.executemany: measured on 960k rows of bench P6's transfers/buffers
   tables, Python's sqlite3 module took 1.09-1.26 us a row and the same inserts through the C
   API 0.71 us (a bool costs pysqlite an adapter lookup). This type has the three methods
   StoreWriter (store/writer.py) calls -- execute(sql) without parameters, executemany(sql,
   rows), close() -- and raises the sqlite3 module's own exception classes with SQLite's own
   message, so the writer's error handling (disk full, a removed directory) is unchanged.

   Binding is what pysqlite does for the types the store holds: None, int (bool included;
   OverflowError past 64 bits), float, str (UTF-8), bytes; anything else is
   sqlite3.ProgrammingError. Only for a single-threaded process: the GIL is held throughout
   (the writer process has no other thread; the in-process writer keeps pysqlite, which
   releases the GIL around each step for the user's threads).

   Optional like the capture extensions: without a compiler or SQLite's header, StoreWriter
   uses the sqlite3 module. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <sqlite3.h>

static PyObject *DatabaseError, *OperationalError, *IntegrityError, *ProgrammingError;

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

static PyObject *sqlite_error(sqlite3 *db, int rc) {
    PyObject *cls;
    switch (rc & 0xff) {
    case SQLITE_CONSTRAINT: cls = IntegrityError; break;
    case SQLITE_CORRUPT: case SQLITE_NOTADB: case SQLITE_INTERNAL: cls = DatabaseError; break;
    case SQLITE_MISUSE: case SQLITE_RANGE: cls = ProgrammingError; break;
    default: cls = OperationalError;
    }
    PyErr_SetString(cls, db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
    return NULL;
}

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
    int rc = sqlite3_open_v2(PyBytes_AS_STRING(path), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
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

/* One value; the text and blob pointers stay valid while the row (which holds them) lives,
   and every parameter is bound again before each step. */
static int bind(Conn *self, sqlite3_stmt *stmt, int i, PyObject *v) {
    int rc;
    if (v == Py_None) {
        rc = sqlite3_bind_null(stmt, i);
    } else if (PyLong_Check(v)) {
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow) {
            PyErr_SetString(PyExc_OverflowError, "Python int too large to convert to SQLite INTEGER");
            return -1;
        }
        if (x == -1 && PyErr_Occurred()) return -1;
        rc = sqlite3_bind_int64(stmt, i, x);
    } else if (PyFloat_Check(v)) {
        rc = sqlite3_bind_double(stmt, i, PyFloat_AS_DOUBLE(v));
    } else if (PyUnicode_Check(v)) {
        Py_ssize_t n;
        const char *s = PyUnicode_AsUTF8AndSize(v, &n);
        if (!s) return -1;
        rc = sqlite3_bind_text(stmt, i, s, (int)n, SQLITE_STATIC);
    } else if (PyBytes_Check(v)) {
        rc = sqlite3_bind_blob(stmt, i, PyBytes_AS_STRING(v), (int)PyBytes_GET_SIZE(v), SQLITE_STATIC);
    } else {
        PyErr_Format(ProgrammingError, "Error binding parameter %d: type '%s' is not supported", i,
                     Py_TYPE(v)->tp_name);
        return -1;
    }
    if (rc != SQLITE_OK) {
        sqlite_error(self->db, rc);
        return -1;
    }
    return 0;
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
            ok = bind(self, stmt, (int)j + 1, items[j]) == 0;
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

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "_sqlite",
                                    "The writer process's SQLite connection in C (issue 29).", -1, NULL};

PyMODINIT_FUNC PyInit__sqlite(void) {
    PyObject *sqlite3_mod = PyImport_ImportModule("sqlite3");
    if (!sqlite3_mod) return NULL;
    DatabaseError = PyObject_GetAttrString(sqlite3_mod, "DatabaseError");
    OperationalError = PyObject_GetAttrString(sqlite3_mod, "OperationalError");
    IntegrityError = PyObject_GetAttrString(sqlite3_mod, "IntegrityError");
    ProgrammingError = PyObject_GetAttrString(sqlite3_mod, "ProgrammingError");
    Py_DECREF(sqlite3_mod);
    if (!DatabaseError || !OperationalError || !IntegrityError || !ProgrammingError) return NULL;
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
