/* labkit._stampfigures: a stream's per-event figures in one pass of C, to the bit.
 *
 * The common case of what labkit.timing.derive_client_timings and
 * labkit.measurement.lateness.self_check_fields compute from a stream's stamps, once a
 * stream ends: each output event's offset from t_start (ms), the sorted gaps' median, 99th
 * percentile and largest (ITL), and, under kernel stamps, the read lags' median and 99th
 * percentile, and whether any events were read together. The same operations in the same order as the Python (IEEE doubles, no fused
 * multiply-add: built with -ffp-contract=off), so every figure is the same float; whatever
 * falls outside the common case (an input that is not a list, an int beyond 64 bits or
 * 2**53 ns apart, stamps out of order, a read the kernel did not stamp) returns None and the
 * Python runs instead.
 * tests/test_stampfigures.py checks both ways against each other.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>

/* Offsets beyond 2**53 ns would round in the int -> double conversion: left to Python. */
#define EXACT_LIMIT (((int64_t)1) << 53)

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* labkit.timing.percentile of n sorted doubles (n >= 1): pos = (n - 1) * q / 100.0. */
static double pct_double(const double *v, Py_ssize_t n, long q) {
    double pos = (double)((n - 1) * q) / 100.0;
    Py_ssize_t lo = (Py_ssize_t)pos;
    Py_ssize_t hi = lo + 1 < n - 1 ? lo + 1 : n - 1;
    double frac = pos - (double)lo;
    double low = v[lo], high = v[hi];
    return low + (high - low) * frac;
}

/* The same of n sorted ints, each divided by `scale` (only the two it interpolates). */
static double pct_i64_scaled(const int64_t *v, Py_ssize_t n, long q, double scale) {
    double pos = (double)((n - 1) * q) / 100.0;
    Py_ssize_t lo = (Py_ssize_t)pos;
    Py_ssize_t hi = lo + 1 < n - 1 ? lo + 1 : n - 1;
    double frac = pos - (double)lo;
    double low = (double)v[lo] / scale, high = (double)v[hi] / scale;
    return low + (high - low) * frac;
}

/* Each item of a list as int64; 0 on success, 1 when one is no int or beyond 64 bits. */
static int read_i64(PyObject *list, int64_t *out) {
    Py_ssize_t n = PyList_GET_SIZE(list);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(list, i);
        int overflow = 0;
        if (!PyLong_CheckExact(item)) return 1;
        long long v = PyLong_AsLongLongAndOverflow(item, &overflow);
        if (overflow || (v == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return 1;
        }
        out[i] = (int64_t)v;
    }
    return 0;
}

PyDoc_STRVAR(offsets_doc,
"offsets(t_start_ns, output_ns) -> (offsets, itl_p50, itl_p99, itl_max) or None\n\n"
"Each output event's offset from t_start in ms ((t - t_start) / 1e6) and the sorted\n"
"gaps' median, 99th percentile and largest (None each under two events); None: not the\n"
"common case (an empty or non-list input, an int beyond 64 bits or 2**53 ns apart).");

static PyObject *offsets(PyObject *self, PyObject *args) {
    PyObject *t0_obj, *events;
    if (!PyArg_ParseTuple(args, "OO", &t0_obj, &events)) return NULL;
    if (!PyLong_CheckExact(t0_obj) || !PyList_CheckExact(events)) Py_RETURN_NONE;
    Py_ssize_t n = PyList_GET_SIZE(events);
    if (n == 0) Py_RETURN_NONE;
    int overflow = 0;
    long long t0 = PyLong_AsLongLongAndOverflow(t0_obj, &overflow);
    if (overflow || (t0 == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    int64_t *stamps = PyMem_Malloc(sizeof(int64_t) * (size_t)n);
    double *offs = PyMem_Malloc(sizeof(double) * (size_t)n * 2);
    PyObject *result = NULL, *list = NULL;
    if (stamps == NULL || offs == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (read_i64(events, stamps)) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t d;
        if (__builtin_sub_overflow(stamps[i], (int64_t)t0, &d) || d > EXACT_LIMIT ||
            d < -EXACT_LIMIT) {
            result = Py_NewRef(Py_None);
            goto done;
        }
        offs[i] = (double)d / 1000000.0;
    }
    list = PyList_New(n);
    if (list == NULL) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *f = PyFloat_FromDouble(offs[i]);
        if (f == NULL) goto done;
        PyList_SET_ITEM(list, i, f);
    }
    if (n < 2) {
        result = Py_BuildValue("(OOOO)", list, Py_None, Py_None, Py_None);
        goto done;
    }
    double *gaps = offs + n;
    Py_ssize_t m = n - 1;
    for (Py_ssize_t i = 0; i < m; i++) gaps[i] = offs[i + 1] - offs[i];
    qsort(gaps, (size_t)m, sizeof(double), cmp_double);
    result = Py_BuildValue("(Oddd)", list, pct_double(gaps, m, 50), pct_double(gaps, m, 99),
                           gaps[m - 1]);
done:
    Py_XDECREF(list);
    PyMem_Free(stamps);
    PyMem_Free(offs);
    return result;
}

/* `labkit.measurement.lateness.WAKE_SLACK_NS` (tests check the two agree). */
#define WAKE_SLACK_NS 500000
/* `lateness._EXACT_ROUNDING_NS`: below it a lateness rounds to the µs by integers. */
#define EXACT_ROUNDING_NS 1000000000000000LL

/* One window of `windows` (`TimedSelector.window_before`): (entered_or_floor, latest, woke).
 * 1: found; 0: none for this stamp; -1: not the common case (or an error is set). */
static int window_of(PyObject *windows, PyObject *key, int64_t *floor, int64_t *latest,
                     int *woke) {
    PyObject *w = PyDict_GetItemWithError(windows, key);
    if (w == NULL) return PyErr_Occurred() ? -1 : 0;
    if (!PyTuple_CheckExact(w) || PyTuple_GET_SIZE(w) != 3) return -1;
    PyObject *a = PyTuple_GET_ITEM(w, 0), *b = PyTuple_GET_ITEM(w, 1), *c = PyTuple_GET_ITEM(w, 2);
    if (!PyLong_CheckExact(a) || !PyLong_CheckExact(b) || !PyBool_Check(c)) return -1;
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(a, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred())) return -1;
    long long y = PyLong_AsLongLongAndOverflow(b, &overflow);
    if (overflow || (y == -1 && PyErr_Occurred())) return -1;
    *floor = x;
    *latest = y;
    *woke = c == Py_True;
    return 1;
}

