/* store/columns.py's bulk reads through SQLite's C API (P8: the audit of a 10M-event run).

   The audit reads whole columns of the store (4.8M buffers, 4.8M frees, 4.8M transfers in
   bench P8's run). Through Python's sqlite3 module each value is a Python object, so
   store/columns.py had SQLite join each column into one string that numpy parses
   (group_concat): 7.9 s and a 415 MB peak for the buffers' five columns. Here each value goes
   from sqlite3_column_int64 into an int64 array: the cost is SQLite's own row decoding.

   read(uri, sql, params, kinds) opens its own read-only connection (the store's URI, only for
   a store opened immutable: no lock, no WAL, so a second copy of SQLite in the process, as in a
   Python that links its own, cannot disturb the sqlite3 module's connection), runs one SELECT
   and returns (columns, texts, bad): one bytearray of native int64 per result column, and for
   each text column the distinct values in the order first seen (the column holds indices into
   them).
   kinds has one letter per result column: 'i' an integer, 't' a text. A value of another
   storage class (a NULL, a real, a text where an integer belongs, a blob) is stored as 0 and
   counted in bad per column: store/columns.py makes that a DataError, never a silently wrong
   number. A text that is not UTF-8 is the sqlite3 module's own OperationalError, as pysqlite
   raises it. SQLite's errors are the sqlite3 module's classes with SQLite's message, so the
   reader's handling of a damaged file (store/reader.py reading()) is unchanged.

   Only jaxplace's own SQL is run here, never text from the store; the connection is opened
   read-only with SQLite's defensive mode on and the schema untrusted. Optional like the other
   extensions: without it (no compiler, no sqlite3.h) store/columns.py reads through Python. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <sqlite3.h>
#include <stdint.h>
#include <string.h>

#include "_sqlite_api.h"

#define MAX_COLS 16
#define SIGNAL_EVERY (1 << 22) /* SQLite VM steps between checks for Ctrl-C */

/* The distinct texts of one column: an open-addressing table of indices into values. */
typedef struct {
    PyObject *values; /* list of str, in the order first seen; each one's UTF-8 (cached in the
                         str when it is added) is what the table compares */
    int64_t *slot;    /* index + 1, 0 empty */
    uint64_t *hash;
    size_t cap;
    int64_t last;     /* the previous row's index (runs of one value are the common case) */
} Texts;

/* Python's own hash of bytes: SipHash under the process's random key. An unkeyed hash (FNV)
   let a store of 2^17 crafted labels (6 MB) land in one probe cluster: 12 s to read, growing
   4x with each doubling, where the sqlite3 module's path took 0.5 s (review). PYTHONHASHSEED=0
   makes the key public: whoever sets it gives that up, as for Python's own dicts. */
#if PY_VERSION_HEX >= 0x030E0000
static uint64_t text_hash(const unsigned char *s, int n) { return (uint64_t)Py_HashBuffer(s, n); }
#else
#if PY_VERSION_HEX >= 0x030D0000 /* exported, but declared in the internal headers only (review) */
PyAPI_FUNC(Py_hash_t) _Py_HashBytes(const void *, Py_ssize_t);
#endif
static uint64_t text_hash(const unsigned char *s, int n) { return (uint64_t)_Py_HashBytes(s, n); }
#endif

