/* The Array operator and method hooks as a C callable (issue 29 item 1).

   capture/jaxhooks/dispatch.py's `wrap` is a Python function around each hooked entry point:
   every `x + 1.0` entered it (a Python frame, a try block, three attribute reads) before the
   native record_call (capture/_native.c) ran. `Wrapper` does the same decisions in C:

     not recording, or JAX is tracing   -> fn(*args, **kwargs), untouched
     inside a recorded op that counted  -> fn(*args, **kwargs) (tls.depth 2: what
       its own host operands               legs.inner_call would do, without its frame)
     inside another recorded op         -> for a jitted fn, its host arguments are that op's
                                           legs (inner_dispatch): none (host_scan) -> fn(...);
                                           Python scalars only -> inner_scalars; else
                                           legs.inner_call(fn, args, kwargs, *static). Any other
                                           fn -> fn(...)
     otherwise                          -> record_call(spec, fn, args, kwargs)

   With a `hook` (jax.numpy.ufunc.__call__, whose spec depends on the ufunc), the last two
   cases call the Python hook instead: C only passes through what needs no decision.

   `record_call` is whatever dispatch.py hands over: the native entry point (then a recorded op
   never enters Python in the common case) or python_record_call. An exception leaves with
   jaxplace's own frames dropped (frames.drop_own), and this callable adds none: it has no
   Python frame. It is a method descriptor (binds like a function: Py_TPFLAGS_METHOD_DESCRIPTOR
   lets CPython call it unbound for `x + y` and `x.sum()`), keeps a __dict__ (functools.wraps
   fills __wrapped__, __name__, __qualname__, __doc__, __module__) and pickles by reference
   (__reduce__ gives its qualified name, as a function does). dispatch.wrap also puts it around
   jitted jax.numpy functions (jnp.sin: a PjitFunction binds as a function does), and a
   `PlainWrapper` -- the same without the binding -- around callables that do not bind
   (jax.nn.relu, a custom_jvp: kept as a class attribute it is called as it is).

   `JitFunction` is the same callable for what `jax.jit` returns under the hooks (jit.py
   `jit_function`, for a function that donates nothing): the Python class's `__call__` cost
   ~17,500 instructions a call before the native record_call ran (callgrind, P6's 33-argument
   jit call; bench/README.md round 16). It differs from `Wrapper` only where a jitted function
   is not a jax entry point: it pickles, copies and `__getstate__`s as the jitted function does
   (common.JitProxy: `_unwrapped(fn)`), and its type is named `JitFunction`.

   `InnerJit` is legs.InnerPjit in C: a jitted helper of jax._src (reductions._reduce_sum,
   util._where...) that adds its host arguments' legs to the op in flight. It differs from
   `JitFunction` only in its call (inner_vectorcall, below).

   Optional like the other extensions: without it dispatch.py keeps the Python wrapper.
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>

static struct {
    PyObject *active, *tls, *trace_now, *eval_trace, *inner_call, *drop_own;
    PyObject *unwrapped; /* common._unwrapped: a JitFunction pickles as the jitted function */
    PyTypeObject *array, *ndarray, *generic; /* ArrayImpl, np.ndarray, np.generic: host_scan */
    PyObject *inner_legs, *record_inner; /* _native.inner_legs, legs.record_inner: inner_scalars */
    int ready;
} G;

static PyObject *S_rec, *S_value, *S_depth, *S_op, *S_inner, *S_qualname, *S_getstate;

typedef struct {
    PyObject_HEAD
    PyObject *fn, *spec, *call, *static_; /* static_: (static_argnums, static_argnames) or None */
    PyObject *hook; /* not None: a Python hook that decides every call the checks do not pass through */
    PyObject *dict, *weaklist;
    vectorcallfunc vectorcall;
} Wrapper;