/* `lateness._rounded_ms` of one lateness (never negative here): round(v / 1e6, 3). */
static PyObject *rounded_ms(int64_t v) {
    if (v == 0) return PyFloat_FromDouble(0.0);
    if (v % 1000 != 500) return PyFloat_FromDouble((double)((v + 500) / 1000) / 1000.0);
    /* A tie: Python's own round, as the Python does. */
    PyObject *f = PyFloat_FromDouble((double)v / 1e6);
    if (f == NULL) return NULL;
    PyObject *r = PyObject_CallMethod(f, "__round__", "i", 3);
    Py_DECREF(f);
    return r;
}

PyDoc_STRVAR(kernel_self_check_doc,
"kernel_self_check(output_ns, stamps, seen, kernel, windows) -> (lags_ms, late) or None\n\n"
"`lateness.self_check_fields` under kernel stamps, in the common case: stamps in order\n"
"(output_ns and the reads' stamps never decreasing), every read kernel-stamped, the\n"
"columns of one length. lags_ms: the read lags' (seen - stamp of the first read with the\n"
"event's stamp) median and 99th percentile in ms, () when no event's stamp is a read's.\n"
"late: None when no event is late (none read together, or none spread), else the\n"
"lateness's (p50, p99, max, per-event list rounded to the µs, first event's) in ms, each\n"
"event read together with others spread over the loop's window for its read (`windows`)\n"
"as `_kernel_lateness` does. None: not that case (the Python runs).");