static int texts_init(Texts *t) {
    t->values = PyList_New(0);
    t->cap = 64;
    t->slot = PyMem_Calloc(t->cap, sizeof(int64_t));
    t->hash = PyMem_Calloc(t->cap, sizeof(uint64_t));
    t->last = -1;
    if (!t->values || !t->slot || !t->hash) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void texts_free(Texts *t) {
    Py_CLEAR(t->values);
    PyMem_Free(t->slot);
    PyMem_Free(t->hash);
    t->slot = NULL;
    t->hash = NULL;
}

/* Whether value k is the text s (n bytes): its UTF-8 was made and cached when it was added,
   so this cannot fail. */
static int same(Texts *t, int64_t k, const unsigned char *s, int n) {
    Py_ssize_t len;
    const char *u = PyUnicode_AsUTF8AndSize(PyList_GET_ITEM(t->values, k), &len);
    return len == n && memcmp(u, s, (size_t)n) == 0;
}

static int texts_grow(Texts *t) {
    size_t cap = t->cap * 2;
    int64_t *slot = PyMem_Calloc(cap, sizeof(int64_t));
    uint64_t *hash = PyMem_Calloc(cap, sizeof(uint64_t));
    if (!slot || !hash) {
        PyMem_Free(slot);
        PyMem_Free(hash);
        PyErr_NoMemory();
        return -1;
    }
    for (size_t i = 0; i < t->cap; i++) {
        if (!t->slot[i]) continue;
        size_t j = t->hash[i] & (cap - 1);
        while (slot[j]) j = (j + 1) & (cap - 1);
        slot[j] = t->slot[i];
        hash[j] = t->hash[i];
    }
    PyMem_Free(t->slot);
    PyMem_Free(t->hash);
    t->slot = slot;
    t->hash = hash;
    t->cap = cap;
    return 0;
}

/* The index of text s (n bytes), added when new; -1 with an exception set. */
static int64_t texts_index(Texts *t, const unsigned char *s, int n) {
    if (t->last >= 0 && same(t, t->last, s, n)) return t->last;
    uint64_t h = text_hash(s, n);
    size_t j = h & (t->cap - 1);
    while (t->slot[j]) {
        int64_t k = t->slot[j] - 1;
        if (t->hash[j] == h && same(t, k, s, n)) return t->last = k;
        j = (j + 1) & (t->cap - 1);
    }
    PyObject *str = PyUnicode_DecodeUTF8((const char *)s, n, "strict");
    if (!str) {
        PyErr_Clear();
        PyErr_SetString(OperationalError, "Could not decode to UTF-8");
        return -1;
    }
    /* strict UTF-8 in, the same bytes out: the cached UTF-8 is s itself */
    int bad = !PyUnicode_AsUTF8AndSize(str, NULL) || PyList_Append(t->values, str) < 0;
    Py_DECREF(str);
    if (bad) return -1;
    int64_t k = PyList_GET_SIZE(t->values) - 1;
    t->slot[j] = k + 1;
    t->hash[j] = h;
    if ((size_t)(k + 1) * 2 > t->cap && texts_grow(t) < 0) return -1;
    return t->last = k;
}

static int bind_all(sqlite3 *db, sqlite3_stmt *stmt, PyObject *params) {
    Py_ssize_t n = PyTuple_GET_SIZE(params);
    if (n != sqlite3_bind_parameter_count(stmt)) {
        PyErr_Format(ProgrammingError, "the statement uses %d parameters, %zd supplied",
                     sqlite3_bind_parameter_count(stmt), n);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) /* params (a tuple the caller holds) outlive the statement */
        if (bind_value(db, stmt, (int)i + 1, PyTuple_GET_ITEM(params, i)) < 0) return -1;
    return 0;
}

typedef struct {
    int ncols;
    char kind[MAX_COLS];
    PyObject *out[MAX_COLS]; /* bytearray of int64 */
    Texts text[MAX_COLS];
    Py_ssize_t bad[MAX_COLS];
    Py_ssize_t rows, cap;
    int utf8; /* the database's text encoding is UTF-8: texts are read as stored */
} Result;

/* Whether the database stores its text as UTF-8 (PRAGMA encoding; UTF-16 is possible). */
static int is_utf8(sqlite3 *db) {
    sqlite3_stmt *st = NULL;
    int utf8 = 0;
    if (sqlite3_prepare_v2(db, "PRAGMA encoding", -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) {
        const unsigned char *e = sqlite3_column_text(st, 0);
        utf8 = e && strcmp((const char *)e, "UTF-8") == 0;
    }
    sqlite3_finalize(st);
    return utf8;
}

static int result_reserve(Result *r) {
    if (r->rows < r->cap) return 0;
    Py_ssize_t cap = r->cap ? r->cap * 2 : 4096;
    for (int c = 0; c < r->ncols; c++)
        if (PyByteArray_Resize(r->out[c], cap * (Py_ssize_t)sizeof(int64_t)) < 0) return -1;
    r->cap = cap;
    return 0;
}

static int step_all(sqlite3 *db, sqlite3_stmt *stmt, Result *r) {
    for (;;) {
        int rc = sqlite3_step(stmt);
        if (rc == SQLITE_DONE) return 0;
        if (rc != SQLITE_ROW) {
            if (!PyErr_Occurred()) sqlite_error(db, rc); /* else Ctrl-C, through check_signals */
            return -1;
        }
        if (result_reserve(r) < 0) return -1;
        for (int c = 0; c < r->ncols; c++) {
            int64_t v = 0;
            int type = sqlite3_column_type(stmt, c);
            if (r->kind[c] == 'i') {
                if (type == SQLITE_INTEGER) v = sqlite3_column_int64(stmt, c);
                else r->bad[c]++;
            } else if (type == SQLITE_TEXT) {
                /* A UTF-8 store's text as stored (sqlite3_column_blob), not NUL-terminated by
                   sqlite3_column_text (the transfers' eight columns at 10M events: 4.5/3.9 ->
                   4.0/3.6 s). Another encoding is converted (sqlite3_column_text). */
                const unsigned char *s = r->utf8 ? sqlite3_column_blob(stmt, c) : sqlite3_column_text(stmt, c);
                int n = sqlite3_column_bytes(stmt, c);
                if (!s && n == 0 && sqlite3_errcode(db) != SQLITE_NOMEM) s = (const unsigned char *)""; /* "" as a blob */
                if (!s) return PyErr_NoMemory(), -1;
                v = texts_index(&r->text[c], s, n);
                if (v < 0) return -1;
            } else {
                r->bad[c]++;
            }
            ((int64_t *)PyByteArray_AS_STRING(r->out[c]))[r->rows] = v;
        }
        r->rows++;
    }
}

/* SQLite's progress handler, every SIGNAL_EVERY virtual machine steps, also while a WHERE
   skips rows: Ctrl-C interrupts the scan (the GIL is held throughout, so Python may run here). */
static int check_signals(void *unused) { return PyErr_CheckSignals() < 0; }

static PyObject *columns_read(PyObject *mod, PyObject *args) {
    PyObject *uri, *sql, *params;
    const char *kinds;
    if (!PyArg_ParseTuple(args, "O&UO!s:read", PyUnicode_FSConverter, &uri, &sql, &PyTuple_Type, &params, &kinds))
        return NULL;
    Result r;
    memset(&r, 0, sizeof r);
    r.ncols = (int)strlen(kinds);
    PyObject *result = NULL;
    sqlite3 *db = NULL;
    sqlite3_stmt *stmt = NULL;
    if (r.ncols < 1 || r.ncols > MAX_COLS || strspn(kinds, "it") != (size_t)r.ncols) {
        PyErr_SetString(PyExc_ValueError, "kinds: 1 to 16 letters, each 'i' or 't'");
        goto done;
    }
    memcpy(r.kind, kinds, (size_t)r.ncols);
    for (int c = 0; c < r.ncols; c++) {
        if (!(r.out[c] = PyByteArray_FromStringAndSize(NULL, 0))) goto done;
        if (r.kind[c] == 't' && texts_init(&r.text[c]) < 0) goto done;
    }
    int rc = sqlite3_open_v2(PyBytes_AS_STRING(uri), &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        sqlite_error(db, rc);
        goto done;
    }
#ifdef SQLITE_DBCONFIG_DEFENSIVE
    sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, 1, NULL);
#endif
#ifdef SQLITE_DBCONFIG_TRUSTED_SCHEMA
    sqlite3_db_config(db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, NULL);
#endif
    Py_ssize_t n;
    const char *text = PyUnicode_AsUTF8AndSize(sql, &n);
    if (!text) goto done;
    rc = sqlite3_prepare_v2(db, text, (int)n, &stmt, NULL);
    if (rc != SQLITE_OK || !stmt) {
        if (rc == SQLITE_OK) PyErr_SetString(ProgrammingError, "empty statement");
        else sqlite_error(db, rc);
        goto done;
    }
    if (sqlite3_column_count(stmt) != r.ncols) {
        PyErr_Format(ProgrammingError, "the statement has %d columns, kinds names %d", sqlite3_column_count(stmt), r.ncols);
        goto done;
    }
    r.utf8 = is_utf8(db);
    sqlite3_progress_handler(db, SIGNAL_EVERY, check_signals, NULL);
    if (bind_all(db, stmt, params) < 0 || step_all(db, stmt, &r) < 0) goto done;
    PyObject *cols = PyList_New(r.ncols), *texts = PyList_New(r.ncols), *bad = PyList_New(r.ncols);
    if (!cols || !texts || !bad) {
        Py_XDECREF(cols);
        Py_XDECREF(texts);
        Py_XDECREF(bad);
        goto done;
    }
    int ok = 1;
    for (int c = 0; c < r.ncols; c++) {
        ok = ok && PyByteArray_Resize(r.out[c], r.rows * (Py_ssize_t)sizeof(int64_t)) == 0;
        PyList_SET_ITEM(cols, c, r.out[c]);
        r.out[c] = NULL;
        PyObject *t = r.kind[c] == 't' ? r.text[c].values : Py_None;
        Py_INCREF(t);
        PyList_SET_ITEM(texts, c, t);
        PyObject *b = PyLong_FromSsize_t(r.bad[c]);
        ok = ok && b;
        PyList_SET_ITEM(bad, c, b ? b : Py_NewRef(Py_None));
    }
    if (ok) result = PyTuple_Pack(3, cols, texts, bad);
    Py_DECREF(cols);
    Py_DECREF(texts);
    Py_DECREF(bad);
done:
    if (stmt) sqlite3_finalize(stmt);
    if (db) sqlite3_close_v2(db);
    for (int c = 0; c < MAX_COLS; c++) {
        Py_XDECREF(r.out[c]);
        if (r.kind[c] == 't') texts_free(&r.text[c]);
    }
    Py_DECREF(uri);
    return result;
}

static PyMethodDef module_methods[] = {
    {"read", (PyCFunction)columns_read, METH_VARARGS,
     "read(uri, sql, params, kinds) -> (columns, texts, bad): one SELECT's columns as int64 "
     "bytearrays ('i' integers, 't' indices into the texts beside) and the values of another "
     "storage class counted per column."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "_columns",
                                    "store/columns.py's bulk reads in C (P8).", -1, module_methods};

PyMODINIT_FUNC PyInit__columns(void) {
    if (load_sqlite_errors() < 0) return NULL;
    return PyModule_Create(&moddef);
}