/* The user's call failed (or the checks did): its exception without jaxplace's frames. */
static void drop_own(void) {
    if (!G.drop_own || !PyErr_ExceptionMatches(PyExc_Exception)) return;
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyErr_NormalizeException(&et, &ev, &tb);
    if (tb && ev) PyException_SetTraceback(ev, tb);
    PyObject *r = ev ? PyObject_CallOneArg(G.drop_own, ev) : NULL;
    if (!r) PyErr_Clear(); /* never masks the user's exception */
    Py_XDECREF(r);
    if (ev) {
        PyObject *ntb = PyException_GetTraceback(ev);
        Py_XDECREF(tb);
        tb = ntb;
    }
    PyErr_Restore(et, ev, tb);
}

static PyObject *args_tuple(PyObject *const *args, Py_ssize_t n) {
    PyObject *t = PyTuple_New(n);
    if (!t) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) PyTuple_SET_ITEM(t, i, Py_NewRef(args[i]));
    return t;
}

static PyObject *kwargs_dict(PyObject *const *args, Py_ssize_t n, PyObject *kwnames) {
    PyObject *d = PyDict_New();
    if (!d || !kwnames) return d;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); i++)
        if (PyDict_SetItem(d, PyTuple_GET_ITEM(kwnames, i), args[n + i]) < 0) {
            Py_DECREF(d);
            return NULL;
        }
    return d;
}

/* An inner dispatch's host values, as legs.host_args finds them: NONE when it would surely find
   none (legs.inner_call would only forward: the call needs no Python frame), SCALARS when they
   are all positional exact Python scalars (*hosts: a new tuple of them, for inner_scalars), and
   PYTHON for anything else (legs.inner_call decides). Mirrors host_args: a static position or
   name, an ArrayImpl and None hold none; a Python scalar or NumPy data is one; an exact list,
   tuple or dict is walked by the Python; any other positional value is not walked (host_args
   does not either), any other keyword value is, unless inert by its type (a str, a class); a
   keyword host value goes to the Python (its legs come in name order). jnp.sum's inner
   _reduce_sum (keywords, all static or None) went through legs.inner_call on every x.sum(): ~+13
   us an op (bench/README.md, round 20). Errors are the Python's to meet: PYTHON, none set. */
enum { NONE, SCALARS, PYTHON };

static int is_host(PyObject *a) {
    return PyLong_Check(a) || PyFloat_Check(a) || PyComplex_Check(a) ||
           (G.ndarray && (PyObject_TypeCheck(a, G.ndarray) || PyObject_TypeCheck(a, G.generic)));
}

static int py_scalar(PyObject *a) {
    return PyFloat_CheckExact(a) || PyLong_CheckExact(a) || PyBool_Check(a) || PyComplex_CheckExact(a);
}

static int static_pos(PyObject *nums, Py_ssize_t i, Py_ssize_t n) { /* -1: cannot tell */
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(nums); k++) {
        Py_ssize_t v = PyNumber_AsSsize_t(PyTuple_GET_ITEM(nums, k), NULL);
        if (v == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return -1;
        }
        if (v == i || (v < 0 && v + n == i)) return 1; /* state.static_positions: -2, second from the end */
    }
    return 0;
}

