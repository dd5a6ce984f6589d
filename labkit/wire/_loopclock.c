/* The timed selector's poll in C: labkit.wire.loopclock.PyTimedSelector's select(), one call.
 *
 * `TimedEpoll` owns its epoll descriptor and its registrations (no CPython selector or
 * private attribute is read): per file descriptor the SelectorKey, its events and what the
 * timed selector knows of the socket (when it was watched from, last seen empty, last
 * reported, a cancelled read's window, its queue of reports). `select(timeout)` takes the
 * scheduler counters before a select() that may block, the clock on entry, epoll_wait()
 * with the GIL released, the clock on return, the counters again after one that blocked and
 * reported something, and appends each readable socket's arrival window to its queue, as
 * the Python select does step by step (tests/wire/test_loopclock_parity.py holds the two to
 * the same windows, history, counts and states for the same calls and clock readings).
 *
 * The clock is CLOCK_MONOTONIC (time.perf_counter_ns on Linux) unless a callable is given;
 * the counters are read with pread() into a stack buffer when the reader is this module's
 * `Schedstat` (its last line again while getrusage() counts no context switch since: the
 * fields `_woken` reads change only across one), else by calling the reader. Their common
 * line (three decimal integers) is
 * parsed here; anything else, or a thread put on a CPU more than once, goes to the Python
 * `_woken` (passed in at construction), which is the reference.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define EVENT_READ 1
#define EVENT_WRITE 2
#define BLOCKED_NS 50000
#define REPORTS_KEPT 32
#define SCHEDSTAT_SIZE 64

static PyObject *deque_type;  /* collections.deque */
static PyObject *name_append, *name_maxlen;

static inline long long monotonic_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* ---- Schedstat: a reader of one thread's scheduler counters ---------------------------- */

typedef struct {
    PyObject_HEAD
    int fd;
    /* The last pread's line and the thread's context switches (voluntary + involuntary,
     * getrusage) counted just before it: -1 until the first read in `read_counters`. */
    long long switches;
    char line[SCHEDSTAT_SIZE];
    ssize_t line_n;
} Schedstat;

static PyTypeObject SchedstatType;

static int schedstat_init(Schedstat *self, PyObject *args, PyObject *kwds) {
    int fd;
    if (!PyArg_ParseTuple(args, "i", &fd)) return -1;
    self->fd = fd;
    self->switches = -1;
    self->line_n = 0;
    return 0;
}

