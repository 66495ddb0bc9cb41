/* The native hot path of jaxplace's capture layer (issue 18).

   Optional as a whole: capture/native.py falls back to the pure-Python code when this
   module is missing or fails to import, and the two paths must append the same rows.

   SiteCache: Recorder.site_of in C. The frame walk and its two caches (code object -> tier,
   (code, instruction offset) -> site id) are open-addressing tables keyed on pointers; a miss
   calls back into the recorder's Python methods (_tier, _intern_site), which decide, so the
   classification rules live in one place (capture/recorder.py). Its `stack` method is
   Recorder.stack_of in C: the user frames of the whole stack as one node of a trie keyed on
   (parent node, code, instruction offset), outermost first (a third table; a miss calls
   rec._intern_node, which numbers nodes for both paths).

   record_call: capture/jaxhooks/dispatch.py's python_record_call for the common eager cases,
   the same rows in the same order (tests/test_native_twin.py compares them call by call).
   Every case it does not know (a placement policy active, an index, keyword arguments of a
   jit call or of a call with scalar operands or static argument names, operands it cannot
   tell by type alone (c_records, inert_leaves), a pytree result that is not a flat tuple or
   list of arrays, a multi-device result, a failing call) is handed to the Python code
   (`python_record_call`, `after_call`, `record_failure`) before anything is recorded, so the
   Python path stays the one definition of what a row means. A failure of the recording itself never reaches the
   user's program: the call's result is returned and the failure counted on the recorder
   (Recorder.recording_failed), as on the Python path.

   print_at_exit: `jaxplace run`'s last lines, made by the writer process while this interpreter
   tears down and written after it (store/writer_process.py print_at_exit).
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#include <structmember.h>
#include <stdint.h>
#include <limits.h>
#include <stdarg.h>
#include <time.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "../model/_packed_api.h"

#define USER 2
#define LIBRARY 1

/* ---------------------------------------------------------------- pointer table */

typedef struct {
    void *p;       /* NULL = empty */
    int64_t lasti; /* -1 for the tier table */
    long val;
} Entry;

typedef struct {
    Entry *e;
    Py_ssize_t cap; /* power of two */
    Py_ssize_t n;
} Table;

static inline size_t hash_key(void *p, int64_t lasti) {
    uint64_t h = (uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ULL;
    h ^= (uint64_t)lasti * 0xC2B2AE3D27D4EB4FULL;
    return (size_t)(h ^ (h >> 29));
}

static int table_grow(Table *t) {
    Py_ssize_t cap = t->cap ? t->cap * 2 : 256;
    Entry *e = PyMem_Calloc((size_t)cap, sizeof(Entry));
    if (!e) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < t->cap; i++) {
        Entry *o = &t->e[i];
        if (!o->p) continue;
        size_t j = hash_key(o->p, o->lasti) & (size_t)(cap - 1);
        while (e[j].p) j = (j + 1) & (size_t)(cap - 1);
        e[j] = *o;
    }
    PyMem_Free(t->e);
    t->e = e;
    t->cap = cap;
    return 0;
}

static inline int table_get(Table *t, void *p, int64_t lasti, long *val) {
    if (!t->cap) return 0;
    size_t mask = (size_t)(t->cap - 1), j = hash_key(p, lasti) & mask;
    while (t->e[j].p) {
        if (t->e[j].p == p && t->e[j].lasti == lasti) {
            *val = t->e[j].val;
            return 1;
        }
        j = (j + 1) & mask;
    }
    return 0;
}

static int table_put(Table *t, void *p, int64_t lasti, long val) {
    if ((t->n + 1) * 2 > t->cap && table_grow(t) < 0) return -1;
    size_t mask = (size_t)(t->cap - 1), j = hash_key(p, lasti) & mask;
    while (t->e[j].p && !(t->e[j].p == p && t->e[j].lasti == lasti)) j = (j + 1) & mask;
    if (!t->e[j].p) t->n++;
    t->e[j].p = p;
    t->e[j].lasti = lasti;
    t->e[j].val = val;
    return 0;
}

/* ---------------------------------------------------------------- SiteCache */

typedef struct {
    PyObject_HEAD
    PyObject *tier_fn;   /* rec._tier(code) -> int; keeps the code alive (rec._codes) */
    PyObject *intern_fn; /* rec._intern_site(key, frame) -> int */
    PyObject *node_fn;   /* rec._intern_node(parent, frame) -> int (None: no stacks) */
    PyObject *codes;     /* list: every code object a table holds a pointer to */
    Table tiers;
    Table sites;
    Table nodes;         /* (code, parent << 32 | offset) -> stack node id */
} SiteCache;

static int cache_traverse(SiteCache *self, visitproc visit, void *arg) {
    Py_VISIT(self->tier_fn);
    Py_VISIT(self->intern_fn);
    Py_VISIT(self->node_fn);
    Py_VISIT(self->codes);
    return 0;
}

static int cache_clear(SiteCache *self) {
    Py_CLEAR(self->tier_fn);
    Py_CLEAR(self->intern_fn);
    Py_CLEAR(self->node_fn);
    Py_CLEAR(self->codes);
    return 0;
}

static void cache_dealloc(SiteCache *self) {
    PyObject_GC_UnTrack(self);
    cache_clear(self);
    PyMem_Free(self->tiers.e);
    PyMem_Free(self->sites.e);
    PyMem_Free(self->nodes.e);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int cache_init(SiteCache *self, PyObject *args, PyObject *kw) {
    PyObject *tier_fn, *intern_fn, *node_fn = Py_None;
    if (!PyArg_ParseTuple(args, "OO|O", &tier_fn, &intern_fn, &node_fn)) return -1;
    Py_INCREF(node_fn);
    Py_XSETREF(self->node_fn, node_fn);
    Py_INCREF(tier_fn);
    Py_XSETREF(self->tier_fn, tier_fn);
    Py_INCREF(intern_fn);
    Py_XSETREF(self->intern_fn, intern_fn);
    if (!self->codes && !(self->codes = PyList_New(0))) return -1;
    return 0;
}

static int code_tier(SiteCache *c, PyCodeObject *code, long *tier) {
    if (table_get(&c->tiers, code, -1, tier)) return 0;
    PyObject *r = PyObject_CallOneArg(c->tier_fn, (PyObject *)code);
    if (!r) return -1;
    *tier = PyLong_AsLong(r);
    Py_DECREF(r);
    if (*tier == -1 && PyErr_Occurred()) return -1;
    if (PyList_Append(c->codes, (PyObject *)code) < 0) return -1;
    return table_put(&c->tiers, code, -1, *tier);
}

/* Its callables and code list exist: set by __init__, dropped by the collector's tp_clear (a
   cycle through the recorder), absent on an object made with __new__ alone. */
static int cache_ready(SiteCache *c) {
    if (c->tier_fn && c->intern_fn && c->node_fn && c->codes) return 1;
    PyErr_SetString(PyExc_RuntimeError, "SiteCache used before __init__ or after it was cleared");
    return 0;
}

/* Site id of the first user frame at or above `frame` (a library frame if none): -1 on error. */
static long site_lookup(SiteCache *c, PyFrameObject *frame) {
    if (!cache_ready(c)) return -1;
    PyFrameObject *f = frame, *fallback = NULL;
    Py_XINCREF(f);
    while (f) {
        PyCodeObject *code = PyFrame_GetCode(f);
        long tier;
        int err = code_tier(c, code, &tier);
        Py_DECREF(code);
        if (err < 0) {
            Py_DECREF(f);
            Py_XDECREF(fallback);
            return -1;
        }
        if (tier == USER) break;
        if (tier == LIBRARY && !fallback) {
            fallback = f;
            Py_INCREF(fallback);
        }
        PyFrameObject *back = PyFrame_GetBack(f);
        Py_DECREF(f);
        f = back;
    }
    if (!f) {
        f = fallback;
        fallback = NULL;
        if (!f) return 0;
    }
    Py_XDECREF(fallback);
    PyCodeObject *code = PyFrame_GetCode(f);
    int64_t lasti = PyFrame_GetLasti(f);
    long sid;
    if (!table_get(&c->sites, code, lasti, &sid)) {
        PyObject *key = Py_BuildValue("(NL)", PyLong_FromVoidPtr(code), (long long)lasti);
        PyObject *r = key ? PyObject_CallFunctionObjArgs(c->intern_fn, key, (PyObject *)f, NULL) : NULL;
        Py_XDECREF(key);
        sid = r ? PyLong_AsLong(r) : -1;
        Py_XDECREF(r);
        if ((sid == -1 && PyErr_Occurred()) || PyList_Append(c->codes, (PyObject *)code) < 0 ||
            table_put(&c->sites, code, lasti, sid) < 0) {
            Py_DECREF(code);
            Py_DECREF(f);
            return -1;
        }
    }
    Py_DECREF(code);
    Py_DECREF(f);
    return sid;
}

#define MAX_STACK 128 /* user frames kept per stack, the innermost (deep recursion is cut) */

/* Stack node id of the user frames at or above `frame`: 0 for none and for a stack of one
   frame (that frame is the row's site, all a transfer without a node has: Recorder.stack_of),
   -1 on error. Its leaf is the frame site_lookup picks, so the node's site is the row's site. */
static long stack_lookup(SiteCache *c, PyFrameObject *frame) {
    if (!cache_ready(c)) return -1;
    PyFrameObject *user[MAX_STACK], *f = frame;
    int n = 0;
    long node = 0;
    Py_XINCREF(f);
    while (f) {
        PyCodeObject *code = PyFrame_GetCode(f);
        long tier;
        int err = code_tier(c, code, &tier);
        Py_DECREF(code);
        if (err < 0) {
            Py_DECREF(f);
            node = -1;
            goto done;
        }
        if (tier == USER && n < MAX_STACK) {
            user[n++] = f;
            Py_INCREF(f);
        }
        PyFrameObject *back = PyFrame_GetBack(f);
        Py_DECREF(f);
        f = back;
    }
    if (n < 2) goto done; /* none, or one frame: the site alone (a library frame's where none is the user's) */
    for (int i = n - 1; i >= 0 && node >= 0; i--) {
        PyCodeObject *code = PyFrame_GetCode(user[i]);
        int64_t key = ((int64_t)node << 32) | (int64_t)(uint32_t)PyFrame_GetLasti(user[i]);
        long nid;
        if (!table_get(&c->nodes, code, key, &nid)) {
            PyObject *parent = PyLong_FromLong(node);
            PyObject *r = parent ? PyObject_CallFunctionObjArgs(c->node_fn, parent, (PyObject *)user[i], NULL) : NULL;
            Py_XDECREF(parent);
            nid = r ? PyLong_AsLong(r) : -1;
            Py_XDECREF(r);
            if ((nid == -1 && PyErr_Occurred()) || nid < 0 || PyList_Append(c->codes, (PyObject *)code) < 0 ||
                table_put(&c->nodes, code, key, nid) < 0)
                nid = -1;
        }
        Py_DECREF(code);
        node = nid;
    }
done:
    for (int i = 0; i < n; i++) Py_DECREF(user[i]);
    return node;
}

static PyObject *cache_stack(SiteCache *self, PyObject *frame) {
    if (frame == Py_None || self->node_fn == Py_None) return PyLong_FromLong(0);
    if (!PyFrame_Check(frame)) {
        PyErr_SetString(PyExc_TypeError, "stack() takes a frame");
        return NULL;
    }
    long nid = stack_lookup(self, (PyFrameObject *)frame);
    if (nid < 0 && !PyErr_Occurred()) PyErr_SetString(PyExc_SystemError, "stack(): a negative node id");
    return nid < 0 ? NULL : PyLong_FromLong(nid);
}

static PyMethodDef cache_methods[] = {
    {"stack", (PyCFunction)cache_stack, METH_O, "stack(frame) -> stack node id: Recorder.stack_of in C"},
    {NULL, NULL, 0, NULL},
};

static PyObject *cache_call(SiteCache *self, PyObject *args, PyObject *kw) {
    PyObject *frame;
    if (!PyArg_ParseTuple(args, "O", &frame)) return NULL;
    if (frame == Py_None) return PyLong_FromLong(0);
    if (!PyFrame_Check(frame)) {
        PyErr_SetString(PyExc_TypeError, "site_of() takes a frame");
        return NULL;
    }
    long sid = site_lookup(self, (PyFrameObject *)frame);
    return sid < 0 ? NULL : PyLong_FromLong(sid);
}

static PyTypeObject SiteCacheType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "jaxplace_cli.capture._native.SiteCache",
    .tp_basicsize = sizeof(SiteCache),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "SiteCache(tier_fn, intern_fn)(frame) -> site id: Recorder.site_of in C.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)cache_init,
    .tp_call = (ternaryfunc)cache_call,
    .tp_methods = cache_methods,
    .tp_traverse = (traverseproc)cache_traverse,
    .tp_clear = (inquiry)cache_clear,
    .tp_dealloc = (destructor)cache_dealloc,
};

static PyObject *S_with_stack, *API_MEMO; /* inner_legs: the method it calls, its labels by op name */

/* What dispatch.py hands over once (configure()): the objects the Python path reads. */
static struct {
    PyObject *active, *tls, *labels, *array_type;
    PyObject *dtype_names, *dtype_name, *sharding_label, *array_nbytes, *x64_enabled;
    PyObject *py_record_call, *after_call, *record_failure, *scalar_bytes;
    PyObject *buf_attr, *d2d, *h2d, *host, *empty, *uncommitted, *tree_leaves, *host_leg, *host_types;
    PyObject *dropped_leaves;
    PyObject *sharding_attr, *committed_attr;
    PyObject *x64_now; /* JAX's jax_enable_x64 holder (its .value), or None: x64_enabled() */
    PyObject *suffix; /* legs.suffix (a host leg's label), or NULL: inner_legs declines */
    PyObject *program; /* syncs.program (a jit call's buffer ids, for the host-sync model), or NULL */
    int ready;
} G;

/* What device_of and aval_fields read last, by the object they read it from: a sharding's
   label, an aval's (shape, dtype name). A new array's sharding and aval are objects JAX
   shares (a jit's results get its executable's: the same aval for every call, the same
   sharding for every call's result at one position), so the attribute reads and dict lookups
   behind each (~770 and ~800 instructions in callgrind, bench P6's loop: 37 a wide call) are
   made once per object. A slot holds a reference to its key, so an address is never reused
   while it is there; neither object changes once made. configure() empties them. */
#define MEMO_SLOTS 128
typedef struct {
    PyObject *key, *a, *b; /* strong references, or NULL */
} Memo;
static Memo SHARDINGS[MEMO_SLOTS], AVALS[MEMO_SLOTS];

static inline Memo *memo_slot(Memo *table, PyObject *key) {
    return &table[((uintptr_t)key >> 4) % MEMO_SLOTS];
}

/* the old entry is let go last: freeing an object may run code that reads these tables */
static void memo_put(Memo *m, PyObject *key, PyObject *a, PyObject *b) {
    Memo old = *m;
    m->key = Py_NewRef(key);
    m->a = Py_NewRef(a);
    m->b = b ? Py_NewRef(b) : NULL;
    Py_XDECREF(old.key);
    Py_XDECREF(old.a);
    Py_XDECREF(old.b);
}