static int host_scan(PyObject *static_, PyObject *const *args, Py_ssize_t n, PyObject *kwnames, PyObject **hosts) {
    *hosts = NULL;
    if (!G.array || !PyTuple_Check(static_) || !PyTuple_Check(PyTuple_GET_ITEM(static_, 0)) ||
        !PyTuple_Check(PyTuple_GET_ITEM(static_, 1)))
        return PYTHON;
    PyObject *nums = PyTuple_GET_ITEM(static_, 0), *names = PyTuple_GET_ITEM(static_, 1);
    Py_ssize_t nk = kwnames ? PyTuple_GET_SIZE(kwnames) : 0, nh = 0;
    for (Py_ssize_t k = 0; k < nk; k++) {
        PyObject *v = args[n + k];
        if (v == Py_None || Py_TYPE(v) == G.array || PyUnicode_CheckExact(v) || PyType_Check(v)) continue;
        int st = PySequence_Contains(names, PyTuple_GET_ITEM(kwnames, k));
        if (st <= 0) {
            PyErr_Clear();
            return PYTHON; /* a scalar, NumPy data or a pytree */
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *a = args[i];
        PyTypeObject *t = Py_TYPE(a);
        if (t == G.array || a == Py_None) continue;
        int st = static_pos(nums, i, n);
        if (st > 0) continue;
        if (st < 0 || t == &PyList_Type || t == &PyTuple_Type || t == &PyDict_Type || (is_host(a) && !py_scalar(a))) {
            Py_CLEAR(*hosts);
            return PYTHON;
        }
        if (!is_host(a)) continue;
        if (!*hosts && !(*hosts = PyTuple_New(n))) {
            PyErr_Clear();
            return PYTHON;
        }
        PyTuple_SET_ITEM(*hosts, nh++, Py_NewRef(a));
    }
    if (!*hosts) return NONE;
    if (_PyTuple_Resize(hosts, nh) < 0) { /* frees the tuple and sets *hosts NULL on failure */
        PyErr_Clear();
        return PYTHON;
    }
    return SCALARS;
}

/* legs.inner_call in C for host_scan's SCALARS (`util._where(c, x, 0.0)`): tls.inner set around
   the call as inner_call sets it, and the legs made by _native.inner_legs, or legs.record_inner
   where that declines. The Python frames of inner_call and record_inner cost ~17 us of
   jnp.where(c, x, 0.0)'s +28 (bench/README.md, round 20). Steals hosts. */
static PyObject *inner_scalars(Wrapper *w, PyObject *const *args, size_t nargsf, PyObject *kwnames, PyObject *hosts) {
    PyObject *before = PyObject_GetAttr(G.tls, S_inner);
    if (!before || PyObject_SetAttr(G.tls, S_inner, Py_True) < 0) { /* never: the call runs, unrecorded */
        PyErr_Clear();
        Py_XDECREF(before);
        Py_DECREF(hosts);
        return PyObject_Vectorcall(w->fn, args, nargsf, kwnames);
    }
    PyObject *res = PyObject_Vectorcall(w->fn, args, nargsf, kwnames);
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    if (PyObject_SetAttr(G.tls, S_inner, before) < 0) PyErr_Clear();
    PyErr_Restore(et, ev, tb);
    Py_DECREF(before);
    if (res) {
        PyObject *trace = PyObject_GetAttr(G.trace_now, S_value); /* traced: inner_call records nothing */
        if (trace && (PyObject *)Py_TYPE(trace) == G.eval_trace) {
            PyObject *argv[2] = {hosts, res};
            PyObject *r = PyObject_Vectorcall(G.inner_legs, argv, 2, NULL);
            if (r == Py_False) {
                Py_SETREF(r, PyObject_Vectorcall(G.record_inner, argv, 2, NULL));
            }
            Py_XDECREF(r);
        }
        Py_XDECREF(trace);
        /* recording never breaks the user's call (both record their own failures); a
           KeyboardInterrupt or SystemExit meanwhile is the user's, as under legs.record_inner */
        if (PyErr_Occurred() && PyErr_ExceptionMatches(PyExc_Exception)) PyErr_Clear();
        if (PyErr_Occurred()) Py_CLEAR(res);
    }
    Py_DECREF(hosts);
    return res;
}

/* An inner dispatch of a jitted fn inside a recorded op (tls.depth 1): straight through, its
   scalars' legs in C, or legs.inner_call(fn, args, kwargs, *static). */
static PyObject *inner_dispatch(Wrapper *w, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    PyObject *hosts, *res = NULL;
    int k = host_scan(w->static_, args, n, kwnames, &hosts);
    if (k == NONE) return PyObject_Vectorcall(w->fn, args, nargsf, kwnames);
    if (k == SCALARS && G.inner_legs && G.record_inner) return inner_scalars(w, args, nargsf, kwnames, hosts);
    Py_XDECREF(hosts);
    PyObject *t = args_tuple(args, n);
    PyObject *kw = t ? kwargs_dict(args, n, kwnames) : NULL;
    if (kw) {
        PyObject *argv[5] = {w->fn, t, kw, PyTuple_GET_ITEM(w->static_, 0), PyTuple_GET_ITEM(w->static_, 1)};
        res = PyObject_Vectorcall(G.inner_call, argv, 5, NULL);
    }
    Py_XDECREF(t);
    Py_XDECREF(kw);
    return res;
}

/* -1 error, 0 pass straight through, 1 inside an op that counts its inner dispatches' host
   arguments (tls.depth 1), 2 inside one that counted them itself (tls.depth 2: legs.inner_call
   would only forward), 3 record */
static int mode(void) {
    PyObject *rec = PyObject_GetAttr(G.active, S_rec);
    if (!rec) return -1;
    int off = rec == Py_None;
    Py_DECREF(rec);
    if (off) return 0;
    PyObject *trace = PyObject_GetAttr(G.trace_now, S_value); /* JAX's current trace (common._trace_now) */
    if (!trace) return -1;
    off = (PyObject *)Py_TYPE(trace) != G.eval_trace;
    Py_DECREF(trace);
    if (off) return 0;
    PyObject *depth = PyObject_GetAttr(G.tls, S_depth);
    if (!depth) return -1;
    long d = PyLong_Check(depth) ? PyLong_AsLong(depth) : PyObject_IsTrue(depth);
    Py_DECREF(depth);
    if (d == -1 && PyErr_Occurred()) return -1;
    return d == 0 ? 3 : d == 2 ? 2 : 1;
}

static PyObject *wrapper_vectorcall(Wrapper *w, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    int m = G.ready ? mode() : 0;
    PyObject *res = NULL;
    if (m == 0 || m == 2 || (m == 1 && w->static_ == Py_None && w->hook == Py_None)) {
        res = PyObject_Vectorcall(w->fn, args, nargsf, kwnames);
    } else if (m > 0 && w->hook != Py_None) {
        res = PyObject_Vectorcall(w->hook, args, nargsf, kwnames);
    } else if (m == 1) {
        res = inner_dispatch(w, args, nargsf, kwnames);
    } else if (m > 0) {
        PyObject *t = args_tuple(args, n);
        PyObject *kw = t ? kwargs_dict(args, n, kwnames) : NULL;
        if (kw) {
            PyObject *argv[4] = {w->spec, w->fn, t, kw};
            res = PyObject_Vectorcall(w->call, argv, 4, NULL);
        }
        Py_XDECREF(t);
        Py_XDECREF(kw);
    }
    if (!res) drop_own();
    return res;
}

/* InnerJit: legs.InnerPjit in C, a jitted function of jax._src (reductions._reduce_sum,
   util._where...) seen from inside a recorded eager op. Its Python __call__ ran on every inner
   dispatch: `if tls.depth and tls.op is not None and active.rec is not None:
   inner_call(fn, args, kwargs, *static)` else fn(*args, **kwargs). The same decisions here,
   and inner_call only where host_scan leaves them to the Python (inner_dispatch). */
static PyTypeObject InnerType;

static PyObject *inner_vectorcall(Wrapper *w, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    int go = 0;
    if (G.ready) {
        PyObject *rec = PyObject_GetAttr(G.active, S_rec);
        if (!rec) return NULL;
        int on = rec != Py_None;
        Py_DECREF(rec);
        if (on) {
            PyObject *depth = PyObject_GetAttr(G.tls, S_depth);
            if (!depth) return NULL;
            long d = PyLong_Check(depth) ? PyLong_AsLong(depth) : PyObject_IsTrue(depth);
            Py_DECREF(depth);
            if (d == -1 && PyErr_Occurred()) return NULL;
            if (d != 0 && d != 2) { /* 2: the op counted its own host operands (inner_call forwards) */
                PyObject *op = PyObject_GetAttr(G.tls, S_op);
                if (!op) return NULL;
                go = op != Py_None;
                Py_DECREF(op);
            }
        }
    }
    if (!go) return PyObject_Vectorcall(w->fn, args, nargsf, kwnames);
    PyObject *res = inner_dispatch(w, args, nargsf, kwnames);
    if (!res) drop_own();
    return res;
}

static PyObject *wrapper_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    static char *names[] = {"fn", "spec", "record_call", "static", "hook", NULL};
    PyObject *fn, *spec, *call, *st = Py_None, *hook = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|OO", names, &fn, &spec, &call, &st, &hook)) return NULL;
    if (!PyCallable_Check(fn) || !PyCallable_Check(call) || (hook != Py_None && !PyCallable_Check(hook)) ||
        (st != Py_None && !(PyTuple_Check(st) && PyTuple_GET_SIZE(st) == 2))) {
        PyErr_SetString(PyExc_TypeError, "Wrapper(fn, spec, record_call, static=None|(nums, names), hook=None)");
        return NULL;
    }
    Wrapper *w = (Wrapper *)type->tp_alloc(type, 0);
    if (!w) return NULL;
    w->fn = Py_NewRef(fn);
    w->spec = Py_NewRef(spec);
    w->call = Py_NewRef(call);
    w->static_ = Py_NewRef(st);
    w->hook = Py_NewRef(hook);
    if (type == &InnerType && !(PyTuple_Check(st) && PyTuple_Check(PyTuple_GET_ITEM(st, 0)) &&
                                PyTuple_Check(PyTuple_GET_ITEM(st, 1)))) {
        Py_DECREF(w);
        PyErr_SetString(PyExc_TypeError, "InnerJit(fn, spec, inner_call, static=(nums: tuple, names: tuple))");
        return NULL;
    }
    w->vectorcall = (vectorcallfunc)(type == &InnerType ? inner_vectorcall : wrapper_vectorcall);
    return (PyObject *)w;
}