static PyObject *kernel_self_check(PyObject *self, PyObject *args) {
    PyObject *events, *stamps_l, *seen_l, *kernel_l, *windows;
    if (!PyArg_ParseTuple(args, "OOOOO", &events, &stamps_l, &seen_l, &kernel_l, &windows))
        return NULL;
    if (!PyList_CheckExact(events) || !PyList_CheckExact(stamps_l) ||
        !PyList_CheckExact(seen_l) || !PyList_CheckExact(kernel_l) || !PyDict_CheckExact(windows))
        Py_RETURN_NONE;
    Py_ssize_t n = PyList_GET_SIZE(events), r = PyList_GET_SIZE(stamps_l);
    if (n == 0 || PyList_GET_SIZE(seen_l) != r) Py_RETURN_NONE;
    Py_ssize_t k_len = PyList_GET_SIZE(kernel_l);
    for (Py_ssize_t i = 0; i < k_len; i++) {
        if (PyList_GET_ITEM(kernel_l, i) != Py_True) Py_RETURN_NONE;
    }
    int64_t *buf = PyMem_Malloc(sizeof(int64_t) * (size_t)(4 * n + 2 * r + 1));
    if (buf == NULL) return PyErr_NoMemory();
    int64_t *out = buf, *st = buf + n, *se = buf + n + r, *lags = buf + n + 2 * r;
    int64_t *late = lags + n, *sorted_late = late + n;
    PyObject *result = NULL, *lags_ms = NULL, *late_obj = NULL, *rounded = NULL;
    if (read_i64(events, out) || read_i64(stamps_l, st) || read_i64(seen_l, se)) goto none;
    int shared = 0;
    for (Py_ssize_t i = 1; i < n; i++) {
        if (out[i] < out[i - 1]) goto none;
        shared |= out[i] == out[i - 1];
    }
    for (Py_ssize_t j = 1; j < r; j++) {
        if (st[j] < st[j - 1]) goto none;
    }
    /* The lags: each event's read is the first read with its stamp (`_read_lags_ns`). */
    Py_ssize_t found = 0;
    for (Py_ssize_t i = 0, j = 0; i < n; i++) {
        while (j < r && st[j] < out[i]) j++;
        if (j < r && st[j] == out[i]) {
            int64_t lag;
            if (__builtin_sub_overflow(se[j], out[i], &lag) || lag > EXACT_LIMIT ||
                lag < -EXACT_LIMIT)
                goto none;
            lags[found++] = lag;
        }
    }
    /* The lateness (`_kernel_lateness`): 0 but for the runs of events read together. */
    int any_late = 0;
    for (Py_ssize_t i = 0; i < n; i++) late[i] = 0;
    for (Py_ssize_t i = 0; shared && i + 1 < n; i++) {
        if (out[i + 1] != out[i] || (i > 0 && out[i - 1] == out[i])) continue;
        int64_t t = out[i];
        Py_ssize_t end = i + 2;
        while (end < n && out[end] == t) end++;
        int64_t k = (int64_t)(end - i);
        int64_t floor_, latest, lo, span, v;
        int woke;
        int got = window_of(windows, PyList_GET_ITEM(events, i), &floor_, &latest, &woke);
        if (got < 0) goto none;
        if (got == 0) continue;
        if (!woke) {
            int64_t before = floor_; /* `_seen_before`: the read before the first with t */
            for (Py_ssize_t j = 1; j < r; j++) {
                if (st[j] == t) {
                    before = se[j - 1];
                    break;
                }
            }
            lo = floor_ > before ? floor_ : before;
        } else {
            int64_t edge;
            if (__builtin_sub_overflow(latest, (int64_t)WAKE_SLACK_NS, &edge)) goto none;
            if (t < edge) {
                lo = floor_;
            } else {
                lo = latest < t ? latest : t;
                if (__builtin_sub_overflow(t, lo, &span)) goto none;
                for (int64_t j = 1; j <= k; j++) {
                    if (__builtin_mul_overflow(span, k - j, &v)) goto none;
                    late[i + j - 1] = v / (k - 1);
                }
                continue;
            }
        }
        lo = lo < t ? lo : t;
        if (__builtin_sub_overflow(t, lo, &span)) goto none;
        for (int64_t j = 1; j <= k; j++) {
            if (__builtin_mul_overflow(j, span, &v)) goto none;
            late[i + j - 1] = span - v / k;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (late[i] >= EXACT_ROUNDING_NS) goto none; /* `_rounded_ms`'s own way: Python */
        any_late |= late[i] != 0;
    }
    if (found == 0) {
        lags_ms = PyTuple_New(0);
    } else {
        qsort(lags, (size_t)found, sizeof(int64_t), cmp_i64);
        lags_ms = Py_BuildValue("(dd)", pct_i64_scaled(lags, found, 50, 1e6),
                                pct_i64_scaled(lags, found, 99, 1e6));
    }
    if (lags_ms == NULL) goto done;
    if (!any_late) {
        result = PyTuple_Pack(2, lags_ms, Py_None);
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) sorted_late[i] = late[i];
    qsort(sorted_late, (size_t)n, sizeof(int64_t), cmp_i64);
    rounded = PyList_New(n);
    if (rounded == NULL) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *f = rounded_ms(late[i]);
        if (f == NULL) goto done;
        PyList_SET_ITEM(rounded, i, f);
    }
    late_obj = Py_BuildValue("(dddOd)", pct_i64_scaled(sorted_late, n, 50, 1e6),
                             pct_i64_scaled(sorted_late, n, 99, 1e6),
                             (double)sorted_late[n - 1] / 1e6, rounded, (double)late[0] / 1e6);
    if (late_obj == NULL) goto done;
    result = PyTuple_Pack(2, lags_ms, late_obj);
done:
    Py_XDECREF(lags_ms);
    Py_XDECREF(late_obj);
    Py_XDECREF(rounded);
    PyMem_Free(buf);
    return result;
none:
    PyErr_Clear();
    Py_XDECREF(lags_ms);
    PyMem_Free(buf);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"offsets", offsets, METH_VARARGS, offsets_doc},
    {"kernel_self_check", kernel_self_check, METH_VARARGS, kernel_self_check_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "labkit._stampfigures",
    "A stream's per-event figures in one pass of C (labkit.timing, labkit.measurement.lateness).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__stampfigures(void) { return PyModule_Create(&module); }
