/* What store/_sqlite.c (the writer's inserts) and store/_columns.c (the audit's column reads)
   share over SQLite's C API: SQLite's errors as the sqlite3 module's own exception classes with
   SQLite's message, and one Python value bound as pysqlite binds it. Each extension includes
   this once (static: a copy per extension module, no symbol shared between them). */
#ifndef JAXPLACE_SQLITE_API_H
#define JAXPLACE_SQLITE_API_H

#include <Python.h>
#include <sqlite3.h>

static PyObject *DatabaseError, *OperationalError, *IntegrityError, *ProgrammingError;

/* The sqlite3 module's exception classes, once, from the module's init; -1 with an exception. */
static int load_sqlite_errors(void) {
    PyObject *mod = PyImport_ImportModule("sqlite3");
    if (!mod) return -1;
    DatabaseError = PyObject_GetAttrString(mod, "DatabaseError");
    OperationalError = PyObject_GetAttrString(mod, "OperationalError");
    IntegrityError = PyObject_GetAttrString(mod, "IntegrityError");
    ProgrammingError = PyObject_GetAttrString(mod, "ProgrammingError");
    Py_DECREF(mod);
    return DatabaseError && OperationalError && IntegrityError && ProgrammingError ? 0 : -1;
}

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

/* Parameter i (from 1) of stmt, as pysqlite binds the types the store holds: None, int (bool
   included; OverflowError past 64 bits), float, str (UTF-8), bytes; anything else is
   sqlite3.ProgrammingError. Text and blobs are bound SQLITE_STATIC: the caller keeps v alive
   until the statement has stepped. 0, or -1 with an exception. */
static int bind_value(sqlite3 *db, sqlite3_stmt *stmt, int i, PyObject *v) {
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
        sqlite_error(db, rc);
        return -1;
    }
    return 0;
}

#endif