static int wrapper_traverse(Wrapper *w, visitproc visit, void *arg) {
    Py_VISIT(w->fn);
    Py_VISIT(w->spec);
    Py_VISIT(w->call);
    Py_VISIT(w->static_);
    Py_VISIT(w->hook);
    Py_VISIT(w->dict);
    return 0;
}

static int wrapper_clear(Wrapper *w) {
    Py_CLEAR(w->fn);
    Py_CLEAR(w->spec);
    Py_CLEAR(w->call);
    Py_CLEAR(w->static_);
    Py_CLEAR(w->hook);
    Py_CLEAR(w->dict);
    return 0;
}

static void wrapper_dealloc(Wrapper *w) {
    PyObject_GC_UnTrack(w);
    if (w->weaklist) PyObject_ClearWeakRefs((PyObject *)w);
    wrapper_clear(w);
    Py_TYPE(w)->tp_free((PyObject *)w);
}

/* Binds like a function: Array.__add__ looked up on an array is a bound method. */
static PyObject *wrapper_get(PyObject *self, PyObject *obj, PyObject *type) {
    if (obj == NULL || obj == Py_None) return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

static PyObject *wrapper_repr(Wrapper *w) { return PyObject_Repr(w->fn); }

/* Pickled by reference, as a function is: its qualified name, looked up in its __module__. */
static PyObject *wrapper_reduce(PyObject *self, PyObject *unused) { return PyObject_GetAttr(self, S_qualname); }

/* An attribute the wrapper does not have is the wrapped callable's: jnp.sin.lower(x),
   jax.jit-made functions' eval_shape/trace/clear_cache, a custom_jvp's defjvp -- the wrapped
   object stays usable as what it is (they raised AttributeError on the wrapper). */
static PyObject *wrapper_getattro(Wrapper *w, PyObject *name) {
    PyObject *r = PyObject_GenericGetAttr((PyObject *)w, name);
    if (r || !PyErr_ExceptionMatches(PyExc_AttributeError) || !w->fn) return r;
    PyErr_Clear();
    return PyObject_GetAttr(w->fn, name);
}

static PyObject *wrapper_fn(Wrapper *w, void *c) { return Py_NewRef(w->fn); }
static PyObject *wrapper_spec(Wrapper *w, void *c) { return Py_NewRef(w->spec); }

static PyMethodDef wrapper_methods[] = {
    {"__reduce__", wrapper_reduce, METH_NOARGS, "pickled by reference (its qualified name)"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef wrapper_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {"__jaxplace_fn__", (getter)wrapper_fn, NULL, "the wrapped callable", NULL},
    {"__jaxplace_spec__", (getter)wrapper_spec, NULL, "the CallSpec it records with", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* A JitFunction pickles (and copies) as common.JitProxy does: `_unwrapped(fn)`, the jitted function
   itself, which pickles or fails to exactly as under python. */
static PyObject *jit_reduce(Wrapper *w, PyObject *unused) {
    if (!w->fn) { /* cleared by the cyclic GC, seen again from a finalizer */
        PyErr_SetString(PyExc_TypeError, "a cleared JitFunction");
        return NULL;
    }
    if (!G.unwrapped) {
        PyErr_SetString(PyExc_TypeError, "cannot pickle a JitFunction before _wrap.configure()");
        return NULL;
    }
    return Py_BuildValue("(O(O))", G.unwrapped, w->fn);
}

static PyObject *jit_reduce_ex(Wrapper *w, PyObject *protocol) { return jit_reduce(w, NULL); }

static PyObject *jit_getstate(Wrapper *w, PyObject *unused) {
    if (!w->fn) return jit_reduce(w, NULL); /* its error */
    return PyObject_CallMethodNoArgs(w->fn, S_getstate);
}

static PyMethodDef jit_methods[] = {
    {"__reduce__", (PyCFunction)jit_reduce, METH_NOARGS, "pickled as the jitted function it wraps"},
    {"__reduce_ex__", (PyCFunction)jit_reduce_ex, METH_O, "pickled as the jitted function it wraps"},
    {"__getstate__", (PyCFunction)jit_getstate, METH_NOARGS, "the jitted function's own state"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject WrapperType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "jaxplace_cli.capture._wrap.Wrapper",
    .tp_basicsize = sizeof(Wrapper),
    .tp_dealloc = (destructor)wrapper_dealloc,
    .tp_vectorcall_offset = offsetof(Wrapper, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_repr = (reprfunc)wrapper_repr,
    .tp_getattro = (getattrofunc)wrapper_getattro,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL |
                Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "A recording hook around a jax entry point (capture/_wrap.c).",
    .tp_traverse = (traverseproc)wrapper_traverse,
    .tp_clear = (inquiry)wrapper_clear,
    .tp_weaklistoffset = offsetof(Wrapper, weaklist),
    .tp_methods = wrapper_methods,
    .tp_getset = wrapper_getset,
    .tp_descr_get = wrapper_get,
    .tp_dictoffset = offsetof(Wrapper, dict),
    .tp_new = wrapper_new,
};

/* The same hook around a callable that does not bind as a method (jax.nn.relu is a custom_jvp
   object: `class M: act = jax.nn.relu` then `M().act(x)` calls relu(x) under python): made at
   import from WrapperType without the method-descriptor flag and without __get__, so an
   attribute lookup through a class returns it as it is, as it returns the original. */
static PyTypeObject PlainWrapperType;

/* What jax.jit returns under the hooks (the header): WrapperType's slots, its own pickling. */
static PyTypeObject JitType;

static PyObject *configure(PyObject *mod, PyObject *args, PyObject *kw) {
    static char *names[] = {"active", "tls", "trace_now", "eval_trace", "inner_call", "drop_own", "unwrapped",
                            "array_type", "host_types", "inner_legs", "record_inner", NULL};
    PyObject *v[6], *unwrapped = NULL, *array = NULL, *host = NULL, *legs = NULL, *record_inner = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOOO|OOOOO", names, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                                     &unwrapped, &array, &host, &legs, &record_inner))
        return NULL;
    int both = legs && record_inner && legs != Py_None && record_inner != Py_None;
    Py_XSETREF(G.inner_legs, both ? Py_NewRef(legs) : NULL);
    Py_XSETREF(G.record_inner, both ? Py_NewRef(record_inner) : NULL);
    if (!PyType_Check(v[3]) || (array && !PyType_Check(array)) ||
        (host && !(PyTuple_Check(host) && PyTuple_GET_SIZE(host) == 2 && PyType_Check(PyTuple_GET_ITEM(host, 0)) &&
                   PyType_Check(PyTuple_GET_ITEM(host, 1))))) {
        PyErr_SetString(PyExc_TypeError, "configure(): eval_trace and array_type must be types, host_types two types");
        return NULL;
    }
    if (array && host) { /* host_scan decides only with all three (else: the Python decides) */
        PyObject **types[] = {(PyObject **)&G.array, (PyObject **)&G.ndarray, (PyObject **)&G.generic};
        PyObject *vals[] = {array, PyTuple_GET_ITEM(host, 0), PyTuple_GET_ITEM(host, 1)};
        for (int i = 0; i < 3; i++) Py_XSETREF(*types[i], Py_NewRef(vals[i]));
    }
    PyObject **slots[] = {&G.active, &G.tls, &G.trace_now, &G.eval_trace, &G.inner_call, &G.drop_own};
    for (int i = 0; i < 6; i++) Py_XSETREF(*slots[i], Py_NewRef(v[i]));
    if (unwrapped) Py_XSETREF(G.unwrapped, Py_NewRef(unwrapped));
    G.ready = 1;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"configure", (PyCFunction)(void (*)(void))configure, METH_VARARGS | METH_KEYWORDS,
     "configure(active, tls, trace_now, eval_trace, inner_call, drop_own, unwrapped=None, array_type=None, "
     "host_types=None, inner_legs=None, record_inner=None): what every Wrapper reads"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "_wrap",
                                    "jaxplace's Array operator/method hooks in C (issue 29).", -1, methods};

PyMODINIT_FUNC PyInit__wrap(void) {
    if (!(S_rec = PyUnicode_InternFromString("rec")) || !(S_value = PyUnicode_InternFromString("value")) ||
        !(S_depth = PyUnicode_InternFromString("depth")) || !(S_op = PyUnicode_InternFromString("op")) ||
        !(S_inner = PyUnicode_InternFromString("inner")) ||
        !(S_qualname = PyUnicode_InternFromString("__qualname__")) ||
        !(S_getstate = PyUnicode_InternFromString("__getstate__")))
        return NULL;
    if (!(WrapperType.tp_flags & Py_TPFLAGS_READY)) { /* the copy is of the static slots only */
        PlainWrapperType = WrapperType;
        PlainWrapperType.tp_name = "jaxplace_cli.capture._wrap.PlainWrapper";
        PlainWrapperType.tp_doc = "A recording hook around a jax entry point that does not bind (capture/_wrap.c).";
        PlainWrapperType.tp_flags &= ~Py_TPFLAGS_METHOD_DESCRIPTOR;
        PlainWrapperType.tp_descr_get = NULL;
        JitType = WrapperType;
        JitType.tp_name = "jaxplace_cli.capture._wrap.JitFunction";
        JitType.tp_doc = "What jax.jit returns while jaxplace records: records each call, forwards the rest "
                         "(capture/_wrap.c).";
        JitType.tp_methods = jit_methods;
        InnerType = JitType;
        InnerType.tp_name = "jaxplace_cli.capture._wrap.InnerJit";
        InnerType.tp_doc = "A jitted function of jax._src while jaxplace records: adds its host arguments' legs to "
                           "the op in flight (capture/_wrap.c).";
    }
    if (PyType_Ready(&WrapperType) < 0 || PyType_Ready(&PlainWrapperType) < 0 || PyType_Ready(&JitType) < 0 ||
        PyType_Ready(&InnerType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&moddef);
    if (!m) return NULL;
    if (PyModule_AddObjectRef(m, "Wrapper", (PyObject *)&WrapperType) < 0 ||
        PyModule_AddObjectRef(m, "PlainWrapper", (PyObject *)&PlainWrapperType) < 0 ||
        PyModule_AddObjectRef(m, "JitFunction", (PyObject *)&JitType) < 0 ||
        PyModule_AddObjectRef(m, "InnerJit", (PyObject *)&InnerType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