static void memo_clear(Memo *table) {
    for (int i = 0; i < MEMO_SLOTS; i++) {
        Memo old = table[i];
        table[i] = (Memo){NULL, NULL, NULL};
        Py_XDECREF(old.key);
        Py_XDECREF(old.a);
        Py_XDECREF(old.b);
    }
}

static PyObject *ZERO, *ONE;
static PyObject *S_rec, *S_placing, *S_depth, *S_op, *S_seqs, *S_buf_ids, *S_ops, *S_transfers,
    *S_buffers, *S_tail, *S_t0, *S_site_cache, *S_on_transfer, *S_on_dispatch, *S_append,
    *S_sharding, *S_value, *S_device, *S_dict, *S_aval, *S_shape, *S_dtype, *S_committed, *S_name,
    *S_kind, *S_scalar_api, *S_scalars, *S_flatten, *S_host_data, *S_index, *S_static_argnums,
    *S_static_argnames, *S_buffer_id, *S_backlog_wait, *S_limit, *S_recording_failed, *S_api, *S_track,
    *S_mem_state, *S_stack_of, *S_jit, *S_foreign, *S_jax_array;

/* Reads of the recorder's, the spec's and `active`'s fields (issue 29). They are __slots__ of
   their classes (capture/recorder.py, jaxhooks/state.py): for an object of the very type the
   offsets were resolved for, the field is read at its offset, as the slot's descriptor would
   read it, without the attribute lookup (~40 ns each, ~30 of them a recorded op: the largest
   item of the hooks' per-op cost in perf). Any other object, a field that is no slot of its
   type, or an unset slot goes through PyObject_GetAttr, whose answer is the definition. A type
   changed since (a class attribute set: CPython gives it a new version tag, as for its own
   attribute cache) is resolved again. */
enum { K_REC, K_SPEC, K_ACTIVE, N_KINDS };
enum { R_SEQS, R_BUF_IDS, R_OPS, R_TRANSFERS, R_BUFFERS, R_TAIL, R_T0, R_ON_TRANSFER, R_MEM_STATE, R_LIMIT, R_N };
enum { P_NAME, P_API, P_DEPTH, P_KIND, P_SCALARS, P_SCALAR_API, P_HOST_DATA, P_STATIC_ARGNUMS,
       P_STATIC_ARGNAMES, P_INDEX, P_FLATTEN, P_FOREIGN, P_N };
enum { A_REC, A_PLACING, A_ON_DISPATCH, A_N };
#define MAX_FIELDS 12
static PyObject **FIELD_NAMES[N_KINDS][MAX_FIELDS] = {
    {&S_seqs, &S_buf_ids, &S_ops, &S_transfers, &S_buffers, &S_tail, &S_t0, &S_on_transfer, &S_mem_state, &S_limit},
    {&S_name, &S_api, &S_depth, &S_kind, &S_scalars, &S_scalar_api, &S_host_data, &S_static_argnums,
     &S_static_argnames, &S_index, &S_flatten, &S_foreign},
    {&S_rec, &S_placing, &S_on_dispatch},
};
static const int N_FIELDS[N_KINDS] = {R_N, P_N, A_N};
static struct {
    PyTypeObject *type; /* resolved for (a strong reference), NULL: not yet */
    unsigned int version; /* type's tp_version_tag then */
    Py_ssize_t off[MAX_FIELDS]; /* -1: not a slot of type */
} FAST[N_KINDS];

static void resolve_fields(int kind, PyTypeObject *t) {
    PyTypeObject *old = FAST[kind].type;
    Py_INCREF(t);
    FAST[kind].type = t;
    for (int i = 0; i < N_FIELDS[kind]; i++) {
        PyObject *d = t->tp_getattro == PyObject_GenericGetAttr ? _PyType_Lookup(t, *FIELD_NAMES[kind][i]) : NULL;
        int slot = d && Py_TYPE(d) == &PyMemberDescr_Type &&
                   ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX;
        FAST[kind].off[i] = slot ? ((PyMemberDescrObject *)d)->d_member->offset : -1;
    }
    /* the lookups gave the type a version tag; without one (0) a change could not be seen */
    FAST[kind].version = (t->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) ? t->tp_version_tag : 0;
    if (!FAST[kind].version)
        for (int i = 0; i < N_FIELDS[kind]; i++) FAST[kind].off[i] = -1;
    Py_XDECREF(old); /* last: a class freed here may run code that resolves another type */
}

/* o.<field i of kind>: a new reference, or NULL with an error set */
static inline PyObject *field(PyObject *o, int kind, int i) {
    PyTypeObject *t = Py_TYPE(o);
    if (t != FAST[kind].type || t->tp_version_tag != FAST[kind].version) resolve_fields(kind, t);
    if (t == FAST[kind].type) { /* still its offsets (see resolve_fields' last line) */
        Py_ssize_t off = FAST[kind].off[i];
        if (off >= 0) {
            PyObject *v = *(PyObject **)((char *)o + off);
            if (v) return Py_NewRef(v);
        }
    }
    return PyObject_GetAttr(o, *FIELD_NAMES[kind][i]);
}

static int field_true(PyObject *o, int kind, int i) {
    PyObject *v = field(o, kind, i);
    if (!v) return -1;
    int t = PyObject_IsTrue(v);
    Py_DECREF(v);
    return t;
}

/* model/_packed.c's entry points (its `_C_API` capsule), read at configure(); NULL where that
   module is not built or is of another build. */
static const JaxplacePackedAPI *PACKED;

static PyObject *configure(PyObject *mod, PyObject *args, PyObject *kw) {
    static char *names[] = {"active", "tls", "labels", "array_type", "dtype_names", "dtype_name", "sharding_label", "array_nbytes",
                            "x64_enabled", "py_record_call", "after_call", "record_failure",
                            "scalar_bytes", "buf_attr", "d2d", "h2d", "host", "tree_leaves", "host_leg",
                            "host_types", "dropped_leaves", "sharding_attr", "x64_now", "committed_attr", "suffix",
                            "program", NULL};
    PyObject *v[21], *sharding_attr = S_sharding, *x64_now = Py_None, *committed_attr = S_committed, *suffix = NULL;
    PyObject *program = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOOOOOOOOOOOOOOOOOO|UOUOO", names, &v[0], &v[1], &v[2],
                                     &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9], &v[10],
                                     &v[11], &v[12], &v[13], &v[14], &v[15], &v[16], &v[17], &v[18], &v[19],
                                     &v[20], &sharding_attr, &x64_now, &committed_attr, &suffix, &program))
        return NULL;
    Py_XSETREF(G.suffix, suffix && suffix != Py_None ? Py_NewRef(suffix) : NULL);
    Py_XSETREF(G.program, program && program != Py_None ? Py_NewRef(program) : NULL);
    Py_CLEAR(API_MEMO); /* labels made with another suffix */
    memo_clear(SHARDINGS); /* what they hold was read with the labels and dtype names replaced here */
    memo_clear(AVALS);
    G.ready = 0;
    Py_XSETREF(G.sharding_attr, Py_NewRef(sharding_attr));
    Py_XSETREF(G.committed_attr, Py_NewRef(committed_attr));
    Py_XSETREF(G.x64_now, Py_NewRef(x64_now));
    PyObject **slots[] = {&G.active, &G.tls, &G.labels, &G.array_type, &G.dtype_names,
                          &G.dtype_name, &G.sharding_label,
                          &G.array_nbytes, &G.x64_enabled, &G.py_record_call, &G.after_call,
                          &G.record_failure, &G.scalar_bytes, &G.buf_attr, &G.d2d, &G.h2d,
                          &G.host, &G.tree_leaves, &G.host_leg, &G.host_types, &G.dropped_leaves};
    for (int i = 0; i < 21; i++) {
        Py_INCREF(v[i]);
        Py_XSETREF(*slots[i], v[i]);
    }
    if (!PyTuple_Check(G.host_types) || PyTuple_GET_SIZE(G.host_types) != 2 ||
        !PyType_Check(PyTuple_GET_ITEM(G.host_types, 0))) {
        G.ready = 0;
        PyErr_SetString(PyExc_TypeError, "configure(): host_types must be (numpy.ndarray, numpy.generic)");
        return NULL;
    }
    if (!PyDict_Check(G.labels) || !PyDict_Check(G.dtype_names) || !PyType_Check(G.array_type)) {
        PyErr_SetString(PyExc_TypeError, "configure(): labels/dtype_names must be dicts, array_type a type");
        return NULL;
    }
    if (!PACKED) {
        const JaxplacePackedAPI *api = PyCapsule_Import("jaxplace_cli.model._packed._C_API", 0);
        if (api && api->version == JAXPLACE_PACKED_API_VERSION) PACKED = api;
        PyErr_Clear(); /* not built: every table is appended to through its method */
    }
    G.ready = 1;
    Py_RETURN_NONE;
}

static inline int64_t now_ns(void) {
#ifdef __linux__
    /* time.perf_counter_ns() is CLOCK_MONOTONIC on Linux: the rows mix both clocks */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
#else
#error "the native hot path reads CLOCK_MONOTONIC (Linux); elsewhere the Python path runs"
#endif
}

static inline int is_scalar(PyObject *a) {
    PyTypeObject *t = Py_TYPE(a);
    return t == &PyFloat_Type || t == &PyLong_Type || t == &PyBool_Type || t == &PyComplex_Type;
}

static inline int has_comma(PyObject *s) {
    return PyUnicode_Check(s) && PyUnicode_FindChar(s, ',', 0, PyUnicode_GET_LENGTH(s), 1) >= 0;
}

/* A row out of the cycle collector's lists: it holds only ints, strings, bools and tuples of
   those, so it cannot be part of a cycle. Matters where the recorder keeps rows as tuples (no
   writer attached: budget(), device_placement); with one attached, a Sink packs the row and
   frees it at once (model/_packed.c: a tuple backlog cost bench P2 a ~80 ms full collection). */
static inline PyObject *row_(PyObject *t) {
    if (t) PyObject_GC_UnTrack(t);
    return t;
}

/* The label of an array's device: _LABELS[sharding._device], or sharding_label(sharding). An
   exact array's sharding is read as G.sharding_attr: "_sharding" where dispatch.py found the
   `sharding` property to be `return self._sharding` (a Python frame saved, 55 -> 24 ns, eleven
   times a P1 step), else "sharding". */
static PyObject *device_of(PyObject *arr) {
    PyObject *sh = PyObject_GetAttr(arr, Py_TYPE(arr) == (PyTypeObject *)G.array_type ? G.sharding_attr : S_sharding);
    if (!sh) return NULL;
    Memo *m = memo_slot(SHARDINGS, sh);
    if (m->key == sh) {
        Py_DECREF(sh);
        return Py_NewRef(m->a);
    }
    PyObject *d = PyObject_GetAttr(sh, S_device);
    if (!d) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) {
            Py_DECREF(sh);
            return NULL;
        }
        PyErr_Clear();
    }
    PyObject *lab = NULL;
    if (d && d != Py_None) {
        lab = PyDict_GetItemWithError(G.labels, d);
        Py_XINCREF(lab);
        if (!lab && PyErr_Occurred()) {
            Py_DECREF(d);
            Py_DECREF(sh);
            return NULL;
        }
    }
    Py_XDECREF(d);
    if (!lab || lab == Py_None) {
        Py_XDECREF(lab);
        lab = PyObject_CallOneArg(G.sharding_label, sh);
    } else {
        memo_put(m, sh, lab, NULL); /* a single device's label, from the labels dict */
    }
    Py_DECREF(sh);
    return lab;
}

/* arr.__dict__.get(BUF_ATTR): a new reference to the id, Py_None if absent, NULL on error;
   *dict_out gets a new reference to the dict (NULL if the array has none). An exact array's
   dict is read at its type's tp_dictoffset (made, as reading `__dict__` would make it, where
   the array has none yet): the attribute lookup and getter cost ~360 instructions an array
   (callgrind, bench P6's loop: 37 arrays a wide call). */
static PyObject *buf_of(PyObject *arr, PyObject **dict_out) {
    PyTypeObject *t = Py_TYPE(arr);
    PyObject *d;
    if (t == (PyTypeObject *)G.array_type && t->tp_dictoffset > 0 && !(t->tp_flags & Py_TPFLAGS_MANAGED_DICT)) {
        d = *(PyObject **)((char *)arr + t->tp_dictoffset);
        d = d ? Py_NewRef(d) : PyObject_GenericGetDict(arr, NULL);
    } else {
        d = PyObject_GetAttr(arr, S_dict);
    }
    if (!d) {
        PyErr_Clear();
        *dict_out = NULL;
        return Py_NewRef(Py_None);
    }
    *dict_out = d;
    PyObject *b = PyDict_Check(d) ? PyDict_GetItemWithError(d, G.buf_attr) : NULL;
    if (!b) {
        if (PyErr_Occurred()) return NULL;
        return Py_NewRef(Py_None);
    }
    return Py_NewRef(b);
}

/* ---------------------------------------------------------------- device memory: frees */

/* When a recorded buffer is freed (capture/memory.py, issue 27). Each new array gets a Watch in
   its __dict__ (beside its buffer id); the array's death releases its __dict__, the Watch's
   deallocation appends (buf, the next seq, 0 = "gc") to the tracker's frees. It replaces a
   weakref with a callback and two dict stores per buffer (the measured gain: docs/memory.md,
   "Cost"): one small object that the cycle collector does not track, one dict store, no call
   on free. The array's lifetime is not
   extended (nothing but its own __dict__ holds the Watch) and an array freed as cyclic garbage
   is seen as well (the collector clears the array's __dict__). A WatchCore is one tracker's:
   its `on` ends every Watch of a stopped recording at once (teardown frees are no rows). */
static long long count_peek(PyObject *c);
static int count_next(PyObject *c, long long *v);

typedef struct {
    PyObject_HEAD
    PyObject *frees; /* bytearray: three int64 a free (model/raw.py FREE_ROW) */
    PyObject *seqs;  /* the recorder's itertools.count, peeked */
    PyObject *attr;  /* the __dict__ key of a Watch (capture/memory.py WATCH_ATTR) */
    int on;
    /* The frees appended since the last flush(): a bytearray grown by its own rule (an eighth at
       a time, copied on each growth after Tracker.take's `del frees[:n]`) cost ~480
       instructions and a copy a free (callgrind, bench P6's loop: 34 frees an iteration);
       here one append is a store, and flush() hands the batch over in one resize. */
    char *buf;
    Py_ssize_t len, cap;
} WatchCore;

typedef struct {
    PyObject_HEAD
    WatchCore *core;
    long long b, site;
    int armed;
} Watch;

static PyTypeObject WatchType;