static PyObject *schedstat_call(Schedstat *self, PyObject *args, PyObject *kwds) {
    char buf[SCHEDSTAT_SIZE];
    ssize_t n;
    if (self->fd < 0) {
        errno = EBADF;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    n = pread(self->fd, buf, sizeof buf, 0);
    if (n < 0) return PyErr_SetFromErrno(PyExc_OSError);
    return PyBytes_FromStringAndSize(buf, n);
}

static PyObject *schedstat_close(Schedstat *self, PyObject *unused) {
    if (self->fd >= 0) {
        close(self->fd);
        self->fd = -1;
    }
    Py_RETURN_NONE;
}

static void schedstat_dealloc(Schedstat *self) {
    if (self->fd >= 0) close(self->fd);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef schedstat_methods[] = {
    {"close", (PyCFunction)schedstat_close, METH_NOARGS, "Close the counters' file."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef schedstat_members[] = {
    {"fd", T_INT, offsetof(Schedstat, fd), READONLY, "The counters' file descriptor."},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject SchedstatType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "labkit.wire._loopclock.Schedstat",
    .tp_basicsize = sizeof(Schedstat),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Schedstat(fd): calling it is os.pread(fd, 64, 0); close() closes fd.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)schedstat_init,
    .tp_call = (ternaryfunc)schedstat_call,
    .tp_dealloc = (destructor)schedstat_dealloc,
    .tp_methods = schedstat_methods,
    .tp_members = schedstat_members,
};

/* ---- TimedEpoll ------------------------------------------------------------------------ */

typedef struct {
    PyObject *key;     /* the SelectorKey; NULL: not registered */
    int events;        /* its selector events */
    int has_state;     /* the timed selector's _Socket exists */
    long long watched_from, seen_empty_ns, reported_by;
    PyObject *reports; /* its deque of windows (also in `reports`), with has_state */
    PyObject *unread;  /* a cancelled read's window, or NULL */
} Entry;

typedef struct {
    PyObject_HEAD
    int epfd;
    Entry *entries;
    Py_ssize_t size;       /* entries allocated */
    Py_ssize_t registered; /* keys registered */
    struct epoll_event *events;
    int events_size;
    long long selects, entered_ns, returned_ns;
    PyObject *clock;     /* callable or NULL: CLOCK_MONOTONIC */
    PyObject *schedstat; /* reader or None */
    PyObject *reports;   /* dict: fd -> deque */
    PyObject *history;   /* deque of (returned, entered, blocked, woken) */
    PyObject *keys;      /* dict: fd -> SelectorKey */
    PyObject *woken;     /* the Python _woken(entered, returned, before, after) */
} TimedEpoll;

static int read_clock(TimedEpoll *self, long long *out) {
    if (self->clock == NULL) {
        *out = monotonic_ns();
        return 0;
    }
    PyObject *value = PyObject_CallNoArgs(self->clock);
    if (value == NULL) return -1;
    *out = PyLong_AsLongLong(value);
    Py_DECREF(value);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static int grow(TimedEpoll *self, int fd) {
    if (fd < self->size) return 0;
    Py_ssize_t size = self->size ? self->size : 64;
    while (size <= fd) size *= 2;
    Entry *entries = PyMem_Realloc(self->entries, size * sizeof(Entry));
    if (entries == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memset(entries + self->size, 0, (size - self->size) * sizeof(Entry));
    self->entries = entries;
    self->size = size;
    return 0;
}

/* The socket's state, made as _socket() makes it (its queue the one in `reports`, if any). */
static Entry *socket_state(TimedEpoll *self, int fd) {
    if (grow(self, fd) < 0) return NULL;
    if (self->entries[fd].has_state) return &self->entries[fd];
    PyObject *fd_obj = PyLong_FromLong(fd);
    if (fd_obj == NULL) return NULL;
    PyObject *queue = PyDict_GetItemWithError(self->reports, fd_obj);
    if (queue != NULL) {
        Py_INCREF(queue);
    } else {
        if (PyErr_Occurred()) goto fail;
        PyObject *kwargs = Py_BuildValue("{Oi}", name_maxlen, REPORTS_KEPT);
        if (kwargs == NULL) goto fail;
        PyObject *empty = PyTuple_New(0);
        if (empty == NULL) {
            Py_DECREF(kwargs);
            goto fail;
        }
        queue = PyObject_Call(deque_type, empty, kwargs);
        Py_DECREF(empty);
        Py_DECREF(kwargs);
        if (queue == NULL) goto fail;
        if (PyDict_SetItem(self->reports, fd_obj, queue) < 0) {
            Py_DECREF(queue);
            goto fail;
        }
    }
    Py_DECREF(fd_obj);
    /* Taken only now: an allocation above may have run a finalizer that registered a higher
     * descriptor and so moved `entries`. */
    Entry *e = &self->entries[fd];
    if (e->has_state) { /* made meanwhile by that finalizer: keep it */
        Py_DECREF(queue);
        return e;
    }
    e->has_state = 1;
    e->reports = queue;
    e->watched_from = -1;
    e->seen_empty_ns = self->returned_ns;
    e->reported_by = 0;
    e->unread = NULL;
    return e;
fail:
    Py_DECREF(fd_obj);
    return NULL;
}

static void drop_state(Entry *e) {
    Py_CLEAR(e->reports);
    Py_CLEAR(e->unread);
    e->has_state = 0;
}

static int watch(TimedEpoll *self, int fd) {
    Entry *e = socket_state(self, fd);
    if (e == NULL) return -1;
    e->watched_from = self->selects;
    return 0;
}

static int unwatch(TimedEpoll *self, int fd) {
    if (fd >= self->size || !self->entries[fd].has_state) return 0;
    Entry *e = &self->entries[fd];
    if (e->reported_by == self->selects && PyObject_Length(e->reports) > 0) {
        PyObject *window = PyObject_CallMethod(e->reports, "pop", NULL);
        if (window == NULL) return -1;
        e = &self->entries[fd]; /* as in socket_state: `entries` may have moved */
        Py_XSETREF(e->unread, window);
    }
    if (0 <= e->watched_from && e->watched_from < self->selects) {
        if (self->returned_ns > e->seen_empty_ns) e->seen_empty_ns = self->returned_ns;
    }
    e->watched_from = -1;
    return 0;
}

static uint32_t epoll_mask(int events) {
    uint32_t mask = 0;
    if (events & EVENT_READ) mask |= EPOLLIN;
    if (events & EVENT_WRITE) mask |= EPOLLOUT;
    return mask;
}

static int parse_fd(PyObject *obj) {
    int fd = PyLong_AsLong(obj);
    if (fd == -1 && PyErr_Occurred()) return -1;
    if (fd < 0) {
        PyErr_Format(PyExc_ValueError, "Invalid file descriptor: %d", fd);
        return -1;
    }
    return fd;
}

static int set_key(TimedEpoll *self, int fd, PyObject *fd_obj, int events, PyObject *key) {
    if (PyDict_SetItem(self->keys, fd_obj, key) < 0) return -1;
    Entry *e = &self->entries[fd];
    Py_INCREF(key);
    Py_XSETREF(e->key, key);
    e->events = events;
    return 0;
}

static void clear_key(TimedEpoll *self, int fd) {
    Entry *e = &self->entries[fd];
    Py_CLEAR(e->key);
    e->events = 0;
}

/* _add(fd, events, key): register a new key (epoll_ctl ADD); a reader is watched. */
static PyObject *te_add(TimedEpoll *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "_add takes 3 arguments");
        return NULL;
    }
    int fd = parse_fd(args[0]);
    int events = PyLong_AsLong(args[1]);
    if (fd < 0 || (events == -1 && PyErr_Occurred())) return NULL;
    if (grow(self, fd) < 0) return NULL;
    if (self->entries[fd].key != NULL) {
        PyErr_Format(PyExc_KeyError, "%R (FD %d) is already registered", args[2], fd);
        return NULL;
    }
    struct epoll_event ev = {.events = epoll_mask(events), .data.fd = fd};
    if (epoll_ctl(self->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) return PyErr_SetFromErrno(PyExc_OSError);
    if (set_key(self, fd, args[0], events, args[2]) < 0) {
        epoll_ctl(self->epfd, EPOLL_CTL_DEL, fd, NULL);
        return NULL;
    }
    self->registered++;
    if (events & EVENT_READ && watch(self, fd) < 0) return NULL;
    Py_RETURN_NONE;
}

/* _remove(fd): unregister (epoll_ctl DEL, an fd already closed ignored); a reader unwatched. */
static PyObject *te_remove(TimedEpoll *self, PyObject *fd_obj) {
    int fd = parse_fd(fd_obj);
    if (fd < 0) return NULL;
    if (fd >= self->size || self->entries[fd].key == NULL) {
        PyErr_SetObject(PyExc_KeyError, fd_obj);
        return NULL;
    }
    int events = self->entries[fd].events;
    if (PyDict_DelItem(self->keys, fd_obj) < 0) return NULL;
    clear_key(self, fd);
    self->registered--;
    if (self->epfd >= 0) epoll_ctl(self->epfd, EPOLL_CTL_DEL, fd, NULL);
    if (events & EVENT_READ && unwatch(self, fd) < 0) return NULL;
    Py_RETURN_NONE;
}

/* _modify(fd, events, key): new events (epoll_ctl MOD; a failure unregisters and raises) or
 * only a new key; a socket newly watched for reading, or no longer, is noted. */
static PyObject *te_modify(TimedEpoll *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "_modify takes 3 arguments");
        return NULL;
    }
    int fd = parse_fd(args[0]);
    int events = PyLong_AsLong(args[1]);
    if (fd < 0 || (events == -1 && PyErr_Occurred())) return NULL;
    if (fd >= self->size || self->entries[fd].key == NULL) {
        PyErr_SetObject(PyExc_KeyError, args[0]);
        return NULL;
    }
    int before = self->entries[fd].events;
    if (events != before) {
        struct epoll_event ev = {.events = epoll_mask(events), .data.fd = fd};
        if (epoll_ctl(self->epfd, EPOLL_CTL_MOD, fd, &ev) < 0) {
            /* As the default selector: the key dropped, nothing else (no unwatch). */
            PyObject *type, *value, *tb;
            PyErr_SetFromErrno(PyExc_OSError);
            PyErr_Fetch(&type, &value, &tb);
            if (PyDict_DelItem(self->keys, args[0]) < 0) PyErr_Clear();
            clear_key(self, fd);
            self->registered--;
            PyErr_Restore(type, value, tb);
            return NULL;
        }
    }
    if (set_key(self, fd, args[0], events, args[2]) < 0) return NULL;
    if (events & EVENT_READ && !(before & EVENT_READ)) {
        if (watch(self, fd) < 0) return NULL;
    } else if (before & EVENT_READ && !(events & EVENT_READ)) {
        if (unwatch(self, fd) < 0) return NULL;
    }
    Py_RETURN_NONE;
}

/* Three decimal integers separated by ASCII whitespace, as bytes.split() and int() read
 * them; 0 if the line is anything else (the Python _woken then reads it). */
static int parse_counters(const char *s, Py_ssize_t n, long long out[3]) {
    int fields = 0;
    Py_ssize_t i = 0;
    while (1) {
        while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r' ||
                         s[i] == '\v' || s[i] == '\f'))
            i++;
        if (i >= n) break;
        if (fields == 3) return 0;
        long long value = 0;
        int digits = 0;
        while (i < n && s[i] >= '0' && s[i] <= '9') {
            if (++digits > 18) return 0;
            value = value * 10 + (s[i] - '0');
            i++;
        }
        if (digits == 0) return 0;
        if (i < n && !(s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r' ||
                       s[i] == '\v' || s[i] == '\f'))
            return 0;
        out[fields++] = value;
    }
    return fields == 3;
}