static void append_free(WatchCore *core, long long b, long long seq, long long how) {
    if (seq < 0) seq = count_peek(core->seqs);
    if (seq < 0) return;
    if (core->len + 24 > core->cap) {
        Py_ssize_t cap = core->cap ? core->cap * 2 : 24 * 4096;
        char *n = PyMem_RawRealloc(core->buf, (size_t)cap);
        if (!n) return; /* out of memory: this free is not a row (as a failed resize was) */
        core->buf = n;
        core->cap = cap;
    }
    int64_t row[3] = {(int64_t)b, (int64_t)seq, (int64_t)how};
    memcpy(core->buf + core->len, row, sizeof row);
    core->len += 24;
}

/* core.flush(): the frees appended since the last flush, onto the end of `frees` */
static PyObject *core_flush(WatchCore *self, PyObject *unused) {
    if (self->len) {
        Py_ssize_t n = PyByteArray_GET_SIZE(self->frees);
        if (PyByteArray_Resize(self->frees, n + self->len) < 0) { /* out of memory: kept for the next */
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        memcpy(PyByteArray_AS_STRING(self->frees) + n, self->buf, (size_t)self->len);
        self->len = 0;
    }
    Py_RETURN_NONE;
}

/* Runs inside the array's deallocation, on any thread: never raises, keeps an error in flight. */
static void watch_dealloc(Watch *w) {
    if (w->armed && w->core->on) {
        PyObject *et, *ev, *etb;
        PyErr_Fetch(&et, &ev, &etb);
        append_free(w->core, w->b, -1, 0);
        PyErr_Clear();
        PyErr_Restore(et, ev, etb);
    }
    Py_DECREF(w->core);
    PyObject_Free(w);
}

static Watch *new_watch(WatchCore *core, long long b, long long site) {
    Watch *w = PyObject_New(Watch, &WatchType);
    if (!w) return NULL;
    w->core = (WatchCore *)Py_NewRef(core);
    w->b = b;
    w->site = site;
    w->armed = 1;
    return w;
}

/* watch.release(how, seq): the array gave its memory back while it lives on (Array.delete, a
   donated argument): the free is appended now (seq -1: the next event's) and the Watch's own
   end is none. True if it was still following a buffer. */
static PyObject *watch_release(Watch *w, PyObject *args) {
    long long how, seq;
    if (!PyArg_ParseTuple(args, "LL", &how, &seq)) return NULL;
    if (!w->armed || !w->core->on) Py_RETURN_FALSE;
    w->armed = 0;
    append_free(w->core, w->b, seq, how);
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_TRUE;
}

/* watch.forget(): it follows nothing any more, and its end appends nothing. */
static PyObject *watch_forget(Watch *w, PyObject *unused) {
    w->armed = 0;
    Py_RETURN_NONE;
}

static PyObject *watch_core(Watch *w, void *c) { return Py_NewRef((PyObject *)w->core); }
static PyObject *watch_live(Watch *w, void *c) { return PyBool_FromLong(w->armed && w->core->on); }
static PyObject *watch_b(Watch *w, void *c) { return PyLong_FromLongLong(w->b); }
static PyObject *watch_site(Watch *w, void *c) { return PyLong_FromLongLong(w->site); }

static PyMethodDef watch_methods[] = {
    {"release", (PyCFunction)watch_release, METH_VARARGS, "release(how, seq): the buffer was given back now"},
    {"forget", (PyCFunction)watch_forget, METH_NOARGS, "forget(): follow nothing, append nothing"},
    {NULL, NULL, 0, NULL},
};
static PyGetSetDef watch_getset[] = {
    {"core", (getter)watch_core, NULL, "the WatchCore (tracker) it reports to", NULL},
    {"live", (getter)watch_live, NULL, "still following its buffer", NULL},
    {"b", (getter)watch_b, NULL, "the buffer id", NULL},
    {"site", (getter)watch_site, NULL, "where the buffer was made", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};
static PyTypeObject WatchType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "jaxplace_cli.capture._native.Watch",
    .tp_basicsize = sizeof(Watch),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Appends its buffer's free when the array that holds it dies (capture/memory.py).",
    .tp_dealloc = (destructor)watch_dealloc,
    .tp_methods = watch_methods,
    .tp_getset = watch_getset,
};

static int core_init(WatchCore *self, PyObject *args, PyObject *kw) {
    PyObject *frees, *seqs, *attr;
    if (!PyArg_ParseTuple(args, "O!OU", &PyByteArray_Type, &frees, &seqs, &attr)) return -1;
    Py_XSETREF(self->frees, Py_NewRef(frees));
    Py_XSETREF(self->seqs, Py_NewRef(seqs));
    Py_XSETREF(self->attr, Py_NewRef(attr));
    self->on = 1;
    return 0;
}

static void core_dealloc(WatchCore *self) {
    PyMem_RawFree(self->buf);
    Py_XDECREF(self->frees);
    Py_XDECREF(self->seqs);
    Py_XDECREF(self->attr);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *core_watch(WatchCore *self, PyObject *args) {
    long long b, site;
    if (!PyArg_ParseTuple(args, "LL", &b, &site)) return NULL;
    return (PyObject *)new_watch(self, b, site);
}

static PyObject *core_get_on(WatchCore *self, void *c) { return PyBool_FromLong(self->on); }
static int core_set_on(WatchCore *self, PyObject *v, void *c) {
    int t = v ? PyObject_IsTrue(v) : 0;
    if (t < 0) return -1;
    self->on = t;
    return 0;
}

static PyMethodDef core_methods[] = {
    {"watch", (PyCFunction)core_watch, METH_VARARGS, "watch(b, site): a Watch for a new buffer"},
    {"flush", (PyCFunction)core_flush, METH_NOARGS, "flush(): the frees appended since, onto frees"},
    {NULL, NULL, 0, NULL},
};
static PyGetSetDef core_getset[] = {
    {"on", (getter)core_get_on, (setter)core_set_on, "False: no Watch of this core appends a free", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};
static PyTypeObject WatchCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "jaxplace_cli.capture._native.WatchCore",
    .tp_basicsize = sizeof(WatchCore),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "WatchCore(frees, seqs, attr): one tracker's Watches append their frees to frees.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)core_init,
    .tp_dealloc = (destructor)core_dealloc,
    .tp_methods = core_methods,
    .tp_getset = core_getset,
};

/* Follow a new buffer until it is freed (capture/memory.py, Tracker.track inlined): with
   rec.mem_state a WatchCore, a Watch goes into the array's __dict__ `od`; an array over
   several devices (its shards) goes through rec.track in Python. rec.mem_state None: not
   tracking. */
static int track_(PyObject *rec, PyObject *arr, PyObject *od, PyObject *b, PyObject *site, PyObject *dev) {
    if (has_comma(dev)) {
        PyObject *r = PyObject_CallMethodObjArgs(rec, S_track, arr, b, site, dev, NULL);
        if (!r) return -1;
        Py_DECREF(r);
        return 0;
    }
    PyObject *st = field(rec, K_REC, R_MEM_STATE);
    if (!st) return -1;
    int rc = 0;
    if (Py_TYPE(st) == &WatchCoreType && ((WatchCore *)st)->on) {
        long long bv = PyLong_AsLongLong(b), sv = PyLong_AsLongLong(site);
        Watch *w = (bv == -1 || sv == -1) && PyErr_Occurred() ? NULL : new_watch((WatchCore *)st, bv, sv);
        rc = w ? PyDict_SetItem(od, ((WatchCore *)st)->attr, (PyObject *)w) : -1;
        Py_XDECREF(w);
    }
    Py_DECREF(st);
    return rc;
}

/* arr.committed; an exact array's is read as G.committed_attr (`_committed` where dispatch.py
   found the property to be `return self._committed`: see device_of) */
static PyObject *committed_of(PyObject *arr) {
    PyObject *c = PyObject_GetAttr(arr, Py_TYPE(arr) == (PyTypeObject *)G.array_type ? G.committed_attr : S_committed);
    if (!c) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return NULL;
        PyErr_Clear();
        return Py_NewRef(Py_True);
    }
    return c;
}

/* (shape, (dtype name, itemsize)) of an array's aval: the result fields of a buffer row */
static int aval_fields(PyObject *arr, PyObject **shape, PyObject **name) {
    PyObject *aval = PyObject_GetAttr(arr, S_aval);
    if (!aval) return -1;
    Memo *m = memo_slot(AVALS, aval);
    if (m->key == aval) {
        *shape = Py_NewRef(m->a);
        *name = Py_NewRef(m->b);
        Py_DECREF(aval);
        return 0;
    }
    *shape = PyObject_GetAttr(aval, S_shape);
    PyObject *dtype = *shape ? PyObject_GetAttr(aval, S_dtype) : NULL;
    if (!dtype) {
        Py_CLEAR(*shape);
        Py_DECREF(aval);
        return -1;
    }
    *name = PyDict_GetItemWithError(G.dtype_names, dtype);
    if (*name) {
        Py_INCREF(*name);
    } else if (!PyErr_Occurred()) {
        *name = PyObject_CallOneArg(G.dtype_name, dtype);
    }
    Py_DECREF(dtype);
    if (!*name) {
        Py_CLEAR(*shape);
        Py_DECREF(aval);
        return -1;
    }
    memo_put(m, aval, *shape, *name);
    Py_DECREF(aval);
    return 0;
}

/* table.append(row) of one of the recorder's tables, then decref row (steals it). A table is a
   deque, or once a writer is attached a model/_packed.c Sink that encodes the row and lets it
   go: called in C, without a method lookup and call per row (measured with the other row
   changes: bench/README.md, round 10). A deque's append is called as a method: no bound method
   object made per row. */
static inline int append_steal(PyObject *table, PyObject *row) {
    if (!row) return -1;
    if (PACKED && Py_TYPE(table) == PACKED->sink_type) return PACKED->sink_add(table, row);
    PyObject *r = PyObject_CallMethodOneArg(table, S_append, row);
    Py_DECREF(row);
    if (!r) return -1;
    Py_DECREF(r);
    return 0;
}

/* A transfer row: rec.on_transfer(ev) when set (read once per call, as the Python path does),
   then into rec.transfers; steals ev. */
static int emit_transfer(PyObject *transfers, PyObject *cb, PyObject *ev) {
    if (!ev) return -1;
    if (cb != Py_None) {
        PyObject *r = PyObject_CallOneArg(cb, ev);
        if (!r) {
            Py_DECREF(ev);
            return -1;
        }
        Py_DECREF(r);
    }
    return append_steal(transfers, ev);
}

/* A row into `table`, as the tuple Py_BuildValue(fmt, ...) makes ("(...)" of 'L', a long long,
   'K', an unsigned one, and 'O', an object): a Sink packs it straight from the values, no tuple
   made (model/_packed.c sink_vrow; bench/README.md, round 10); a deque, or a Sink that declines,
   gets the tuple (untracked). Steals nothing. */
static int emit_row(PyObject *table, const char *fmt, ...) {
    va_list ap;
    if (PACKED && Py_TYPE(table) == PACKED->sink_type) {
        va_start(ap, fmt);
        int r = PACKED->sink_vrow(table, fmt, ap);
        va_end(ap);
        if (r <= 0) return r;
    }
    va_start(ap, fmt);
    PyObject *row = Py_VaBuildValue(fmt, ap);
    va_end(ap);
    return append_steal(table, row_(row));
}

/* ---- the hooks' per-thread state (jaxhooks/state.py `tls`) ----------------------------------
   One C struct a thread, kept in the thread's own state dict (PyThreadState_GetDict, emptied by
   CPython when the thread ends: the capsule's destructor frees it and what it holds), exposed as
   the attributes of one `ThreadState` object. record_call writes `depth` and `op` twice an op;
   through threading.local (a Python subclass) the four stores cost ~2,500 instructions an op,
   here ~540 (callgrind, bench/README.md round 16). Same names and defaults as state.py's
   `_TLS`, the pure-Python path's. Corners, as threading.local's: a finalizer run by the
   struct's release that touches `tls` makes a new struct the ended thread never frees; one
   MAIN_TS per process (a sub-interpreter on the main thread, or a fork from another thread,
   leaves main_depth() at 0: distributed.py then decides by the frame alone). */
typedef struct {
    PyObject *op, *placer, *collect; /* None by default */
    long depth;
    int in_device_get, host_side, inner;
} TState;

static PyObject *S_tstate_key;
#define TSTATE_CAPSULE "jaxplace_cli.capture._native.TState"
/* The main thread's struct, for main_depth() from another thread (distributed.py's heartbeat:
   a main thread blocked in a recorded JAX call shows no Python frame of JAX or jaxplace, the
   hooks being C). Set where the main thread makes its struct, unset where it is freed. */
static unsigned long MAIN_IDENT;
static TState *MAIN_TS;

static void tstate_release(TState *t) {
    if (t == MAIN_TS) MAIN_TS = NULL;
    Py_XDECREF(t->op);
    Py_XDECREF(t->placer);
    Py_XDECREF(t->collect);
    PyMem_RawFree(t);
}

static void tstate_destroy(PyObject *capsule) {
    TState *t = PyCapsule_GetPointer(capsule, TSTATE_CAPSULE);
    if (t) tstate_release(t);
    else PyErr_Clear();
}

/* This thread's struct, made on first use; NULL with an error. */
static TState *tstate(void) {
    PyObject *d = PyThreadState_GetDict(); /* borrowed */
    if (!d) {
        PyErr_SetString(PyExc_RuntimeError, "jaxplace: no Python thread state");
        return NULL;
    }
    PyObject *c = PyDict_GetItemWithError(d, S_tstate_key); /* borrowed */
    if (c) return PyCapsule_GetPointer(c, TSTATE_CAPSULE);
    if (PyErr_Occurred()) return NULL;
    TState *t = PyMem_RawCalloc(1, sizeof(TState));
    if (!t) {
        PyErr_NoMemory();
        return NULL;
    }
    t->op = Py_NewRef(Py_None);
    t->placer = Py_NewRef(Py_None);
    t->collect = Py_NewRef(Py_None);
    c = PyCapsule_New(t, TSTATE_CAPSULE, tstate_destroy);
    if (!c) {
        tstate_release(t);
        return NULL;
    }
    int r = PyDict_SetItem(d, S_tstate_key, c);
    Py_DECREF(c); /* the dict holds it (or the failed insert freed it) */
    if (r < 0) return NULL;
    if (PyThread_get_thread_ident() == MAIN_IDENT) MAIN_TS = t;
    return t;
}

typedef struct {
    PyObject_HEAD
} ThreadState;

/* closure: the field's offset in TState; objects and flags by separate accessors */
static PyObject *ts_get_obj(PyObject *self, void *off) {
    TState *t = tstate();
    return t ? Py_NewRef(*(PyObject **)((char *)t + (size_t)off)) : NULL;
}

static int ts_set_obj(PyObject *self, PyObject *v, void *off) {
    TState *t = tstate();
    if (!t) return -1;
    Py_XSETREF(*(PyObject **)((char *)t + (size_t)off), Py_NewRef(v ? v : Py_None)); /* del: the default */
    return 0;
}

static PyObject *ts_get_flag(PyObject *self, void *off) {
    TState *t = tstate();
    return t ? PyBool_FromLong(*(int *)((char *)t + (size_t)off)) : NULL;
}

static int ts_set_flag(PyObject *self, PyObject *v, void *off) {
    TState *t = tstate();
    if (!t) return -1;
    int b = v ? PyObject_IsTrue(v) : 0;
    if (b < 0) return -1;
    *(int *)((char *)t + (size_t)off) = b;
    return 0;
}

static PyObject *ts_get_depth(PyObject *self, void *unused) {
    TState *t = tstate();
    return t ? PyLong_FromLong(t->depth) : NULL;
}

static int ts_set_depth(PyObject *self, PyObject *v, void *unused) {
    TState *t = tstate();
    if (!t) return -1;
    long d = v ? PyLong_AsLong(v) : 0;
    if (d == -1 && PyErr_Occurred()) return -1;
    t->depth = d;
    return 0;
}

#define TS_OFF(f) ((void *)offsetof(TState, f))
static PyGetSetDef ts_getset[] = {
    {"depth", ts_get_depth, ts_set_depth, "1 or 2 inside a recorded op on this thread, else 0", NULL},
    {"op", ts_get_obj, ts_set_obj, "the hooked call in flight on this thread, or None", TS_OFF(op)},
    {"placer", ts_get_obj, ts_set_obj, "innermost device_placement() on this thread, or None", TS_OFF(placer)},
    {"collect", ts_get_obj, ts_set_obj, "the list an explicit placement API's legs go to, or None",
     TS_OFF(collect)},
    {"in_device_get", ts_get_flag, ts_set_flag, "inside jax.device_get", TS_OFF(in_device_get)},
    {"host_side", ts_get_flag, ts_set_flag, "inside a host callback's body", TS_OFF(host_side)},
    {"inner", ts_get_flag, ts_set_flag, "inside an inner dispatch that counted its host arguments", TS_OFF(inner)},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ThreadStateType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "jaxplace_cli.capture._native.ThreadState",
    .tp_basicsize = sizeof(ThreadState),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .tp_doc = "The hooks' per-thread state (jaxhooks/state.py tls): one object, a value a thread.",
    .tp_getset = ts_getset,
};

static PyObject *THREAD_STATE; /* the one instance (thread_state()) */

static PyObject *thread_state(PyObject *mod, PyObject *unused) { return Py_NewRef(THREAD_STATE); }

/* main_depth(): the main thread's `depth` (0 before it made its state), read from any thread. */
static PyObject *main_depth(PyObject *mod, PyObject *unused) { return PyLong_FromLong(MAIN_TS ? MAIN_TS->depth : 0); }

static int set_tls(PyObject *depth, PyObject *op) {
    if (G.tls == THREAD_STATE) { /* the C struct itself: no attribute lookup */
        TState *t = tstate();
        long d = PyLong_AsLong(depth);
        if (!t || (d == -1 && PyErr_Occurred())) return -1;
        t->depth = d;
        Py_XSETREF(t->op, Py_NewRef(op));
        return 0;
    }
    if (PyObject_SetAttr(G.tls, S_depth, depth) < 0) return -1;
    return PyObject_SetAttr(G.tls, S_op, op);
}

typedef struct {
    PyObject *rec, *spec, *fn, *args, *kwargs, *out, *site, *seq, *placed, *backward;
    PyObject *leaves; /* the operands record_fast reads: a new reference (args, or a jit's pytree leaves) */
    PyObject *operands; /* args less its static positions (operand_args): a new reference */
    PyObject *twin; /* spec.foreign, held while it is the call's spec (record_call): a new reference */
    int64_t t0, t1, base;
} Call;

/* An operand record_fast records: an array (exact type), a Python scalar, or NumPy data (an
   exact ndarray or a NumPy scalar: its host legs by inputs.host_leg). 0 for anything else -- a
   dict or another pytree (flattened by the caller for a jit), an ndarray subclass (it may be a
   registered pytree node), None, a key array, a tracer: the Python code reads those -- and -1
   on error. G.host_types = (numpy.ndarray, numpy.generic). */
static int known_operand(PyObject *a) {
    if (Py_TYPE(a) == (PyTypeObject *)G.array_type || is_scalar(a)) return 1;
    if (Py_TYPE(a) == (PyTypeObject *)PyTuple_GET_ITEM(G.host_types, 0)) return 1;
    return PyObject_IsInstance(a, PyTuple_GET_ITEM(G.host_types, 1));
}

/* The leaves of `tree` appended to `out` in JAX's flattening order, for the containers whose
   order JAX fixes and no user can re-register: an exact tuple or list (its items in order), an
   exact dict whose keys are all exact str (its values by sorted key, as jaxlib's pytree
   flattens a dict) and None (no leaves). 1: done, every leaf known (known_operand for operands,
   an exact array for results); 0: something else (a namedtuple, an OrderedDict, a registered
   class, an unknown leaf): the caller asks tree_leaves; -1: error. Saves the call into
   jax.tree_util (its Python frame and a PyTreeDef built and dropped): issue 29, ~30 % of the
   hooks' CPU on a training step whose params are a dict (bench P1). Items are held while
   known_operand looks at them (an isinstance may run a user's __class__). */
static int flat_leaves(PyObject *t, PyObject *out, int operands, int depth) {
    PyTypeObject *tp = Py_TYPE(t);
    if (t == Py_None) return 1;
    if (depth > 64) return 0;
    if (tp == &PyTuple_Type || tp == &PyList_Type) {
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(t); i++) {
            PyObject *item = Py_NewRef(PySequence_Fast_GET_ITEM(t, i));
            int r = flat_leaves(item, out, operands, depth + 1);
            Py_DECREF(item);
            if (r <= 0) return r;
        }
        return 1;
    }
    if (tp == &PyDict_Type) {
        PyObject *keys = PyDict_Keys(t);
        if (!keys) return -1;
        int r = 1;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(keys) && r > 0; i++)
            r = Py_TYPE(PyList_GET_ITEM(keys, i)) == &PyUnicode_Type;
        if (r > 0 && PyList_Sort(keys) < 0) r = -1; /* str keys: code point order, as sorted() */
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(keys) && r > 0; i++) {
            PyObject *v = PyDict_GetItemWithError(t, PyList_GET_ITEM(keys, i));
            if (!v) { /* a key gone meanwhile: let tree_leaves see the dict as it is now */
                r = PyErr_Occurred() ? -1 : 0;
                break;
            }
            Py_INCREF(v);
            r = flat_leaves(v, out, operands, depth + 1);
            Py_DECREF(v);
        }
        Py_DECREF(keys);
        return r;
    }
    int known = operands ? known_operand(t) : tp == (PyTypeObject *)G.array_type;
    if (known <= 0) return known;
    return PyList_Append(out, t) < 0 ? -1 : 1;
}

/* The leaves of a jit call's pytree (dispatch._operand_leaves / _out_arrays: jax.tree_util.
   tree_leaves) as a tuple when record_fast knows every one (results: arrays only), None when
   one is not (the Python code records those), NULL on error. */
static PyObject *pytree_leaves(PyObject *tree, int operands) {
    PyObject *list = PyList_New(0);
    if (!list) return NULL;
    int flat = flat_leaves(tree, list, operands, 0);
    if (flat == 1) {
        PyObject *t = PyList_AsTuple(list);
        Py_DECREF(list);
        return t;
    }
    Py_DECREF(list);
    if (flat < 0) return NULL;
    list = PyObject_CallOneArg(G.tree_leaves, tree);
    if (!list) return NULL;
    PyObject *t = PySequence_Tuple(list); /* a copy: a leaf's Python cannot change it under us */
    Py_DECREF(list);
    if (!t) return NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(t); i++) {
        PyObject *a = PyTuple_GET_ITEM(t, i);
        int known = operands ? known_operand(a) : Py_TYPE(a) == (PyTypeObject *)G.array_type;
        if (known <= 0) {
            Py_DECREF(t);
            return known < 0 ? NULL : Py_NewRef(Py_None);
        }
    }
    return t;
}

/* c->args less the positions the spec's static_argnums names among them, as
   state.static_positions reads them (-2: the second from the end; out of range: none), the
   operands dispatch._operand_leaves keeps: a jitted training step with a static config
   argument is recorded here, not by the Python code. A new reference; None where a number is
   not a Python int (jax.jit keeps static_argnums=(np.int64(1),) as given: the Python code
   reads it); NULL with an error. */
static PyObject *operand_args(Call *c) {
    Py_ssize_t n = PyTuple_GET_SIZE(c->args);
    PyObject *nums = n ? field(c->spec, K_SPEC, P_STATIC_ARGNUMS) : Py_NewRef(Py_None);
    int t = nums ? PyObject_IsTrue(nums) : -1;
    PyObject *it = t > 0 ? PyObject_GetIter(nums) : NULL, *num;
    Py_XDECREF(nums);
    if (t <= 0) return t < 0 ? NULL : Py_NewRef(c->args);
    if (!it) return NULL;
    char small[64] = {0}, *drop = n <= 64 ? small : PyMem_Calloc((size_t)n, 1);
    int any = 0;
    if (!drop) PyErr_NoMemory();
    int other = 0; /* a number that is not a Python int: the Python code reads them all */
    while (drop && !other && (num = PyIter_Next(it))) {
        int overflow = 0;
        other = !PyLong_Check(num);
        long long i = other ? 0 : PyLong_AsLongLongAndOverflow(num, &overflow);
        Py_DECREF(num);
        if (i == -1 && PyErr_Occurred()) break;
        if (!other && !overflow && -n <= i && i < n) { /* out of range names none */
            drop[i < 0 ? i + n : i] = 1;
            any = 1;
        }
    }
    Py_DECREF(it);
    PyObject *r = NULL;
    if (drop && !PyErr_Occurred()) {
        if (other) {
            r = Py_NewRef(Py_None);
        } else if (!any) {
            r = Py_NewRef(c->args);
        } else if ((r = PyList_New(0))) { /* the kept positions, in order */
            for (Py_ssize_t i = 0; r && i < n; i++)
                if (!drop[i] && PyList_Append(r, PyTuple_GET_ITEM(c->args, i)) < 0) Py_CLEAR(r);
            PyObject *kept = r ? PyList_AsTuple(r) : NULL;
            Py_XDECREF(r);
            r = kept;
        }
    }
    if (drop && drop != small) PyMem_Free(drop);
    return r;
}

/* A leaf that a call without scalar operands skips (record_fast's `!scalars`), as Python's
   _after_call does, and that is surely no jax.Array (which Python records as an input): a
   Python scalar, None, a str, a class (x.astype(jnp.bfloat16)), NumPy data. By type alone:
   no isinstance, so no user code runs. */
static inline int inert(PyObject *o) {
    return is_scalar(o) || o == Py_None || PyUnicode_CheckExact(o) || PyType_Check(o) ||
           Py_TYPE(o) == (PyTypeObject *)PyTuple_GET_ITEM(G.host_types, 0) ||
           PyObject_TypeCheck(o, (PyTypeObject *)PyTuple_GET_ITEM(G.host_types, 1));
}

/* The operand leaves of a call whose arguments are not all plain operands, for a spec without
   scalar operands, index or flattening (jnp.max(x, axis=0), x.reshape((2, 8)), jnp.zeros((3,)),
   jnp.concatenate([x, y]), x.astype(t)): dispatch._operand_leaves' order -- the positional
   arguments, then the keyword values, an exact list or tuple opened one level -- where every
   leaf is an array (exact type) or inert. A new tuple; None where the Python code must read
   them (issue 29: these calls took the Python rows, bench/README.md round 19); NULL with an
   error set. */
static PyObject *inert_leaves(Call *c) {
    int t = field_true(c->spec, K_SPEC, P_SCALARS);
    if (!t) t = field_true(c->spec, K_SPEC, P_INDEX);
    if (t) return t < 0 ? NULL : Py_NewRef(Py_None);
    PyObject *out = PyList_New(0);
    if (!out) return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(c->operands), pos = 0;
    PyObject *key, *a;
    for (Py_ssize_t i = 0;; i++) {
        if (i < n) {
            a = PyTuple_GET_ITEM(c->operands, i);
        } else if (!c->kwargs || !PyDict_Next(c->kwargs, &pos, &key, &a)) {
            break;
        }
        int seq = PyTuple_CheckExact(a) || PyList_CheckExact(a);
        Py_ssize_t m = seq ? PySequence_Fast_GET_SIZE(a) : 1;
        for (Py_ssize_t j = 0; j < m; j++) { /* by index: a list is read item by item, as extend() */
            PyObject *leaf = seq ? PySequence_Fast_GET_ITEM(a, j) : a;
            if (Py_TYPE(leaf) != (PyTypeObject *)G.array_type && !inert(leaf)) {
                Py_DECREF(out);
                return Py_NewRef(Py_None);
            }
            if (PyList_Append(out, leaf) < 0) {
                Py_DECREF(out);
                return NULL;
            }
        }
    }
    PyObject *r = PyList_AsTuple(out);
    Py_DECREF(out);
    return r;
}

/* Can the C post-processing record this call exactly as dispatch._after_call would? 0: no
   (the Python code does it), 1: yes, -1: error. Reads only; records nothing. On 1, *items and
   *nouts are the result arrays: c->out itself (kept alive by the Call), or the items of *held,
   a new reference to a tuple (the result, or a list's items copied: recording calls into
   Python, which must not pull an item out from under a borrowed pointer), and c->leaves the
   operands: the arguments (less static positions), or a jit call's pytree leaves (a params
   dict: every training step; issue 29, measured 25 us a step in the Python code for a
   4-array dict and a loss). */