/* A reading of the counters: into `buf` (native reader; *obj stays NULL) or as an object. */
typedef struct {
    char buf[SCHEDSTAT_SIZE];
    Py_ssize_t n;
    PyObject *obj;
} Counters;

/* This thread's context switches so far (-1: unknown). The run-queue delay and the run
 * count (the counters' second and third fields, all `_woken` reads) change only when the
 * thread is switched out and back, so while this count stands still a reading stays true
 * but for its first field (time on a CPU, unused): getrusage() is a cheap syscall (~0.2
 * µs), the counters' pread of /proc ~1 µs warm and 2-3 cold, once per select() that may
 * block (benchmarks/bench_select.py). */
static long long thread_switches(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_THREAD, &ru) < 0) return -1;
    return (long long)ru.ru_nvcsw + (long long)ru.ru_nivcsw;
}

static int read_counters(PyObject *reader, Counters *c) {
    c->obj = NULL;
    c->n = 0;
    if (Py_IS_TYPE(reader, &SchedstatType)) {
        Schedstat *native = (Schedstat *)reader;
        int fd = native->fd;
        long long switches = fd < 0 ? -1 : thread_switches();
        if (switches >= 0 && switches == native->switches) {
            memcpy(c->buf, native->line, (size_t)native->line_n);
            c->n = native->line_n;
            return 0;
        }
        ssize_t n = fd < 0 ? (errno = EBADF, -1) : pread(fd, c->buf, sizeof c->buf, 0);
        if (n < 0) {
            native->switches = -1;
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        c->n = n;
        /* Counted before the read: a switch in between makes the next read a fresh one. */
        memcpy(native->line, c->buf, (size_t)n);
        native->line_n = n;
        native->switches = switches;
        return 0;
    }
    c->obj = PyObject_CallNoArgs(reader);
    return c->obj == NULL ? -1 : 0;
}

static PyObject *counters_object(Counters *c) {
    if (c->obj != NULL) {
        Py_INCREF(c->obj);
        return c->obj;
    }
    return PyBytes_FromStringAndSize(c->buf, c->n);
}

static int counters_parse(Counters *c, long long out[3]) {
    if (c->obj == NULL) return parse_counters(c->buf, c->n, out);
    if (!PyBytes_Check(c->obj)) return 0;
    return parse_counters(PyBytes_AS_STRING(c->obj), PyBytes_GET_SIZE(c->obj), out);
}

/* _woken: parsed here in the common case, else by the Python reference. */
static int woken_of(TimedEpoll *self, long long entered, long long returned, Counters *before,
                    Counters *after, long long *out) {
    long long b[3], a[3];
    if (counters_parse(before, b) && counters_parse(after, a) && a[2] - b[2] - 1 <= 0) {
        long long woken = returned - (a[1] - b[1]);
        *out = woken > entered ? woken : entered;
        return 0;
    }
    PyObject *before_obj = counters_object(before);
    if (before_obj == NULL) return -1;
    PyObject *after_obj = counters_object(after);
    if (after_obj == NULL) {
        Py_DECREF(before_obj);
        return -1;
    }
    PyObject *result = PyObject_CallFunction(self->woken, "LLOO", entered, returned, before_obj,
                                             after_obj);
    Py_DECREF(before_obj);
    Py_DECREF(after_obj);
    if (result == NULL) return -1;
    *out = PyLong_AsLongLong(result);
    Py_DECREF(result);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static int append_to(PyObject *queue, PyObject *item) {
    PyObject *done = PyObject_CallMethodOneArg(queue, name_append, item);
    if (done == NULL) return -1;
    Py_DECREF(done);
    return 0;
}

/* epoll_wait() as select.epoll.poll does it: the GIL released, EINTR retried after the
 * signal handlers ran (with what is left of the timeout). */
static int poll_events(TimedEpoll *self, int timeout_ms, int max_events) {
    long long deadline = timeout_ms > 0 ? monotonic_ns() + (long long)timeout_ms * 1000000 : 0;
    int n;
    while (1) {
        Py_BEGIN_ALLOW_THREADS
        n = epoll_wait(self->epfd, self->events, max_events, timeout_ms);
        Py_END_ALLOW_THREADS
        if (n >= 0 || errno != EINTR) break;
        if (PyErr_CheckSignals() < 0) return -1;
        if (timeout_ms > 0) {
            long long left = deadline - monotonic_ns();
            timeout_ms = left <= 0 ? 0 : (int)((left + 999999) / 1000000);
        }
    }
    if (n < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    return n;
}

static PyObject *te_select(TimedEpoll *self, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames) {
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    if (nargs + nkw > 1) {
        PyErr_SetString(PyExc_TypeError, "select() takes at most 1 argument (timeout)");
        return NULL;
    }
    if (nkw == 1 && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "timeout")) {
        PyErr_Format(PyExc_TypeError, "select() got an unexpected keyword argument %R",
                     PyTuple_GET_ITEM(kwnames, 0));
        return NULL;
    }
    PyObject *timeout = nargs + nkw > 0 ? args[0] : Py_None;
    int timeout_ms;
    int nonzero; /* timeout != 0 */
    if (timeout == Py_None) {
        timeout_ms = -1;
        nonzero = 1;
    } else {
        double t = PyFloat_AsDouble(timeout);
        if (t == -1.0 && PyErr_Occurred()) return NULL;
        if (isnan(t)) {
            PyErr_SetString(PyExc_ValueError, "Invalid value NaN (not a number)");
            return NULL;
        }
        nonzero = t != 0.0;
        if (t <= 0) {
            timeout_ms = 0;
        } else {
            double ms = ceil(t * 1e3);
            timeout_ms = ms > INT_MAX ? INT_MAX : (int)ms;
        }
    }
    if (self->epfd < 0) {
        PyErr_SetString(PyExc_ValueError, "I/O operation on closed epoll object");
        return NULL;
    }
    int max_events = self->registered > 1 ? (int)self->registered : 1;
    if (max_events > self->events_size) {
        struct epoll_event *events = PyMem_Realloc(self->events, max_events * sizeof *events);
        if (events == NULL) return PyErr_NoMemory();
        self->events = events;
        self->events_size = max_events;
    }
    long long previous_return = self->returned_ns;
    long long n_select = ++self->selects;
    PyObject *schedstat = nonzero && self->schedstat != Py_None ? self->schedstat : NULL;
    Counters before = {.obj = NULL}, after = {.obj = NULL};
    PyObject *ready = NULL, *woke_window = NULL, *since_window = NULL;
    long long entered, returned;
    if (schedstat != NULL) {
        Py_INCREF(schedstat);
        if (read_counters(schedstat, &before) < 0) goto done;
    }
    if (read_clock(self, &entered) < 0) goto done;
    int n = poll_events(self, timeout_ms, max_events);
    if (n < 0) goto done;
    if (read_clock(self, &returned) < 0) goto done;
    self->returned_ns = returned;
    self->entered_ns = entered;
    ready = PyList_New(0);
    if (ready == NULL) goto done;
    /* The ready list, as EpollSelector.select makes it. */
    for (int i = 0; i < n; i++) {
        int fd = self->events[i].data.fd;
        uint32_t ev = self->events[i].events;
        if (fd >= self->size || self->entries[fd].key == NULL) continue;
        int mask = 0;
        if (ev & ~EPOLLIN) mask |= EVENT_WRITE;
        if (ev & ~EPOLLOUT) mask |= EVENT_READ;
        mask &= self->entries[fd].events;
        PyObject *item = Py_BuildValue("(Oi)", self->entries[fd].key, mask);
        if (item == NULL || PyList_Append(ready, item) < 0) {
            Py_XDECREF(item);
            Py_CLEAR(ready);
            goto done;
        }
        Py_DECREF(item);
    }
    if (PyList_GET_SIZE(ready) == 0) goto done;
    int blocked = nonzero && returned - entered > BLOCKED_NS;
    long long woken = returned;
    if (blocked && schedstat != NULL) {
        if (read_counters(schedstat, &after) < 0 ||
            woken_of(self, entered, returned, &before, &after, &woken) < 0) {
            Py_CLEAR(ready);
            goto done;
        }
    }
    PyObject *entry = Py_BuildValue("(LLOL)", returned, entered, blocked ? Py_True : Py_False,
                                    woken);
    if (entry == NULL || append_to(self->history, entry) < 0) {
        Py_XDECREF(entry);
        Py_CLEAR(ready);
        goto done;
    }
    Py_DECREF(entry);
    /* Each readable socket's window (its state may be made, growing `entries`: index). */
    for (int i = 0; i < n; i++) {
        int fd = self->events[i].data.fd;
        uint32_t ev = self->events[i].events;
        if (fd >= self->size || self->entries[fd].key == NULL) continue;
        if (!(ev & ~EPOLLOUT) || !(self->entries[fd].events & EVENT_READ)) continue;
        Entry *e = socket_state(self, fd);
        if (e == NULL) {
            Py_CLEAR(ready);
            goto done;
        }
        PyObject *window;
        if (e->unread != NULL) {
            window = e->unread;
            e->unread = NULL;
        } else if (blocked) {
            if (woke_window == NULL &&
                (woke_window = Py_BuildValue("(LLO)", woken, woken, Py_True)) == NULL) {
                Py_CLEAR(ready);
                goto done;
            }
            window = Py_NewRef(woke_window);
        } else if (0 <= e->watched_from && e->watched_from < n_select - 1) {
            if (since_window == NULL &&
                (since_window = Py_BuildValue("(LLO)", previous_return, entered, Py_False)) ==
                    NULL) {
                Py_CLEAR(ready);
                goto done;
            }
            window = Py_NewRef(since_window);
        } else {
            window = Py_BuildValue("(LLO)", e->seen_empty_ns, entered, Py_False);
            if (window == NULL) {
                Py_CLEAR(ready);
                goto done;
            }
        }
        e = &self->entries[fd]; /* `entries` may have moved while the window was built */
        if (!e->has_state) { /* forgotten by a finalizer meanwhile */
            Py_DECREF(window);
            continue;
        }
        e->seen_empty_ns = returned;
        e->reported_by = n_select;
        int failed = append_to(e->reports, window);
        Py_DECREF(window);
        if (failed) {
            Py_CLEAR(ready);
            goto done;
        }
    }
done:
    Py_XDECREF(schedstat);
    Py_XDECREF(before.obj);
    Py_XDECREF(after.obj);
    Py_XDECREF(woke_window);
    Py_XDECREF(since_window);
    return ready;
}

/* _state(fd): the socket's state as (watched_from, seen_empty_ns, reported_by, unread,
 * reports), or None (the parity tests compare it with the Python _Socket). */
static PyObject *te_state(TimedEpoll *self, PyObject *fd_obj) {
    int fd = parse_fd(fd_obj);
    if (fd < 0) return NULL;
    if (fd >= self->size || !self->entries[fd].has_state) Py_RETURN_NONE;
    Entry *e = &self->entries[fd];
    return Py_BuildValue("(LLLOO)", e->watched_from, e->seen_empty_ns, e->reported_by,
                         e->unread ? e->unread : Py_None, e->reports);
}

static PyObject *te_forget(TimedEpoll *self, PyObject *fd_obj) {
    int fd = parse_fd(fd_obj);
    if (fd < 0) return NULL;
    if (PyDict_DelItem(self->reports, fd_obj) < 0) {
        if (!PyErr_ExceptionMatches(PyExc_KeyError)) return NULL;
        PyErr_Clear();
    }
    if (fd < self->size) drop_state(&self->entries[fd]);
    Py_RETURN_NONE;
}

static PyObject *te_close_poll(TimedEpoll *self, PyObject *unused) {
    if (self->epfd >= 0) {
        close(self->epfd);
        self->epfd = -1;
    }
    for (Py_ssize_t fd = 0; fd < self->size; fd++) clear_key(self, (int)fd);
    self->registered = 0;
    PyDict_Clear(self->keys);
    Py_RETURN_NONE;
}

static PyObject *te_fileno(TimedEpoll *self, PyObject *unused) { return PyLong_FromLong(self->epfd); }

static int te_init(TimedEpoll *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"clock", "schedstat", "woken", NULL};
    PyObject *clock = Py_None, *schedstat = Py_None, *woken = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO", kwlist, &clock, &schedstat, &woken))
        return -1;
    if (self->epfd >= 0) {
        PyErr_SetString(PyExc_RuntimeError, "TimedEpoll initialised twice");
        return -1;
    }
    self->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (self->epfd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    Py_XSETREF(self->clock, clock == Py_None ? NULL : Py_NewRef(clock));
    Py_XSETREF(self->schedstat, Py_NewRef(schedstat));
    Py_XSETREF(self->woken, Py_NewRef(woken));
    PyObject *kwargs = Py_BuildValue("{Oi}", name_maxlen, 256);
    PyObject *empty = PyTuple_New(0);
    if (kwargs == NULL || empty == NULL) {
        Py_XDECREF(kwargs);
        Py_XDECREF(empty);
        return -1;
    }
    Py_XSETREF(self->history, PyObject_Call(deque_type, empty, kwargs));
    Py_DECREF(kwargs);
    Py_DECREF(empty);
    if (self->history == NULL) return -1;
    Py_XSETREF(self->reports, PyDict_New());
    Py_XSETREF(self->keys, PyDict_New());
    if (self->reports == NULL || self->keys == NULL) return -1;
    return 0;
}

static PyObject *te_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    TimedEpoll *self = (TimedEpoll *)type->tp_alloc(type, 0);
    if (self != NULL) {
        self->epfd = -1;
        self->schedstat = Py_NewRef(Py_None);
    }
    return (PyObject *)self;
}

static int te_traverse(TimedEpoll *self, visitproc visit, void *arg) {
    for (Py_ssize_t fd = 0; fd < self->size; fd++) {
        Py_VISIT(self->entries[fd].key);
        Py_VISIT(self->entries[fd].reports);
        Py_VISIT(self->entries[fd].unread);
    }
    Py_VISIT(self->clock);
    Py_VISIT(self->schedstat);
    Py_VISIT(self->reports);
    Py_VISIT(self->history);
    Py_VISIT(self->keys);
    Py_VISIT(self->woken);
    return 0;
}

static int te_clear(TimedEpoll *self) {
    for (Py_ssize_t fd = 0; fd < self->size; fd++) {
        Py_CLEAR(self->entries[fd].key);
        drop_state(&self->entries[fd]);
    }
    Py_CLEAR(self->clock);
    Py_CLEAR(self->schedstat);
    Py_CLEAR(self->reports);
    Py_CLEAR(self->history);
    Py_CLEAR(self->keys);
    Py_CLEAR(self->woken);
    return 0;
}

static void te_dealloc(TimedEpoll *self) {
    PyObject_GC_UnTrack(self);
    te_clear(self);
    if (self->epfd >= 0) close(self->epfd);
    PyMem_Free(self->entries);
    PyMem_Free(self->events);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *te_get_schedstat(TimedEpoll *self, void *closure) {
    return Py_NewRef(self->schedstat);
}

static int te_set_schedstat(TimedEpoll *self, PyObject *value, void *closure) {
    Py_XSETREF(self->schedstat, Py_NewRef(value ? value : Py_None));
    return 0;
}

static PyGetSetDef te_getset[] = {
    {"schedstat", (getter)te_get_schedstat, (setter)te_set_schedstat,
     "Reads this thread's scheduler counters; None: not read.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef te_members[] = {
    {"selects", T_LONGLONG, offsetof(TimedEpoll, selects), 0, "select() calls entered so far."},
    {"entered_ns", T_LONGLONG, offsetof(TimedEpoll, entered_ns), 0, "The last select()'s entry."},
    {"returned_ns", T_LONGLONG, offsetof(TimedEpoll, returned_ns), 0,
     "The last select()'s return."},
    {"reports", T_OBJECT, offsetof(TimedEpoll, reports), READONLY,
     "Per socket: the windows of the reports not yet consumed, oldest first."},
    {"history", T_OBJECT, offsetof(TimedEpoll, history), READONLY,
     "The latest select() calls that reported something: (returned, entered, blocked, woken)."},
    {"_keys", T_OBJECT, offsetof(TimedEpoll, keys), READONLY, "fd -> SelectorKey."},
    {NULL, 0, 0, 0, NULL},
};

static PyMethodDef te_methods[] = {
    {"select", (PyCFunction)(void (*)(void))te_select, METH_FASTCALL | METH_KEYWORDS,
     "select(timeout=None): the ready (key, events), each readable socket's window noted."},
    {"_add", (PyCFunction)(void (*)(void))te_add, METH_FASTCALL, "_add(fd, events, key)"},
    {"_modify", (PyCFunction)(void (*)(void))te_modify, METH_FASTCALL,
     "_modify(fd, events, key)"},
    {"_remove", (PyCFunction)te_remove, METH_O, "_remove(fd)"},
    {"_state", (PyCFunction)te_state, METH_O, "_state(fd): the socket's state, or None."},
    {"forget", (PyCFunction)te_forget, METH_O,
     "Drop a socket's history (its file descriptor is about to be reused)."},
    {"_close_poll", (PyCFunction)te_close_poll, METH_NOARGS, "Close the epoll descriptor."},
    {"fileno", (PyCFunction)te_fileno, METH_NOARGS, "The epoll descriptor."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject TimedEpollType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "labkit.wire._loopclock.TimedEpoll",
    .tp_basicsize = sizeof(TimedEpoll),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "TimedEpoll(clock, schedstat, woken): the timed selector's epoll and state.",
    .tp_new = te_new,
    .tp_init = (initproc)te_init,
    .tp_dealloc = (destructor)te_dealloc,
    .tp_traverse = (traverseproc)te_traverse,
    .tp_clear = (inquiry)te_clear,
    .tp_methods = te_methods,
    .tp_members = te_members,
    .tp_getset = te_getset,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_loopclock",
    "The timed selector's select() in C (labkit.wire.loopclock).", -1, NULL,
};

PyMODINIT_FUNC PyInit__loopclock(void) {
    PyObject *collections = PyImport_ImportModule("collections");
    if (collections == NULL) return NULL;
    deque_type = PyObject_GetAttrString(collections, "deque");
    Py_DECREF(collections);
    if (deque_type == NULL) return NULL;
    name_append = PyUnicode_InternFromString("append");
    name_maxlen = PyUnicode_InternFromString("maxlen");
    if (name_append == NULL || name_maxlen == NULL) return NULL;
    if (PyType_Ready(&SchedstatType) < 0 || PyType_Ready(&TimedEpollType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "Schedstat", (PyObject *)&SchedstatType) < 0 ||
        PyModule_AddObjectRef(m, "TimedEpoll", (PyObject *)&TimedEpollType) < 0 ||
        PyModule_AddIntConstant(m, "BLOCKED_NS", BLOCKED_NS) < 0 ||
        PyModule_AddIntConstant(m, "REPORTS_KEPT", REPORTS_KEPT) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