static int c_records(Call *c, PyObject **held, PyObject ***items, Py_ssize_t *nouts) {
    *held = NULL;
    int t = field_true(c->spec, K_SPEC, P_HOST_DATA);
    if (t) return t < 0 ? -1 : 0;
    /* static arguments (a jit's, a jitted jnp function's) are never uploaded: Python skips the
       keywords static_argnames names (here: the Python code reads them) and the positions
       static_argnums names (operand_args) */
    if (c->kwargs && (t = field_true(c->spec, K_SPEC, P_STATIC_ARGNAMES))) return t < 0 ? -1 : 0;
    if (!(c->operands = operand_args(c))) return -1;
    if (c->operands == Py_None) return 0;
    int flatten = -2; /* read when needed */
    Py_ssize_t n = PyTuple_GET_SIZE(c->operands);
    int plain = c->kwargs == NULL, host = 0; /* keyword arguments: inert_leaves, or Python */
    for (Py_ssize_t i = 0; i < n && plain > 0; i++) {
        PyObject *a = PyTuple_GET_ITEM(c->operands, i);
        /* anything else (a list, a dict, a pytree): flattened by the Python code, or for a jit
           by tree_leaves below */
        plain = known_operand(a);
        host |= Py_TYPE(a) != (PyTypeObject *)G.array_type && !is_scalar(a);
    }
    if (plain < 0) return -1;
    /* x[idx]: the index's uploads follow from the index (dispatch.index_uploads, Python) */
    if (plain && host && (t = field_true(c->spec, K_SPEC, P_INDEX))) return t < 0 ? -1 : 0;
    if (plain) {
        c->leaves = Py_NewRef(c->operands);
    } else {
        if ((flatten = field_true(c->spec, K_SPEC, P_FLATTEN)) < 0) return -1;
        PyObject *leaves = !flatten ? inert_leaves(c) : c->kwargs ? Py_NewRef(Py_None)
                           : pytree_leaves(c->operands, 1); /* tree_leaves((args, {})): the same leaves */
        if (!leaves || leaves == Py_None) {
            Py_XDECREF(leaves);
            return leaves ? 0 : -1;
        }
        c->leaves = leaves;
    }
    PyObject *out = c->out;
    if (Py_TYPE(out) == (PyTypeObject *)G.array_type) {
        *items = &c->out;
        *nouts = 1;
        return 1;
    }
    int seq_of_arrays = PyTuple_CheckExact(out) || PyList_CheckExact(out);
    Py_ssize_t m = seq_of_arrays ? PySequence_Fast_GET_SIZE(out) : 0;
    if (seq_of_arrays && (m == 0 || m > 4096)) return 0;
    PyObject **its = seq_of_arrays ? PySequence_Fast_ITEMS(out) : NULL;
    for (Py_ssize_t i = 0; i < m && seq_of_arrays; i++)
        seq_of_arrays = Py_TYPE(its[i]) == (PyTypeObject *)G.array_type;
    if (seq_of_arrays) {
        *held = PyTuple_CheckExact(out) ? Py_NewRef(out) : PyList_AsTuple(out);
    } else { /* a pytree of results: a jit call's only */
        if (flatten == -2 && (flatten = field_true(c->spec, K_SPEC, P_FLATTEN)) < 0) return -1;
        if (!flatten) return 0;
        *held = pytree_leaves(out, 0);
        if (*held == Py_None || (*held && (PyTuple_GET_SIZE(*held) == 0 || PyTuple_GET_SIZE(*held) > 4096))) {
            Py_CLEAR(*held);
            return 0;
        }
    }
    if (!*held) return -1;
    *items = PySequence_Fast_ITEMS(*held);
    *nouts = PyTuple_GET_SIZE(*held);
    return 1;
}

/* The stack node of a call's transfers (a new reference), looked up when its first transfer
   row is made (an op that moves nothing pays nothing): rec.stack_of of the hook's frame, as
   dispatch._after_call does. */
static PyObject *call_stack(Call *c) {
    PyObject *cache = PyObject_GetAttr(c->rec, S_site_cache);
    if (!cache) return NULL;
    PyFrameObject *frame = PyEval_GetFrame();
    PyObject *r;
    if (Py_TYPE(cache) == &SiteCacheType) {
        r = cache_stack((SiteCache *)cache, frame ? (PyObject *)frame : Py_None);
    } else { /* a recorder made without the native cache: its Python stack_of */
        r = PyObject_CallMethodOneArg(c->rec, S_stack_of, frame ? (PyObject *)frame : Py_None);
    }
    Py_DECREF(cache);
    return r;
}

/* The rows of one recorded call, as dispatch._after_call appends them (the cases c_records
   accepts): 0 recorded, 1 not recorded (a multi-device result: the Python code records it),
   -1 error. One cleanup label (`done`) for every exit. */
/* The thread and start time as int objects, made on first need: the op, buffer and scalar-upload
   rows take them as C values (emit_row), so an op that moves nothing else makes neither; a d2d
   row, a host leg and a row for a deque or an on_transfer callback do. 0, or -1 with an error. */
static int time_objects(PyObject **tid, PyObject **t0rel, unsigned long long tidv, long long t0r) {
    if (!*tid && !(*tid = PyLong_FromUnsignedLongLong(tidv))) return -1;
    if (!*t0rel && !(*t0rel = PyLong_FromLongLong(t0r))) return -1;
    return 0;
}

/* Whether operand i of the call is one its compiled program drops as unused: never uploaded or
   moved, no leg (legs.dropped_leaves, asked once per call, and only for a jit's scalars, NumPy data
   and arrays on another device; None in *dropped for any other call). 1, 0, or -1 with an error. */
static int dropped_at(Call *c, PyObject **dropped, Py_ssize_t i) {
    if (!*dropped) {
        int fl = field_true(c->spec, K_SPEC, P_FLATTEN);
        if (fl < 0) return -1;
        *dropped = fl ? PyObject_CallFunctionObjArgs(G.dropped_leaves, c->fn, c->spec, c->args, NULL)
                      : Py_NewRef(Py_None);
        if (!*dropped) return -1;
    }
    if (!PyFrozenSet_CheckExact(*dropped) || PySet_GET_SIZE(*dropped) == 0) return 0;
    PyObject *k = PyLong_FromSsize_t(i);
    if (!k) return -1;
    int r = PySet_Contains(*dropped, k);
    Py_DECREF(k);
    return r;
}

static int record_fast(Call *c, PyObject **outs, Py_ssize_t nouts) {
    int rc = -1;
    PyObject *dev = NULL, *tid = NULL, *t0rel = NULL, *in_ids = NULL, *seqs = NULL, *ops = NULL,
             *transfers = NULL, *bufids = NULL, *tail = NULL, *scalar_bytes = NULL;
    PyObject *kind = NULL, *name = NULL, *on_transfer = NULL, *scalar_api = NULL;
    PyObject *stack = NULL; /* the transfers' stack node (call_stack), made with the first one */
    PyObject *dropped = NULL; /* dropped_at's answer, on first need */
    int scalars = 0, dr;
    Py_ssize_t nargs = PyTuple_GET_SIZE(c->leaves);
    PyObject *in_list = NULL;

    dev = device_of(outs[0]);
    if (!dev) goto done;
    if (has_comma(dev)) goto to_python; /* a multi-device op: endpoint groups, sharded uploads */
    unsigned long long tidv = PyThread_get_thread_ident();
    long long t0r = c->t0 - c->base, durv = c->t1 - c->t0;
    if (!(seqs = field(c->rec, K_REC, R_SEQS))) goto done;
    if (!(transfers = field(c->rec, K_REC, R_TRANSFERS))) goto done;
    if (!(on_transfer = field(c->rec, K_REC, R_ON_TRANSFER))) goto done;
    if ((scalars = field_true(c->spec, K_SPEC, P_SCALARS)) < 0) goto done;
    if (scalars && !(scalar_api = field(c->spec, K_SPEC, P_SCALAR_API))) goto done;
    if (!(in_list = PyList_New(0))) goto done;
    for (Py_ssize_t i = 0; i < nargs; i++) {
        PyObject *a = PyTuple_GET_ITEM(c->leaves, i);
        if (Py_TYPE(a) == (PyTypeObject *)G.array_type) {
            PyObject *adev = device_of(a), *ad = NULL;
            if (!adev) goto done;
            PyObject *b = buf_of(a, &ad);
            Py_XDECREF(ad);
            if (!b) {
                Py_DECREF(adev);
                goto done;
            }
            if (b == Py_None) {
                Py_DECREF(b);
                PyObject *cm = committed_of(a);
                b = cm ? PyObject_CallMethodObjArgs(c->rec, S_buffer_id, a, adev, cm, c->site, c->seq, NULL) : NULL;
                Py_XDECREF(cm);
                if (!b) {
                    Py_DECREF(adev);
                    goto done;
                }
            }
            int err = PyList_Append(in_list, b);
            int cmp = err ? 0 : PyUnicode_Compare(adev, dev);
            if (cmp == -1 && PyErr_Occurred()) err = -1; /* not str labels: an error, not "moved" */
            int moved = !err && cmp != 0 && !has_comma(adev);
            if (moved) {
                int d = dropped_at(c, &dropped, i);
                if (d < 0) err = -1;
                else if (d) moved = 0; /* a jit argument its program dropped: never moved */
            }
            if (!err && moved) {
                PyObject *cm = committed_of(a), *api = NULL, *nb = NULL, *s = NULL;
                int committed = cm ? PyObject_IsTrue(cm) : -1;
                Py_XDECREF(cm);
                if (committed >= 0) {
                    PyObject *sname = field(c->spec, K_SPEC, P_API);
                    api = !sname ? NULL : committed ? Py_NewRef(sname)
                                  : PyUnicode_Concat(sname, G.uncommitted);
                    Py_XDECREF(sname);
                }
                nb = api ? PyObject_CallOneArg(G.array_nbytes, a) : NULL;
                s = nb ? PyIter_Next(seqs) : NULL;
                if (s && time_objects(&tid, &t0rel, tidv, t0r) == 0 && (stack || (stack = call_stack(c)))) {
                    PyObject *ev = row_(PyTuple_Pack(14, s, t0rel, tid, G.d2d, adev, dev, nb, Py_True,
                                                Py_False, api, c->site, b, c->seq, stack));
                    err = emit_transfer(transfers, on_transfer, ev);
                } else {
                    err = -1;
                }
                Py_XDECREF(api);
                Py_XDECREF(nb);
                Py_XDECREF(s);
            }
            Py_DECREF(b);
            Py_DECREF(adev);
            if (err) goto done;
        } else if (!scalars) {
            continue; /* a plain function's operands: its dispatches inside count their own */
        } else if ((dr = dropped_at(c, &dropped, i))) {
            if (dr < 0) goto done;
            continue; /* a jit argument its program dropped: never uploaded */
        } else if (!is_scalar(a)) { /* NumPy data and the like: inputs.host_leg, in order */
            PyObject *kw = c->kwargs ? Py_NewRef(c->kwargs) : PyDict_New();
            PyObject *st = stack ? Py_NewRef(stack) : PyLong_FromLong(-1);
            PyObject *r = kw && st && time_objects(&tid, &t0rel, tidv, t0r) == 0
                              ? PyObject_CallFunctionObjArgs(G.host_leg, c->rec, c->spec, c->fn, c->args, kw, a, dev,
                                                             outs[0], c->site, c->seq, t0rel, tid, st, NULL)
                              : NULL;
            Py_XDECREF(kw);
            Py_XDECREF(st);
            if (!r) goto done;
            if (!stack && PyLong_Check(r) && PyLong_AsLong(r) >= 0) {
                stack = r; /* the call's stack node, made with this operand's first leg */
            } else {
                if (PyErr_Occurred()) {
                    Py_DECREF(r);
                    goto done;
                }
                Py_DECREF(r);
            }
        } else {
            if (!scalar_bytes) {
                PyObject *x64 = G.x64_now != Py_None ? PyObject_GetAttr(G.x64_now, S_value)
                                                     : PyObject_CallNoArgs(G.x64_enabled);
                if (!x64) goto done;
                int on = PyObject_IsTrue(x64);
                Py_DECREF(x64);
                if (on < 0) goto done;
                scalar_bytes = PySequence_GetItem(G.scalar_bytes, on);
                if (!scalar_bytes) goto done;
            }
            PyObject *nb = PyObject_GetItem(scalar_bytes, (PyObject *)Py_TYPE(a));
            long long sv = -1; /* the row's seq, taken as an int where it goes in by emit_row */
            int fast = nb && on_transfer == Py_None && count_next(seqs, &sv);
            PyObject *s = nb && !fast ? PyIter_Next(seqs) : NULL;
            int err = -1;
            if ((fast || s) && (stack || (stack = call_stack(c)))) {
                if (fast) {
                    err = emit_row(transfers, "(LLKOOOOOOOOOOO)", sv, t0r, tidv, G.h2d, G.host, dev, nb, Py_True,
                                   Py_False, scalar_api, c->site, ZERO, c->seq, stack);
                } else {
                    PyObject *ev = time_objects(&tid, &t0rel, tidv, t0r) < 0 ? NULL
                                   : row_(PyTuple_Pack(14, s, t0rel, tid, G.h2d, G.host, dev, nb, Py_True,
                                                       Py_False, scalar_api, c->site, ZERO, c->seq, stack));
                    err = emit_transfer(transfers, on_transfer, ev);
                }
            }
            Py_XDECREF(nb);
            Py_XDECREF(s);
            if (err) goto done;
        }
    }
    Py_ssize_t nin = PyList_GET_SIZE(in_list);
    in_ids = nin == 1 ? Py_NewRef(PyList_GET_ITEM(in_list, 0)) : row_(PyList_AsTuple(in_list));
    if (!in_ids) goto done;
    if (!(ops = field(c->rec, K_REC, R_OPS))) goto done;
    if (!(bufids = field(c->rec, K_REC, R_BUF_IDS))) goto done;
    if (!(tail = field(c->rec, K_REC, R_TAIL))) goto done;
    if (!(kind = field(c->spec, K_SPEC, P_KIND))) goto done;
    if (!(name = field(c->spec, K_SPEC, P_NAME))) goto done;
    int emitted = -1; /* the op row: 0 once in (emit_row) */
    if (nouts == 1) { /* one result (or a 1-tuple): its buffer rides in the op row */
        PyObject *od = NULL, *b = buf_of(outs[0], &od);
        if (!b) goto done;
        if (b == Py_None && od && PyDict_Check(od)) {
            Py_DECREF(b);
            PyObject *shape = NULL, *dname = NULL, *cm = NULL;
            b = PyIter_Next(bufids);
            if (b && PyDict_SetItem(od, G.buf_attr, b) == 0 && PyObject_SetItem(tail, dev, b) == 0 &&
                track_(c->rec, outs[0], od, b, c->site, dev) == 0 && aval_fields(outs[0], &shape, &dname) == 0 && (cm = committed_of(outs[0]))) {
                emitted = emit_row(ops, "(OLLKOOOOOOOOOOOO)", c->seq, t0r, durv, tidv, kind, name, dev, c->site,
                                   in_ids, b, G.empty, c->backward, c->placed, shape, dname, cm);
            }
            Py_XDECREF(shape);
            Py_XDECREF(dname);
            Py_XDECREF(cm);
        } else {
            if (b == Py_None) {
                Py_DECREF(b);
                b = Py_NewRef(ZERO);
            }
            emitted = emit_row(ops, "(OLLKOOOOOOOOO)", c->seq, t0r, durv, tidv, kind, name, dev, c->site, in_ids, b,
                               G.empty, c->backward, c->placed);
        }
        Py_XDECREF(b);
        Py_XDECREF(od);
    } else {
        PyObject *buffers = field(c->rec, K_REC, R_BUFFERS);
        PyObject *out_bufs = buffers ? row_(PyTuple_New(nouts)) : NULL;
        int ok = out_bufs != NULL;
        for (Py_ssize_t i = 0; ok && i < nouts; i++) {
            PyObject *o = outs[i], *od = NULL, *b = buf_of(o, &od);
            if (!b) {
                ok = 0;
            } else if (b == Py_None && od && PyDict_Check(od)) {
                Py_DECREF(b);
                PyObject *odev = i == 0 ? Py_NewRef(dev) : device_of(o);
                PyObject *shape = NULL, *dname = NULL, *cm = NULL;
                b = odev ? PyIter_Next(bufids) : NULL;
                ok = b && PyDict_SetItem(od, G.buf_attr, b) == 0 &&
                     (i != 0 || PyObject_SetItem(tail, dev, b) == 0) &&
                     track_(c->rec, o, od, b, c->site, odev) == 0 && aval_fields(o, &shape, &dname) == 0 && (cm = committed_of(o)) != NULL &&
                     emit_row(buffers, "(OOOOOOO)", b, c->seq, odev, shape, dname, cm, c->site) == 0;
                Py_XDECREF(odev);
                Py_XDECREF(shape);
                Py_XDECREF(dname);
                Py_XDECREF(cm);
            } else if (b == Py_None) {
                Py_DECREF(b);
                b = Py_NewRef(ZERO);
            }
            Py_XDECREF(od);
            if (ok && b) PyTuple_SET_ITEM(out_bufs, i, Py_NewRef(b));
            Py_XDECREF(b);
        }
        if (ok)
            emitted = emit_row(ops, "(OLLKOOOOOOOOO)", c->seq, t0r, durv, tidv, kind, name, dev, c->site, in_ids,
                               out_bufs, G.empty, c->backward, c->placed);
        Py_XDECREF(out_bufs);
        Py_XDECREF(buffers);
    }
    if (emitted < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "record_fast: the op row was not made");
        goto done;
    }
    rc = 0;
    goto done;
to_python:
    rc = 1;
done:
    Py_XDECREF(dev);
    Py_XDECREF(tid);
    Py_XDECREF(t0rel);
    Py_XDECREF(in_ids);
    Py_XDECREF(seqs);
    Py_XDECREF(ops);
    Py_XDECREF(transfers);
    Py_XDECREF(bufids);
    Py_XDECREF(tail);
    Py_XDECREF(scalar_bytes);
    Py_XDECREF(kind);
    Py_XDECREF(name);
    Py_XDECREF(in_list);
    Py_XDECREF(on_transfer);
    Py_XDECREF(scalar_api);
    Py_XDECREF(dropped);
    Py_XDECREF(stack);
    return rc;
}

static long checks_since; /* ops since the last back-pressure check (GIL-protected) */

/* Back-pressure: every 256 ops, the recorder's backlog against its limit; over it, the
   recorder's Python method waits for the writer (capture/recorder.py). */
static int backlog_check(PyObject *rec) {
    if (++checks_since < 256) return 0;
    checks_since = 0;
    PyObject *limit = field(rec, K_REC, R_LIMIT);
    if (!limit) return -1;
    if (limit == Py_None) {
        Py_DECREF(limit);
        return 0;
    }
    Py_ssize_t lim = PyLong_AsSsize_t(limit);
    Py_DECREF(limit);
    if (lim == -1 && PyErr_Occurred()) return -1;
    int tables[3] = {R_OPS, R_TRANSFERS, R_BUFFERS};
    Py_ssize_t total = 0;
    for (int i = 0; i < 3; i++) {
        PyObject *dq = field(rec, K_REC, tables[i]);
        if (!dq) return -1;
        Py_ssize_t n = PyObject_Length(dq);
        Py_DECREF(dq);
        if (n < 0) return -1;
        total += n;
    }
    if (total <= lim) return 0; /* a Sink's length counts its packed rows too (model/_packed.c) */
    PyObject *r = PyObject_CallMethodNoArgs(rec, S_backlog_wait);
    Py_XDECREF(r);
    return r ? 0 : -1;
}

/* A failure of the recording itself (not of the user's call), with its error set: counted on
   the recorder (Recorder.recording_failed, said once at the end of the run) and cleared, so
   the user's program goes on with its result, as under plain python. 0 when handled; -1 when
   the error is not an Exception (KeyboardInterrupt, SystemExit: the user's, they stand). */
static int recording_failed(PyObject *rec) {
    if (!PyErr_Occurred()) /* a -1 without an error (a site_of that returned a negative id) */
        PyErr_SetString(PyExc_SystemError, "jaxplace: the recording failed without an error");
    if (!PyErr_ExceptionMatches(PyExc_Exception)) return -1;
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyErr_NormalizeException(&et, &ev, &tb);
    if (tb && ev) PyException_SetTraceback(ev, tb);
    PyObject *r = rec && ev ? PyObject_CallMethodOneArg(rec, S_recording_failed, ev) : NULL;
    Py_XDECREF(r);
    PyErr_Clear(); /* counting failed too: nothing more can be done without the user noticing */
    Py_XDECREF(et);
    Py_XDECREF(ev);
    Py_XDECREF(tb);
    return 0;
}

static void call_clear(Call *c) {
    Py_CLEAR(c->twin);
    Py_CLEAR(c->leaves);
    Py_CLEAR(c->operands);
    Py_CLEAR(c->rec);
    Py_CLEAR(c->site);
    Py_CLEAR(c->seq);
    Py_CLEAR(c->out);
}

/* Before the call: its site, sequence number, the recorder's clock, and tls.op (the op in
   flight, which host reads inside it are attributed to). 0, or -1 with an error set. */
static int begin_call(Call *c, PyObject *kwargs) {
    PyObject *cache = PyObject_GetAttr(c->rec, S_site_cache);
    if (!cache) return -1;
    PyFrameObject *frame = PyEval_GetFrame(); /* the Python caller of record_call (the hook) */
    long sid = 0;
    if (frame && Py_TYPE(cache) == &SiteCacheType) {
        sid = site_lookup((SiteCache *)cache, frame);
    } else if (frame) { /* a recorder made without the native cache: its Python site_of */
        PyObject *r = PyObject_CallOneArg(cache, (PyObject *)frame);
        sid = r ? PyLong_AsLong(r) : -1;
        Py_XDECREF(r);
        if (sid == -1 && !PyErr_Occurred()) sid = 0;
    }
    Py_DECREF(cache);
    if (sid < 0 || !(c->site = PyLong_FromLong(sid))) return -1;
    PyObject *seqs = field(c->rec, K_REC, R_SEQS);
    c->seq = seqs ? PyIter_Next(seqs) : NULL;
    Py_XDECREF(seqs);
    if (!c->seq) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "the recorder's sequence ended");
        return -1;
    }
    PyObject *t0obj = field(c->rec, K_REC, R_T0);
    if (!t0obj) return -1;
    c->base = PyLong_AsLongLong(t0obj);
    Py_DECREF(t0obj);
    if (c->base == -1 && PyErr_Occurred()) return -1;
    /* tls.op: (name, seq, site, args, kwargs, api, spec); tls.depth: the spec's (2: the op counts
       its own host operands, the dispatches inside it add none) */
    PyObject *name = field(c->spec, K_SPEC, P_NAME);
    PyObject *api = name ? field(c->spec, K_SPEC, P_API) : NULL;
    PyObject *depth = api ? field(c->spec, K_SPEC, P_DEPTH) : NULL;
    PyObject *op = depth ? PyTuple_Pack(7, name, c->seq, c->site, c->args, kwargs, api, c->spec) : NULL;
    Py_XDECREF(name);
    Py_XDECREF(api);
    int rc = op ? set_tls(depth, op) : -1;
    Py_XDECREF(depth);
    Py_XDECREF(op);
    return rc;
}

/* tls back to "no op in flight", keeping whatever error is set (the user's call's). */
static void end_call(void) {
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    if (set_tls(ZERO, Py_None) < 0) PyErr_Clear();
    PyErr_Restore(et, ev, tb);
}

/* The call raised: the Python code records the failure (it never raises); the user's error
   stands, as it was. */
static void record_raised(Call *c, PyObject *kwargs) {
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyErr_NormalizeException(&et, &ev, &tb);
    if (tb) PyException_SetTraceback(ev, tb);
    PyObject *t0 = PyLong_FromLongLong(c->t0), *t1 = PyLong_FromLongLong(c->t1);
    PyObject *r = (t0 && t1) ? PyObject_CallFunctionObjArgs(G.record_failure, c->rec, c->spec, c->args,
                                                            kwargs, c->seq, c->site, t0, t1, ev, NULL)
                             : NULL;
    Py_XDECREF(r);
    Py_XDECREF(t0);
    Py_XDECREF(t1);
    PyErr_Clear();
    PyErr_Restore(et, ev, tb);
}

/* The rows of a call that returned c->out: in C where c_records says it can, else by
   dispatch._after_call; then rec.on_dispatch and back-pressure. 0, or -1 with an error set. */
static int record_result(Call *c, PyObject *kwargs) {
    PyObject *held = NULL, **items = NULL;
    Py_ssize_t nouts = 0;
    long long before = -1; /* a jit call: the buffer-id counter before its rows (syncs.program) */
    if (G.program) {
        PyObject *kind = field(c->spec, K_SPEC, P_KIND);
        if (!kind) return -1;
        int jit = kind == S_jit || (PyUnicode_Check(kind) && PyUnicode_Compare(kind, S_jit) == 0);
        Py_DECREF(kind);
        if (jit) {
            PyObject *ids = field(c->rec, K_REC, R_BUF_IDS);
            if (!ids) return -1;
            before = count_peek(ids); /* -1: not an itertools.count (no mark, as without `program`) */
            Py_DECREF(ids);
        }
    }
    int in_c = c_records(c, &held, &items, &nouts);
    if (in_c < 0) return -1;
    if (in_c) {
        if (PyTuple_GET_SIZE(c->args) && items[0] == PyTuple_GET_ITEM(c->args, 0)) {
            Py_XDECREF(held); /* jnp.asarray(array) and friends: nothing was dispatched */
            return 0;
        }
        int r = record_fast(c, items, nouts);
        Py_XDECREF(held);
        if (r < 0) return -1;
        in_c = r == 0; /* 1: a multi-device result, which the Python code records */
    }
    if (in_c) {
        PyObject *cb = field(G.active, K_ACTIVE, A_ON_DISPATCH);
        if (!cb) return -1;
        PyObject *r = cb == Py_None ? Py_NewRef(Py_None) : PyObject_CallNoArgs(cb);
        Py_DECREF(cb);
        if (!r) return -1;
        Py_DECREF(r);
    } else { /* dispatch._after_call runs on_dispatch itself */
        PyObject *t0 = PyLong_FromLongLong(c->t0), *t1 = PyLong_FromLongLong(c->t1);
        PyObject *r = (t0 && t1) ? PyObject_CallFunctionObjArgs(G.after_call, c->rec, c->spec, c->fn, c->args,
                                                                kwargs, c->out, c->site, c->seq, t0, t1,
                                                                c->placed, c->backward, NULL)
                                 : NULL;
        Py_XDECREF(t0);
        Py_XDECREF(t1);
        if (!r) return -1;
        Py_DECREF(r);
    }
    long long end = -1; /* read before back-pressure: a wait may let another thread dispatch */
    if (before >= 0) {
        PyObject *ids = field(c->rec, K_REC, R_BUF_IDS);
        if (!ids) return -1;
        end = count_peek(ids);
        Py_DECREF(ids);
    }
    if (backlog_check(c->rec) < 0) return -1;
    if (before >= 0) { /* the newest compiled program on its devices: syncs.program */
        PyObject *b = PyLong_FromLongLong(before), *e = PyLong_FromLongLong(end);
        PyObject *r = b && e ? PyObject_CallFunctionObjArgs(G.program, c->rec, b, e, NULL) : NULL;
        Py_XDECREF(b);
        Py_XDECREF(e);
        if (!r) return -1;
        Py_DECREF(r);
    }
    return 0;
}

/* jaxhooks/state.py foreign_operand: an operand whose type has __jax_array__ (a flax
   nnx.Variable), which the operator converts itself before its dispatch. Looked up on the type
   (an instance's __getattr__ is not run); arrays, Python scalars and NumPy arrays are skipped
   first (every `x * 0.5`). */
static int foreign_operand(PyObject *args) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args); i++) {
        PyTypeObject *t = Py_TYPE(PyTuple_GET_ITEM(args, i));
        if (t == (PyTypeObject *)G.array_type || t == &PyFloat_Type || t == &PyLong_Type || t == &PyBool_Type ||
            t == &PyComplex_Type || t == (PyTypeObject *)PyTuple_GET_ITEM(G.host_types, 0))
            continue;
        PyObject *m = _PyType_Lookup(t, S_jax_array); /* borrowed; found in the MRO's dicts, no code run */
        if (m && m != Py_None) return 1;
    }
    return 0;
}

/* record_call(spec, fn, args, kwargs, backward=False): dispatch.python_record_call in C.
   What the user's call returns or raises is never changed by the recording: a recording
   failure before the call runs it unrecorded, one after it returns its result (both counted:
   recording_failed). */
static PyObject *record_call(PyObject *mod, PyObject *const *argv, Py_ssize_t argc, PyObject *kwnames) {
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    PyObject *backward = argc == 5 ? argv[4] : Py_False;
    if (nkw == 1 && argc == 4 && PyUnicode_Check(PyTuple_GET_ITEM(kwnames, 0)) &&
        PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "backward") == 0) {
        backward = argv[4];
    } else if (nkw) {
        PyErr_SetString(PyExc_TypeError, "record_call(): the only keyword argument is backward");
        return NULL;
    }
    if (argc < 4 || argc > 5 || !PyTuple_Check(argv[2])) {
        PyErr_SetString(PyExc_TypeError, "record_call(spec, fn, args: tuple, kwargs, backward=False)");
        return NULL;
    }
    if (!G.ready) {
        PyErr_SetString(PyExc_RuntimeError, "jaxplace native hot path used before configure()");
        return NULL;
    }
    int placing = PyDict_Check(argv[3]) ? field_true(G.active, K_ACTIVE, A_PLACING) : 1;
    if (placing) /* a placement policy: the placer's Python code decides, the Python path records */
        return placing < 0 ? NULL : PyObject_Vectorcall(G.py_record_call, argv, (size_t)argc, kwnames);
    PyObject *kwargs = argv[3];
    Call c = {0};
    c.spec = argv[0];
    /* an operator whose operand JAX converts itself: its plain twin (spec.foreign), so that the
       dispatches inside count their host arguments (state.CallSpec.plain_twin) */
    c.twin = field(c.spec, K_SPEC, P_FOREIGN);
    if (!c.twin) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return NULL;
        PyErr_Clear(); /* a spec without the field: none */
    } else if (c.twin != Py_None && foreign_operand(argv[2])) {
        c.spec = c.twin;
    }
    c.fn = argv[1];
    c.args = argv[2];
    c.kwargs = PyDict_GET_SIZE(kwargs) == 0 ? NULL : kwargs;
    c.backward = backward;
    c.placed = G.empty;
    c.rec = field(G.active, K_ACTIVE, A_REC);
    if (!c.rec || begin_call(&c, kwargs) < 0) {
        int handled = recording_failed(c.rec);
        end_call();
        call_clear(&c);
        return handled < 0 ? NULL : PyObject_Call(argv[1], argv[2], c.kwargs); /* unrecorded */
    }
    c.t0 = now_ns();
    c.out = PyObject_Call(c.fn, c.args, c.kwargs);
    c.t1 = now_ns();
    end_call();
    if (!c.out) {
        record_raised(&c, kwargs);
        call_clear(&c);
        return NULL;
    }
    if (record_result(&c, kwargs) < 0 && recording_failed(c.rec) < 0) /* a Ctrl-C while recording */
        Py_CLEAR(c.out);
    PyObject *result = c.out;
    c.out = NULL;
    call_clear(&c);
    return result;
}

/* ---------------------------------------------------------------- module */

/* The seq the recorder's itertools.count will give next, without drawing it: a free is not an
   event of its own (the seqs of ops, transfers and markers stay as they were); it happened
   before the event that draws this seq. Read from count's struct (CPython 3.8-3.13 layout:
   cnt, long_cnt, long_step), checked once at import against a known count (count_ok), else
   parsed from its repr "count(N)". -1 when neither works. */
typedef struct {
    PyObject_HEAD Py_ssize_t cnt;
    PyObject *long_cnt;
    PyObject *long_step;
} count_layout;
static PyTypeObject *count_type;
static int count_ok;

/* c itself where it is an itertools.count in its fast mode (a Py_ssize_t count, step 1: what
   count_check found the layout to be), else NULL: count's own next then returns cnt++. */
static count_layout *count_fast(PyObject *c) {
    return count_ok && Py_TYPE(c) == count_type && ((count_layout *)c)->cnt != PY_SSIZE_T_MAX &&
                   ((count_layout *)c)->long_cnt == NULL
               ? (count_layout *)c
               : NULL;
}

/* next(c) as a C int, as count's own next takes it: 1 and *v; 0 (nothing taken) outside the fast
   mode. Saves an int object a row where the row is packed straight from the values (emit_row). */
static int count_next(PyObject *c, long long *v) {
    count_layout *f = count_fast(c);
    if (f) *v = f->cnt++;
    return f != NULL;
}

static long long count_peek(PyObject *c) {
    count_layout *f = count_fast(c);
    if (f) return f->cnt;
    PyObject *r = PyObject_Repr(c);
    const char *t = r ? PyUnicode_AsUTF8(r) : NULL;
    long long v = t && strncmp(t, "count(", 6) == 0 ? strtoll(t + 6, NULL, 10) : -1;
    Py_XDECREF(r);
    PyErr_Clear();
    return v;
}

static void count_check(void) {
    PyObject *it = PyImport_ImportModule("itertools");
    PyObject *c = it ? PyObject_CallMethod(it, "count", "n", (Py_ssize_t)12345) : NULL;
    if (c) {
        count_type = Py_TYPE(c);
        Py_INCREF(count_type);
        count_ok = ((count_layout *)c)->cnt == 12345 && ((count_layout *)c)->long_cnt == NULL;
        PyObject *n = count_ok ? PyIter_Next(c) : NULL;
        count_ok = count_ok && n && ((count_layout *)c)->cnt == 12346;
        Py_XDECREF(n);
    }
    Py_XDECREF(c);
    Py_XDECREF(it);
    PyErr_Clear();
}

static PyObject *peek_seq(PyObject *mod, PyObject *c) { return PyLong_FromLongLong(count_peek(c)); }

/* ---------------------------------------------------------------- the run's last lines */

/* print_at_exit(fd, timeout, fallback, keep): the bytes the writer process sends on `fd`, up to
   a NUL, written to file descriptor 2 at the very end of this interpreter's teardown (Py_AtExit
   runs after the atexit handlers, the modules' teardown and the flush of sys.stderr). Python
   spends ~130 ms tearing down after a JAX script's last line; the writer process makes
   `jaxplace run`'s verdict (~40 ms on a 9,000-op run) meanwhile on the other core instead of
   the script's process waiting for it before that teardown (issue 29). `fallback` is written
   instead when no NUL comes within `timeout` seconds (the writer died or is stuck), the pipe is
   no longer the writer's, or a SIGINT/SIGTERM ends the wait; `keep` is held until
   exit so that nothing closes the writer's pipes or reaps it during the teardown. Acts only in
   the process that registered it (not in a fork child of the script). */
static int exit_fd = -1;
static pid_t exit_pid;
static double exit_timeout;
static char *exit_fallback;
static Py_ssize_t exit_fallback_len;
static PyObject *exit_keep;
static dev_t exit_dev; /* the pipe's identity: fd numbers are reused */
static ino_t exit_ino;

static void write_fd2(const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(2, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        p += w;
        n -= (size_t)w;
    }
}

/* A Ctrl-C or SIGTERM while waiting ends the wait (the fallback line is written): Python's own
   handlers cannot run any more, and the signal would be lost. A self-pipe wakes the poll. */
static int wake_fd[2] = {-1, -1};
static volatile sig_atomic_t exit_signal = 0;

static void on_exit_signal(int signum) {
    int saved = errno;
    exit_signal = signum;
    if (wake_fd[1] >= 0) (void)!write(wake_fd[1], "", 1);
    errno = saved;
}

static int catch_signal(int signum, struct sigaction *old) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_exit_signal;
    sigemptyset(&sa.sa_mask);
    if (sigaction(signum, NULL, old) != 0 || old->sa_handler == SIG_IGN) return 0; /* ignored: stays so */
    return sigaction(signum, &sa, NULL) == 0;
}

static void lines_at_exit(void) {
    if (exit_fd < 0 || getpid() != exit_pid) return;
    struct stat st;
    if (fstat(exit_fd, &st) != 0 || st.st_dev != exit_dev || st.st_ino != exit_ino) {
        /* the script closed it at its exit (the number may even be another file's now) */
        if (exit_fallback) write_fd2(exit_fallback, (size_t)exit_fallback_len);
        exit_fd = -1;
        return;
    }
    struct sigaction old_int, old_term;
    int piped = pipe(wake_fd) == 0;
    int caught_int = piped && catch_signal(SIGINT, &old_int);
    int caught_term = piped && catch_signal(SIGTERM, &old_term);
    size_t cap = 8192, len = 0;
    char *buf = malloc(cap);
    int done = 0;
    double deadline = now_ns() / 1e9 + exit_timeout;
    while (buf && !done && !exit_signal) {
        double left = deadline - now_ns() / 1e9;
        if (left <= 0) break;
        struct pollfd pfd[2] = {{exit_fd, POLLIN, 0}, {piped ? wake_fd[0] : -1, POLLIN, 0}};
        int r = poll(pfd, 2, left > 1e6 ? 1000000000 : (int)(left * 1000) + 1);
        if (r < 0 && errno != EINTR) break;
        if (r <= 0) continue; /* EINTR, or woken early: the deadline and the signal decide */
        if (pfd[0].revents & POLLNVAL) break; /* the descriptor is gone */
        if (!(pfd[0].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        if (cap - len < 4096) {
            char *bigger = realloc(buf, cap * 2);
            if (!bigger) break;
            buf = bigger;
            cap *= 2;
        }
        ssize_t got = read(exit_fd, buf + len, cap - len);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break; /* the writer is gone without its lines */
        char *nul = memchr(buf + len, '\0', (size_t)got);
        len += (size_t)got;
        if (nul) {
            len = (size_t)(nul - buf);
            done = 1;
        }
    }
    if (caught_int) sigaction(SIGINT, &old_int, NULL);
    if (caught_term) sigaction(SIGTERM, &old_term, NULL);
    if (done)
        write_fd2(buf, len);
    else if (exit_fallback)
        write_fd2(exit_fallback, (size_t)exit_fallback_len);
    free(buf);
    close(exit_fd);
    exit_fd = -1;
    if (piped) {
        close(wake_fd[0]);
        close(wake_fd[1]);
        wake_fd[0] = wake_fd[1] = -1;
    }
    /* SIGTERM acts as it would have at this moment (SIG_DFL: the process dies of it); a Ctrl-C
       only cut the wait short: the exit code stays the script's */
    if (exit_signal == SIGTERM) raise(SIGTERM);
}

static PyObject *print_at_exit(PyObject *self, PyObject *args) {
    static int registered = 0;
    int fd;
    double timeout;
    Py_buffer fallback;
    PyObject *keep;
    if (!PyArg_ParseTuple(args, "idy*O", &fd, &timeout, &fallback, &keep)) return NULL;
    struct stat st;
    if (exit_fd >= 0 || fstat(fd, &st) != 0) {
        PyBuffer_Release(&fallback);
        if (exit_fd >= 0)
            PyErr_SetString(PyExc_RuntimeError, "print_at_exit: already set for this process");
        else
            PyErr_SetFromErrno(PyExc_OSError);
        return NULL;
    }
    char *copy = malloc(fallback.len ? (size_t)fallback.len : 1);
    if (!copy) {
        PyBuffer_Release(&fallback);
        return PyErr_NoMemory();
    }
    memcpy(copy, fallback.buf, (size_t)fallback.len);
    if (!registered && Py_AtExit(lines_at_exit) < 0) {
        free(copy);
        PyBuffer_Release(&fallback);
        PyErr_SetString(PyExc_RuntimeError, "print_at_exit: Py_AtExit refused");
        return NULL;
    }
    registered = 1;
    free(exit_fallback);
    exit_fallback = copy;
    exit_fallback_len = fallback.len;
    PyBuffer_Release(&fallback);
    Py_INCREF(keep);
    Py_XSETREF(exit_keep, keep); /* never released: see above */
    exit_timeout = timeout;
    exit_pid = getpid();
    exit_dev = st.st_dev;
    exit_ino = st.st_ino;
    exit_fd = fd;
    Py_RETURN_NONE;
}

/* call_around(fn, before, after, failed, *args): before(), then fn(*args), then after() or,
   if fn raised, failed() and fn's exception again. capture/import_hook.py runs its callback
   after a module's body with it (through functools.partial, also C): no Python frame stands
   between importlib and the body, so the body's frames sit where they would without the hook
   (a Python wrapper put JAX's whole import one frame higher: capture/import_hook.py gives the
   counts, fresh_stack_call below the mechanism). What failed() raises is dropped: fn's error
   is the one. */
static PyObject *call_around(PyObject *self, PyObject *args) {
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    if (n < 4) {
        PyErr_SetString(PyExc_TypeError, "call_around(fn, before, after, failed, *args)");
        return NULL;
    }
    PyObject *rest = PyTuple_GetSlice(args, 4, n);
    if (!rest) return NULL;
    PyObject *r = PyObject_CallNoArgs(PyTuple_GET_ITEM(args, 1));
    if (!r) {
        Py_DECREF(rest);
        return NULL;
    }
    Py_DECREF(r);
    PyObject *res = PyObject_Call(PyTuple_GET_ITEM(args, 0), rest, NULL);
    Py_DECREF(rest);
    if (!res) {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        r = PyObject_CallNoArgs(PyTuple_GET_ITEM(args, 3));
        if (r) Py_DECREF(r); else PyErr_Clear();
        PyErr_Restore(et, ev, tb);
        return NULL;
    }
    r = PyObject_CallNoArgs(PyTuple_GET_ITEM(args, 2));
    if (!r) {
        Py_DECREF(res);
        return NULL;
    }
    Py_DECREF(r);
    return res;
}

/* fresh_stack_call(fn, *args): fn(*args) with this thread's frame stack starting where python
   starts a script's, so that the script's calls cross CPython's stack chunks where they would
   under python (issue 29).

   CPython 3.11 keeps a thread's Python frames in 16 KiB chunks and, when the first frame of a
   chunk returns, unmaps that chunk: a call made right at a chunk's end maps a chunk and unmaps
   it again each time. Where that falls depends on the byte depth of the stack below. `python
   script.py` runs the script's frame in the second slot of the thread's first chunk; under
   `jaxplace run` it ran ~12 frames higher, and `import jax` mapped and unmapped a chunk 1,321
   times against python's 327 (strace, this box: invisible here; on a TPU VM's host, where
   munmap is costly, JAX's own import took 0.05-0.08 s longer, bench/README.md round 18).
   Here fn runs on a chunk of its own whose first slot is skipped, as CPython does for a
   thread's first chunk: the script's frames sit where python puts them, and CPython never
   frees this chunk (its first frame starts in slot 1); it is freed here once fn returns, if
   the stack came back to it (a stack left elsewhere keeps it: 16 KiB, never expected).
   The script's bottom frame has no frame under it either, as under python: fn runs with the
   thread's current frame cleared, so its first frame's f_back is None and the runner's frames
   are out of every walk of the stack. A warning whose stacklevel reaches past the script is
   python's `sys:1` (it named jaxplace's runner.py), `traceback.print_stack()` and
   `inspect.stack()` at the top of the script print what python prints, and every stack the
   recorder walks ends at the script. The levels of recursion the runner's frames use are
   given back too: a recursive function goes as deep as under python.

   And a `sys.exit((5,))` ends as under python: CPython 3.11's sys.exit sets the tuple as the
   exception's raw value, which python's exit reads as the code itself (it prints "(5,)" and
   exits 1) while `except SystemExit` would first make it SystemExit(5), code 5: here a tuple
   value becomes a SystemExit whose code is that tuple before anything catches it.
   CPython 3.11 only (the layout is read from its headers, checked on it); other versions
   call fn(*args) as it is. */
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
#define FRESH_STACK_CHUNK (16 * 1024) /* pystate.c's DATA_STACK_CHUNK_SIZE */
#define RUNNER_ROOM 200 /* levels of recursion the runner may need once the script returned */

/* fn(*rest) as the bottom of the thread's frames (f_back None), with python's recursion
   budget, and python's code for a sys.exit(tuple) (see above) */
static PyObject *bottom_call(PyThreadState *ts, PyObject *fn, PyObject *rest) {
    _PyCFrame *cf = ts->cframe;
    struct _PyInterpreterFrame *below = cf->current_frame;
    /* the levels the frames under the script use, given back: python starts a script's code
       with none used, its module frame at limit - 1 (a recursive function stopped 16 calls
       early) */
    int boost = ts->recursion_limit - ts->recursion_remaining;
    if (boost < 0) boost = 0;
    /* exec(code, globals) evaluated as python runs a script's code: no call level of its own
       and no "exec" audit event */
    PyObject *builtins = PyEval_GetBuiltins();
    PyObject *exec = builtins ? PyDict_GetItemString(builtins, "exec") : NULL;
    int direct = fn == exec && PyTuple_GET_SIZE(rest) == 2 && PyCode_Check(PyTuple_GET_ITEM(rest, 0)) &&
                 PyDict_Check(PyTuple_GET_ITEM(rest, 1));
    cf->current_frame = NULL;
    ts->recursion_remaining += boost;
    PyObject *r = direct ? PyEval_EvalCode(PyTuple_GET_ITEM(rest, 0), PyTuple_GET_ITEM(rest, 1), PyTuple_GET_ITEM(rest, 1))
                         : PyObject_Call(fn, rest, NULL);
    ts->recursion_remaining -= boost;
    /* a limit the script set below what the runner needs after it (sys.setrecursionlimit(10))
       is raised for this thread alone, the depth kept: the runner saves the run and reports the
       script's ending as it would have (it died of RecursionError, the run left `running`);
       sys.getrecursionlimit() still says the script's limit */
    if (ts->recursion_remaining < RUNNER_ROOM) {
        int add = RUNNER_ROOM - ts->recursion_remaining;
        ts->recursion_remaining += add;
        ts->recursion_limit += add;
    }
    cf->current_frame = below;
    if (!r && PyErr_Occurred() == PyExc_SystemExit) {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        if (ev && PyTuple_Check(ev)) { /* raw, as sys.exit left it: python's code is the tuple */
            PyObject *exc = PyObject_CallOneArg(PyExc_SystemExit, ev);
            if (exc) {
                Py_SETREF(ev, exc);
            } else {
                PyErr_Clear();
            }
        }
        PyErr_Restore(et, ev, tb);
    }
    return r;
}
static PyObject *fresh_stack_call(PyObject *self, PyObject *args) {
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    if (n < 1) {
        PyErr_SetString(PyExc_TypeError, "fresh_stack_call(fn, *args) needs fn");
        return NULL;
    }
    PyObject *fn = PyTuple_GET_ITEM(args, 0);
    PyObject *rest = PyTuple_GetSlice(args, 1, n);
    if (!rest) return NULL;
    PyThreadState *ts = PyThreadState_Get();
    _PyStackChunk *old = ts->datastack_chunk;
    PyObjectArenaAllocator arena;
    PyObject_GetArenaAllocator(&arena);
    _PyStackChunk *fresh = (old && ts->datastack_top && arena.alloc) ? arena.alloc(arena.ctx, FRESH_STACK_CHUNK) : NULL;
    if (!fresh) { /* nothing to stand on (or no memory): the call as it is */
        PyObject *r = bottom_call(ts, fn, rest);
        Py_DECREF(rest);
        return r;
    }
    PyObject **top = ts->datastack_top, **limit = ts->datastack_limit;
    old->top = (size_t)(top - &old->data[0]); /* as push_chunk records it */
    fresh->previous = old;
    fresh->size = FRESH_STACK_CHUNK;
    fresh->top = 0;
    ts->datastack_chunk = fresh;
    ts->datastack_top = &fresh->data[1];
    ts->datastack_limit = (PyObject **)((char *)fresh + FRESH_STACK_CHUNK);
    PyObject *r = bottom_call(ts, fn, rest);
    Py_DECREF(rest);
    if (ts == PyThreadState_Get() && ts->datastack_chunk == fresh && ts->datastack_top == &fresh->data[1]) {
        ts->datastack_chunk = old;
        ts->datastack_top = top;
        ts->datastack_limit = limit;
        arena.free(arena.ctx, fresh, FRESH_STACK_CHUNK);
    }
    return r;
}

/* stack_position(): (chunks, slot) of this thread's frame stack: how many chunks it spans and
   the slot of its top in the last one. A test's reading of where the calling frame sits. */
static PyObject *stack_position(PyObject *self, PyObject *unused) {
    PyThreadState *ts = PyThreadState_Get();
    Py_ssize_t chunks = 0;
    for (_PyStackChunk *c = ts->datastack_chunk; c; c = c->previous) chunks++;
    Py_ssize_t slot = ts->datastack_chunk ? (Py_ssize_t)(ts->datastack_top - &ts->datastack_chunk->data[0]) : -1;
    return Py_BuildValue("nn", chunks, slot);
}
#define FRESH_STACK_METHODS                                                                        \
    {"fresh_stack_call", fresh_stack_call, METH_VARARGS,                                            \
     "fresh_stack_call(fn, *args): fn(*args) with the frames where python starts a script's"},     \
    {"stack_position", stack_position, METH_NOARGS,                                                 \
     "stack_position(): (chunks, slot) of this thread's frame stack (CPython 3.11)"},
#else
#define FRESH_STACK_METHODS
#endif

/* inner_legs(hosts, out): legs.record_inner in C for its common case -- an inner dispatch of the op
   in flight (tls.op) whose host arguments are exact Python scalars and whose result is one array
   on one device: `jnp.where(c, x, 0.0)`'s 0.0, passed on to util._where. The same rows as
   legs._op_legs makes (one implicit h2d leg each onto the result's device, the op's label and
   site, Recorder.with_stack's stack node), without its five Python frames: ~10 us of the call's
   +28 here (bench/README.md, round 20). False where another case (NumPy data, a sharded result,
   any other value): the Python makes them. A failure once rows are being made is the
   recording's (rec.recording_failed), as in the Python. */
static PyObject *inner_legs(PyObject *mod, PyObject *const *argv, Py_ssize_t argc) {
    if (argc != 2 || !PyTuple_Check(argv[0])) {
        PyErr_SetString(PyExc_TypeError, "inner_legs(hosts: tuple, out)");
        return NULL;
    }
    PyObject *hosts = argv[0], *out = argv[1];
    Py_ssize_t nh = PyTuple_GET_SIZE(hosts);
    if (!G.ready || !G.suffix || nh == 0 || Py_TYPE(out) != (PyTypeObject *)G.array_type) Py_RETURN_FALSE;
    for (Py_ssize_t i = 0; i < nh; i++) {
        PyObject *a = PyTuple_GET_ITEM(hosts, i);
        if (!PyFloat_CheckExact(a) && !PyLong_CheckExact(a) && !PyBool_Check(a) && !PyComplex_CheckExact(a))
            Py_RETURN_FALSE;
    }
    PyObject *sh = PyObject_GetAttr(out, G.sharding_attr);
    PyObject *d = sh ? PyObject_GetAttr(sh, S_device) : NULL;
    Py_XDECREF(sh);
    if (!d) {
        PyErr_Clear();
        Py_RETURN_FALSE; /* not one device (a NamedSharding): legs.destinations */
    }
    int one = d != Py_None;
    Py_DECREF(d);
    if (!one) Py_RETURN_FALSE;
    TState *ts = tstate();
    if (!ts) return NULL;
    PyObject *rec = field(G.active, K_ACTIVE, A_REC);
    if (!rec) return NULL;
    if (rec == Py_None || !ts->op || !PyTuple_Check(ts->op) || PyTuple_GET_SIZE(ts->op) < 6) {
        Py_DECREF(rec);
        Py_RETURN_TRUE; /* nothing in flight: legs._op_legs records nothing either */
    }
    PyObject *op = Py_NewRef(ts->op);
    PyObject *dev = NULL, *api = NULL, *seqs = NULL, *transfers = NULL, *on_transfer = NULL, *t0 = NULL;
    PyObject *table = NULL, *x64 = NULL, *t = NULL, *tid = NULL, *frame = NULL;
    PyObject *name = PyTuple_GET_ITEM(op, 5), *seq = PyTuple_GET_ITEM(op, 1), *site = PyTuple_GET_ITEM(op, 2);
    int ok = -1;
    if (!(dev = device_of(out))) goto done;
    if (!API_MEMO && !(API_MEMO = PyDict_New())) goto done;
    if ((api = PyDict_GetItemWithError(API_MEMO, name))) { /* suffix(name, a): the same for every Python scalar */
        Py_INCREF(api);
    } else {
        if (PyErr_Occurred() || !(api = PyObject_CallFunctionObjArgs(G.suffix, name, PyTuple_GET_ITEM(hosts, 0), NULL)) ||
            PyDict_SetItem(API_MEMO, name, api) < 0)
            goto done;
    }
    if (!(seqs = field(rec, K_REC, R_SEQS)) || !(transfers = field(rec, K_REC, R_TRANSFERS)) ||
        !(on_transfer = field(rec, K_REC, R_ON_TRANSFER)) || !(t0 = field(rec, K_REC, R_T0)))
        goto done;
    long long base = PyLong_AsLongLong(t0);
    if (base == -1 && PyErr_Occurred()) goto done;
    x64 = G.x64_now != Py_None ? PyObject_GetAttr(G.x64_now, S_value) : PyObject_CallNoArgs(G.x64_enabled);
    int on = x64 ? PyObject_IsTrue(x64) : -1;
    if (on < 0 || !(table = PySequence_GetItem(G.scalar_bytes, on))) goto done;
    if (!(t = PyLong_FromLongLong(now_ns() - base)) || !(tid = PyLong_FromUnsignedLong(PyThread_get_thread_ident())))
        goto done;
    PyFrameObject *f = PyEval_GetFrame(); /* borrowed: the stack walk starts at the innermost Python frame */
    frame = f ? Py_NewRef((PyObject *)f) : Py_NewRef(Py_None);
    ok = 0;
    for (Py_ssize_t i = 0; i < nh && ok == 0; i++) {
        PyObject *a = PyTuple_GET_ITEM(hosts, i);
        PyObject *nb = PyObject_GetItem(table, (PyObject *)Py_TYPE(a));
        PyObject *s = nb ? PyIter_Next(seqs) : NULL;
        PyObject *ev = s ? PyTuple_Pack(13, s, t, tid, G.h2d, G.host, dev, nb, Py_True, Py_False, api, site, ZERO, seq)
                         : NULL;
        PyObject *row = ev ? PyObject_CallMethodObjArgs(rec, S_with_stack, ev, frame, NULL) : NULL;
        if (!row || append_steal(transfers, Py_NewRef(row_(row))) < 0) {
            ok = -1;
        } else if (on_transfer != Py_None) {
            PyObject *r = PyObject_CallOneArg(on_transfer, row);
            ok = r ? 0 : -1;
            Py_XDECREF(r);
        }
        Py_XDECREF(row);
        Py_XDECREF(ev);
        Py_XDECREF(s);
        Py_XDECREF(nb);
    }
done:
    if (ok < 0 && PyErr_ExceptionMatches(PyExc_Exception)) { /* the recording's failure, never the user's call's */
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        PyErr_NormalizeException(&et, &ev, &tb);
        PyObject *r = ev ? PyObject_CallMethodObjArgs(rec, S_recording_failed, ev, NULL) : NULL;
        Py_XDECREF(r);
        Py_XDECREF(et);
        Py_XDECREF(ev);
        Py_XDECREF(tb);
        if (!r) PyErr_Clear();
        ok = 0;
    }
    Py_XDECREF(frame);
    Py_XDECREF(tid);
    Py_XDECREF(t);
    Py_XDECREF(table);
    Py_XDECREF(x64);
    Py_XDECREF(t0);
    Py_XDECREF(on_transfer);
    Py_XDECREF(transfers);
    Py_XDECREF(seqs);
    Py_XDECREF(api);
    Py_XDECREF(dev);
    Py_DECREF(op);
    Py_DECREF(rec);
    if (ok < 0) return NULL;
    Py_RETURN_TRUE;
}

static PyMethodDef methods[] = {
    {"peek_seq", peek_seq, METH_O, "peek_seq(count): the value next(count) would give, not drawn"},
    {"thread_state", thread_state, METH_NOARGS, "thread_state(): the hooks' per-thread state (state.py tls)"},
    {"main_depth", main_depth, METH_NOARGS, "main_depth(): the main thread's tls.depth, from any thread"},
    {"configure", (PyCFunction)(void (*)(void))configure, METH_VARARGS | METH_KEYWORDS,
     "configure(**objects): the Python objects record_call reads (dispatch.py calls it once)."},
    {"inner_legs", (PyCFunction)(void (*)(void))inner_legs, METH_FASTCALL,
     "inner_legs(hosts, out) -> bool: legs.record_inner in C where the hosts are Python scalars and out one device's"},
    {"record_call", (PyCFunction)(void (*)(void))record_call, METH_FASTCALL | METH_KEYWORDS,
     "record_call(spec, fn, args, kwargs, backward=False): dispatch.record_call in C."},
    {"print_at_exit", print_at_exit, METH_VARARGS,
     "print_at_exit(fd, timeout, fallback, keep): the writer's lines on fd 2 after the interpreter's teardown"},
    {"call_around", call_around, METH_VARARGS,
     "call_around(fn, before, after, failed, *args): fn(*args) between callbacks, no Python frame around it"},
    FRESH_STACK_METHODS
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "_native",
                                    "jaxplace's native capture hot path (issue 18).", -1, methods};

#define INTERN(var, text)                                                                          \
    if (!(var = PyUnicode_InternFromString(text))) return NULL

PyMODINIT_FUNC PyInit__native(void) {
    count_check();
    INTERN(S_rec, "rec");
    INTERN(S_placing, "placing");
    INTERN(S_depth, "depth");
    INTERN(S_op, "op");
    INTERN(S_seqs, "seqs");
    INTERN(S_buf_ids, "buf_ids");
    INTERN(S_ops, "ops");
    INTERN(S_transfers, "transfers");
    INTERN(S_buffers, "buffers");
    INTERN(S_tail, "tail");
    INTERN(S_jit, "jit"); /* model/events.py OP_JIT */
    INTERN(S_t0, "t0");
    INTERN(S_site_cache, "site_of");
    INTERN(S_stack_of, "stack_of");
    INTERN(S_with_stack, "with_stack");
    INTERN(S_on_transfer, "on_transfer");
    INTERN(S_on_dispatch, "on_dispatch");
    INTERN(S_append, "append");
    INTERN(S_sharding, "sharding");
    INTERN(S_value, "value");
    INTERN(S_device, "_device");
    INTERN(S_dict, "__dict__");
    INTERN(S_aval, "aval");
    INTERN(S_shape, "shape");
    INTERN(S_dtype, "dtype");
    INTERN(S_committed, "_committed");
    INTERN(S_name, "name");
    INTERN(S_api, "api");
    INTERN(S_kind, "kind");
    INTERN(S_scalar_api, "scalar_api");
    INTERN(S_scalars, "scalars");
    INTERN(S_flatten, "flatten");
    INTERN(S_host_data, "host_data");
    INTERN(S_index, "index");
    INTERN(S_static_argnums, "static_argnums");
    INTERN(S_static_argnames, "static_argnames");
    INTERN(S_buffer_id, "buffer_id");
    INTERN(S_track, "track");
    INTERN(S_mem_state, "mem_state");
    INTERN(S_backlog_wait, "wait_for_writer");
    INTERN(S_limit, "backlog_limit");
    INTERN(S_recording_failed, "recording_failed");
    INTERN(S_foreign, "foreign");
    INTERN(S_jax_array, "__jax_array__");
    INTERN(S_tstate_key, TSTATE_CAPSULE);
    if (!(G.empty = PyUnicode_InternFromString(""))) return NULL;
    if (!(ZERO = PyLong_FromLong(0)) || !(ONE = PyLong_FromLong(1))) return NULL;
    if (!(G.uncommitted = PyUnicode_InternFromString(" (uncommitted input)"))) return NULL;
    if (PyType_Ready(&SiteCacheType) < 0 || PyType_Ready(&WatchType) < 0 || PyType_Ready(&WatchCoreType) < 0 ||
        PyType_Ready(&ThreadStateType) < 0)
        return NULL;
    if (!THREAD_STATE && !(THREAD_STATE = PyType_GenericAlloc(&ThreadStateType, 0))) return NULL;
    PyObject *threading = PyImport_ImportModule("threading"); /* the main thread's ident, wherever we are imported */
    PyObject *mt = threading ? PyObject_CallMethod(threading, "main_thread", NULL) : NULL;
    PyObject *ident = mt ? PyObject_GetAttrString(mt, "ident") : NULL;
    Py_XDECREF(threading);
    Py_XDECREF(mt);
    if (!ident) return NULL;
    MAIN_IDENT = PyLong_AsUnsignedLong(ident);
    Py_DECREF(ident);
    if (PyErr_Occurred()) return NULL;
    PyObject *m = PyModule_Create(&moddef);
    if (!m) return NULL;
    if (PyModule_AddObjectRef(m, "SiteCache", (PyObject *)&SiteCacheType) < 0 ||
        PyModule_AddObjectRef(m, "WatchCore", (PyObject *)&WatchCoreType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
