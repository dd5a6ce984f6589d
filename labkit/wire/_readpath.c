/* The lean transport's per-read steps in C: the same answers as their Python versions.
 *
 * Each streamed token costs one socket read; in Python its stamp, its chunk framing and its
 * SSE split are some sixty bytecodes across four frames, run cold between context switches.
 * These functions do the common case of each in one call and return None for anything
 * else, which the Python code then handles as before (labkit.wire.readpath
 * says which runs; tests/wire/test_readpath.py holds them to the Python ones).
 *
 *   recv_stamped(fd, size, ancillary_size, stamp_type, stamp_unit, last_t)
 *       one recvmsg() and its stamps, as Connection._on_readable took them
 *   whole_chunks(data)
 *       the payload of a read of whole non-empty chunks (http11._whole_chunks from 0)
 *   whole_data_events(chunk, limit, t_ns, event_type)
 *       the events of a read of whole one-line `data:` events (SSEParser._whole_data_events)
 *   timed_select(selector, timeout, woken)
 *       TimedSelector.select on an epoll selector, the poll included (loopclock._select_py)
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>

#define MAX_READ (64 * 1024)
/* loopclock.BLOCKED_NS: a select() that took longer blocked (checked equal at import). */
#define BLOCKED_NS 50000

static char read_buffer[MAX_READ];
static PyObject *name_event, *name_data, *name_t_ns;

static inline int64_t clock_ns(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static PyObject *recv_stamped(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "recv_stamped takes 6 arguments");
        return NULL;
    }
    int fd = PyLong_AsLong(args[0]);
    Py_ssize_t size = PyLong_AsSsize_t(args[1]);
    Py_ssize_t ancillary_size = PyLong_AsSsize_t(args[2]);
    long stamp_type = PyLong_AsLong(args[3]);
    long long stamp_unit = PyLong_AsLongLong(args[4]);
    long long last_t = PyLong_AsLongLong(args[5]);
    if (PyErr_Occurred()) return NULL;
    if (size <= 0 || size > MAX_READ) size = MAX_READ;
    /* CMSG_SPACE(16) on every 64-bit ABI; the caller's size is at most that. */
    union {
        char buf[64];
        struct cmsghdr align;
    } control;
    if (ancillary_size < 0 || ancillary_size > (Py_ssize_t)sizeof(control.buf))
        ancillary_size = sizeof(control.buf);
    struct iovec iov = {read_buffer, (size_t)size};
    struct msghdr msg;
    memset(&msg, 0, sizeof(msg));
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ancillary_size ? control.buf : NULL;
    msg.msg_controllen = (size_t)ancillary_size;
    ssize_t n = recvmsg(fd, &msg, 0);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) Py_RETURN_NONE;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    int64_t seen = clock_ns(CLOCK_MONOTONIC);
    int64_t t = seen;
    int kernel = 0;
    if (n > 0 && ancillary_size && msg.msg_controllen >= sizeof(struct cmsghdr)) {
        struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
        if (cm != NULL && cm->cmsg_type == stamp_type &&
            cm->cmsg_len >= CMSG_LEN(2 * sizeof(long))) {
            int64_t wall = clock_ns(CLOCK_REALTIME);
            long parts[2];
            memcpy(parts, CMSG_DATA(cm), sizeof(parts));
            t = (int64_t)parts[0] * 1000000000 + (int64_t)parts[1] * stamp_unit - (wall - seen);
            if (t > seen)
                t = seen;
            else if (t < last_t)
                t = last_t;
            kernel = 1;
        }
    }
    PyObject *data = PyBytes_FromStringAndSize(read_buffer, n);
    if (data == NULL) return NULL;
    PyObject *out = PyTuple_New(4);
    if (out == NULL) {
        Py_DECREF(data);
        return NULL;
    }
    PyObject *t_obj = PyLong_FromLongLong(t);
    PyObject *seen_obj = PyLong_FromLongLong(seen);
    if (t_obj == NULL || seen_obj == NULL) {
        Py_XDECREF(t_obj);
        Py_XDECREF(seen_obj);
        Py_DECREF(data);
        Py_DECREF(out);
        return NULL;
    }
    PyTuple_SET_ITEM(out, 0, data);
    PyTuple_SET_ITEM(out, 1, t_obj);
    PyTuple_SET_ITEM(out, 2, seen_obj);
    PyObject *flag = kernel ? Py_True : Py_False;
    Py_INCREF(flag);
    PyTuple_SET_ITEM(out, 3, flag);
    return out;
}

static inline int hex_value(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A chunk head's digits, as the Python decoder reads them: its CRLF within 18 bytes. */
#define MAX_HEX_DIGITS 16

/* The chunks of a read that is whole non-empty chunks with bare hex sizes and nothing else:
 * their count (-1: not such a read), the first one's payload offset and the payloads' sum. */
static Py_ssize_t frame_chunks(const unsigned char *data, Py_ssize_t total,
                               Py_ssize_t *first_start, Py_ssize_t *payload) {
    Py_ssize_t at = 0, chunks = 0;
    *payload = 0;
    while (at < total) {
        Py_ssize_t digits = 0;
        int64_t size = 0;
        while (at + digits < total && digits <= MAX_HEX_DIGITS) {
            int v = hex_value(data[at + digits]);
            if (v < 0) break;
            /* Past any read's length: not whole here, as in Python (kept from overflowing). */
            if (size > total) size = total + 1;
            size = size * 16 + v;
            digits++;
        }
        if (digits == 0 || digits > MAX_HEX_DIGITS) return -1;
        Py_ssize_t end = at + digits;
        if (end + 1 >= total || data[end] != '\r' || data[end + 1] != '\n') return -1;
        if (size == 0 || size > total) return -1;
        Py_ssize_t stop = end + 2 + (Py_ssize_t)size;
        if (stop + 2 > total || data[stop] != '\r' || data[stop + 1] != '\n') return -1;
        if (chunks == 0) *first_start = end + 2;
        *payload += (Py_ssize_t)size;
        chunks++;
        at = stop + 2;
    }
    return chunks;
}

/* The payloads of `chunks` framed chunks (frame_chunks said so) copied into `dst`. */
static void copy_payloads(const unsigned char *data, Py_ssize_t total, char *dst) {
    Py_ssize_t at = 0;
    while (at < total) {
        Py_ssize_t digits = 0;
        int64_t size = 0;
        int v;
        while ((v = hex_value(data[at + digits])) >= 0) {
            size = size * 16 + v;
            digits++;
        }
        memcpy(dst, data + at + digits + 2, (size_t)size);
        dst += size;
        at += digits + 2 + (Py_ssize_t)size + 2;
    }
}

static PyObject *whole_chunks(PyObject *self, PyObject *arg) {
    if (!PyBytes_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "whole_chunks takes bytes");
        return NULL;
    }
    const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(arg);
    Py_ssize_t total = PyBytes_GET_SIZE(arg);
    Py_ssize_t first_start = 0, payload = 0;
    Py_ssize_t chunks = frame_chunks(data, total, &first_start, &payload);
    if (chunks < 0) Py_RETURN_NONE;
    if (chunks == 1)
        return PyBytes_FromStringAndSize((const char *)data + first_start, payload);
    PyObject *out = PyBytes_FromStringAndSize(NULL, payload);
    if (out == NULL) return NULL;
    copy_payloads(data, total, PyBytes_AS_STRING(out));
    return out;
}

/* One event object of `type` (SSEEvent: a slots dataclass) without running its __init__. */
static PyObject *new_event(PyTypeObject *type, PyObject *data, PyObject *t_ns) {
    PyObject *event = type->tp_alloc(type, 0);
    if (event == NULL) return NULL;
    if (PyObject_SetAttr(event, name_event, Py_None) < 0 ||
        PyObject_SetAttr(event, name_data, data) < 0 ||
        PyObject_SetAttr(event, name_t_ns, t_ns) < 0) {
        Py_DECREF(event);
        return NULL;
    }
    return event;
}

/* The events of `chunk` when it is only one-line `data: ` events each followed by a blank
 * line (`\n` ends only), each line at most `limit` bytes and UTF-8; a new reference to
 * None for anything else, NULL on an error. */
static PyObject *data_events(const char *chunk, Py_ssize_t total, Py_ssize_t limit,
                             PyObject *t_ns, PyTypeObject *type) {
    if (total < 2 || chunk[total - 2] != '\n' || chunk[total - 1] != '\n' ||
        memchr(chunk, '\r', (size_t)total) != NULL)
        Py_RETURN_NONE;
    Py_ssize_t body = total - 2; /* the parts are chunk[:-2] split on "\n\n" */
    /* Check every part before making anything: most reads pass, the rest cost nothing. */
    Py_ssize_t at = 0, parts = 0;
    for (;;) {
        const char *nl = memchr(chunk + at, '\n', (size_t)(body - at));
        Py_ssize_t end = nl == NULL ? body : nl - chunk;
        Py_ssize_t length = end - at;
        if (length < 6 || memcmp(chunk + at, "data: ", 6) != 0 || length > limit)
            Py_RETURN_NONE;
        parts++;
        if (nl == NULL) break;
        /* A "\n" inside a part, or a blank line that is not "\n\n", fails the check. */
        if (end + 1 >= body || chunk[end + 1] != '\n') Py_RETURN_NONE;
        at = end + 2;
    }
    PyObject *out = PyList_New(parts);
    if (out == NULL) return NULL;
    at = 0;
    for (Py_ssize_t i = 0; i < parts; i++) {
        const char *nl = memchr(chunk + at, '\n', (size_t)(body - at));
        Py_ssize_t end = nl == NULL ? body : nl - chunk;
        PyObject *data = PyUnicode_DecodeUTF8(chunk + at + 6, end - at - 6, NULL);
        if (data == NULL) {
            Py_DECREF(out);
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                PyErr_Clear();
                Py_RETURN_NONE;
            }
            return NULL;
        }
        PyObject *event = new_event(type, data, t_ns);
        Py_DECREF(data);
        if (event == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, event);
        at = end + 2;
    }
    return out;
}

/* Checks the (bytes, limit, t_ns, event type) arguments of `name` and reads the limit:
 * 0, or -1 with the error set. */
static int event_args(const char *name, PyObject *const *args, Py_ssize_t nargs,
                      Py_ssize_t *limit) {
    if (nargs != 4 || !PyBytes_Check(args[0]) || !PyType_Check(args[3])) {
        PyErr_Format(PyExc_TypeError, "%s takes (bytes, limit, t_ns, event type)", name);
        return -1;
    }
    *limit = PyLong_AsSsize_t(args[1]);
    return *limit == -1 && PyErr_Occurred() ? -1 : 0;
}

static PyObject *whole_data_events(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t limit;
    if (event_args("whole_data_events", args, nargs, &limit) < 0) return NULL;
    return data_events(PyBytes_AS_STRING(args[0]), PyBytes_GET_SIZE(args[0]), limit, args[2],
                       (PyTypeObject *)args[3]);
}

/* ---- TimedSelector.select (loopclock.py, `_select_py` there is the reference) ---------- */

static PyObject *n_clock, *n_returned_ns, *n_selects, *n_schedstat, *n_entered_ns, *n_selector,
    *n_poll, *n_fd_to_key, *n_history, *n_sockets, *n_socket, *n_unread, *n_watched_from,
    *n_seen_empty_ns, *n_reported_by, *n_reports, *n_append;

/* The three counters of a schedstat line ("run wait runs\n"); 0 when it is not one. */
static int parse_schedstat(PyObject *line, int64_t out[3]) {
    if (!PyBytes_Check(line)) return 0;
    const char *p = PyBytes_AS_STRING(line), *end = p + PyBytes_GET_SIZE(line);
    for (int i = 0; i < 3; i++) {
        while (p < end && (*p == ' ' || *p == '\n' || *p == '\t')) p++;
        if (p == end || *p < '0' || *p > '9') return 0;
        int64_t v = 0;
        int digits = 0;
        while (p < end && *p >= '0' && *p <= '9') {
            if (++digits > 18) return 0;
            v = v * 10 + (*p++ - '0');
        }
        out[i] = v;
    }
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\t')) p++;
    return p == end;
}

static PyObject *arrival(PyObject *lo, PyObject *hi, int closed) {
    return PyTuple_Pack(3, lo, hi, closed ? Py_True : Py_False);
}

/* timed_select(selector, timeout, woken): TimedSelector.select on an epoll selector, with
 * `woken` (loopclock._woken) for a wake it cannot place from the counters alone. */
static PyObject *timed_select(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "timed_select takes (selector, timeout, woken)");
        return NULL;
    }
    PyObject *sel = args[0], *timeout = args[1], *woken_fn = args[2];
    PyObject *clock = NULL, *previous_return = NULL, *schedstat = NULL, *counters = NULL;
    PyObject *entered = NULL, *returned = NULL, *ready = NULL, *fd_list = NULL;
    PyObject *woken = NULL, *woke_window = NULL, *since_window = NULL, *sockets = NULL;
    PyObject *result = NULL, *n_obj = NULL;
    long long n;

    /* Nonzero: a select() that may block (asyncio passes None, 0 or a positive float). */
    int may_block = 1;
    double poll_timeout = -1.0;
    if (timeout != Py_None) {
        double t = PyFloat_AsDouble(timeout);
        if (t == -1.0 && PyErr_Occurred()) return NULL;
        may_block = t != 0.0;
        poll_timeout = t <= 0 ? 0.0 : ceil(t * 1e3) * 1e-3;
    }
    clock = PyObject_GetAttr(sel, n_clock);
    if (clock == NULL) goto done;
    previous_return = PyObject_GetAttr(sel, n_returned_ns);
    if (previous_return == NULL) goto done;
    {
        PyObject *selects = PyObject_GetAttr(sel, n_selects);
        if (selects == NULL) goto done;
        n = PyLong_AsLongLong(selects);
        Py_DECREF(selects);
        if (n == -1 && PyErr_Occurred()) goto done;
        n += 1;
        n_obj = PyLong_FromLongLong(n);
        if (n_obj == NULL || PyObject_SetAttr(sel, n_selects, n_obj) < 0) goto done;
    }
    if (may_block) {
        schedstat = PyObject_GetAttr(sel, n_schedstat);
        if (schedstat == NULL) goto done;
        if (schedstat == Py_None) {
            Py_CLEAR(schedstat);
        } else {
            counters = PyObject_CallNoArgs(schedstat);
            if (counters == NULL) goto done;
        }
    }
    entered = PyObject_CallNoArgs(clock);
    if (entered == NULL) goto done;
    {
        PyObject *epoll = PyObject_GetAttr(sel, n_selector);
        if (epoll == NULL) goto done;
        PyObject *fd_to_key = PyObject_GetAttr(sel, n_fd_to_key);
        if (fd_to_key == NULL) {
            Py_DECREF(epoll);
            goto done;
        }
        Py_ssize_t registered = PyObject_Length(fd_to_key);
        PyObject *poll_args[3] = {epoll, PyFloat_FromDouble(poll_timeout),
                                  PyLong_FromSsize_t(registered > 1 ? registered : 1)};
        if (registered < 0 || poll_args[1] == NULL || poll_args[2] == NULL) {
            Py_XDECREF(poll_args[1]);
            Py_XDECREF(poll_args[2]);
            Py_DECREF(epoll);
            Py_DECREF(fd_to_key);
            goto done;
        }
        fd_list = PyObject_VectorcallMethod(n_poll, poll_args, 3, NULL);
        Py_DECREF(poll_args[1]);
        Py_DECREF(poll_args[2]);
        Py_DECREF(epoll);
        ready = PyList_New(0);
        if (ready == NULL) {
            Py_DECREF(fd_to_key);
            goto done;
        }
        if (fd_list == NULL) {
            Py_DECREF(fd_to_key);
            if (!PyErr_ExceptionMatches(PyExc_InterruptedError)) goto done;
            PyErr_Clear();
        } else {
            Py_ssize_t count = PyList_GET_SIZE(fd_list);
            for (Py_ssize_t i = 0; i < count; i++) {
                PyObject *item = PyList_GET_ITEM(fd_list, i);
                PyObject *fd = PyTuple_GET_ITEM(item, 0);
                long event = PyLong_AsLong(PyTuple_GET_ITEM(item, 1));
                long events = 0;
                if (event & ~EPOLLIN) events |= 2; /* EVENT_WRITE */
                if (event & ~EPOLLOUT) events |= 1; /* EVENT_READ */
                PyObject *key = PyDict_GetItemWithError(fd_to_key, fd);
                if (key == NULL) {
                    if (PyErr_Occurred()) {
                        Py_DECREF(fd_to_key);
                        goto done;
                    }
                    continue;
                }
                long key_events = PyLong_AsLong(PyTuple_GET_ITEM(key, 2));
                PyObject *mask = PyLong_FromLong(events & key_events);
                PyObject *pair = mask == NULL ? NULL : PyTuple_Pack(2, key, mask);
                Py_XDECREF(mask);
                if (pair == NULL || PyList_Append(ready, pair) < 0) {
                    Py_XDECREF(pair);
                    Py_DECREF(fd_to_key);
                    goto done;
                }
                Py_DECREF(pair);
            }
            Py_DECREF(fd_to_key);
        }
    }
    returned = PyObject_CallNoArgs(clock);
    if (returned == NULL) goto done;
    if (PyObject_SetAttr(sel, n_returned_ns, returned) < 0 ||
        PyObject_SetAttr(sel, n_entered_ns, entered) < 0)
        goto done;
    if (PyList_GET_SIZE(ready) == 0) {
        result = ready;
        ready = NULL;
        goto done;
    }
    int64_t entered_ns = PyLong_AsLongLong(entered), returned_ns = PyLong_AsLongLong(returned);
    if (PyErr_Occurred()) goto done;
    int blocked = may_block && returned_ns - entered_ns > BLOCKED_NS;
    if (blocked && schedstat != NULL) {
        PyObject *after = PyObject_CallNoArgs(schedstat);
        if (after == NULL) goto done;
        int64_t before_c[3], after_c[3];
        if (parse_schedstat(counters, before_c) && parse_schedstat(after, after_c) &&
            after_c[2] - before_c[2] - 1 <= 0) {
            int64_t at = returned_ns - (after_c[1] - before_c[1]);
            woken = PyLong_FromLongLong(at > entered_ns ? at : entered_ns);
        } else {
            PyObject *woken_args[4] = {entered, returned, counters, after};
            woken = PyObject_Vectorcall(woken_fn, woken_args, 4, NULL);
        }
        Py_DECREF(after);
        if (woken == NULL) goto done;
    } else {
        woken = Py_NewRef(returned);
    }
    {
        PyObject *history = PyObject_GetAttr(sel, n_history);
        if (history == NULL) goto done;
        PyObject *entry = PyTuple_Pack(4, returned, entered, blocked ? Py_True : Py_False, woken);
        PyObject *got = entry == NULL ? NULL : PyObject_CallMethodOneArg(history, n_append, entry);
        Py_XDECREF(entry);
        Py_DECREF(history);
        if (got == NULL) goto done;
        Py_DECREF(got);
    }
    sockets = PyObject_GetAttr(sel, n_sockets);
    woke_window = arrival(woken, woken, 1);
    since_window = arrival(previous_return, entered, 0);
    if (sockets == NULL || woke_window == NULL || since_window == NULL) goto done;
    Py_ssize_t count = PyList_GET_SIZE(ready);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *pair = PyList_GET_ITEM(ready, i);
        if (!(PyLong_AsLong(PyTuple_GET_ITEM(pair, 1)) & 1)) continue;
        PyObject *fd = PyTuple_GET_ITEM(PyTuple_GET_ITEM(pair, 0), 1);
        PyObject *state = PyDict_GetItemWithError(sockets, fd);
        if (state != NULL) {
            Py_INCREF(state);
        } else if (PyErr_Occurred()) {
            goto done;
        } else {
            state = PyObject_CallMethodOneArg(sel, n_socket, fd);
            if (state == NULL) goto done;
        }
        PyObject *window = NULL;
        PyObject *unread = PyObject_GetAttr(state, n_unread);
        if (unread == NULL) goto state_failed;
        if (unread != Py_None) {
            window = unread;
            if (PyObject_SetAttr(state, n_unread, Py_None) < 0) goto state_failed;
        } else {
            Py_DECREF(unread);
            if (blocked) {
                window = Py_NewRef(woke_window);
            } else {
                PyObject *watched = PyObject_GetAttr(state, n_watched_from);
                if (watched == NULL) goto state_failed;
                long long from = PyLong_AsLongLong(watched);
                Py_DECREF(watched);
                if (from == -1 && PyErr_Occurred()) goto state_failed;
                if (0 <= from && from < n - 1) {
                    window = Py_NewRef(since_window);
                } else {
                    PyObject *empty = PyObject_GetAttr(state, n_seen_empty_ns);
                    if (empty == NULL) goto state_failed;
                    window = arrival(empty, entered, 0);
                    Py_DECREF(empty);
                    if (window == NULL) goto state_failed;
                }
            }
        }
        if (PyObject_SetAttr(state, n_seen_empty_ns, returned) < 0 ||
            PyObject_SetAttr(state, n_reported_by, n_obj) < 0)
            goto state_failed;
        PyObject *reports = PyObject_GetAttr(state, n_reports);
        if (reports == NULL) goto state_failed;
        PyObject *got = PyObject_CallMethodOneArg(reports, n_append, window);
        Py_DECREF(reports);
        if (got == NULL) goto state_failed;
        Py_DECREF(got);
        Py_DECREF(window);
        Py_DECREF(state);
        continue;
    state_failed:
        Py_XDECREF(window);
        Py_DECREF(state);
        goto done;
    }
    result = ready;
    ready = NULL;
done:
    Py_XDECREF(clock);
    Py_XDECREF(previous_return);
    Py_XDECREF(schedstat);
    Py_XDECREF(counters);
    Py_XDECREF(entered);
    Py_XDECREF(returned);
    Py_XDECREF(ready);
    Py_XDECREF(fd_list);
    Py_XDECREF(woken);
    Py_XDECREF(woke_window);
    Py_XDECREF(since_window);
    Py_XDECREF(sockets);
    Py_XDECREF(n_obj);
    return result;
}

static PyMethodDef methods[] = {
    {"recv_stamped", (PyCFunction)(void (*)(void))recv_stamped, METH_FASTCALL,
     "recv_stamped(fd, size, ancillary_size, stamp_type, stamp_unit, last_t) -> "
     "(data, t_ns, seen_ns, kernel_stamped), or None when the socket has nothing now."},
    {"whole_chunks", whole_chunks, METH_O,
     "whole_chunks(data) -> the payload of whole non-empty chunks, or None."},
    {"whole_data_events", (PyCFunction)(void (*)(void))whole_data_events, METH_FASTCALL,
     "whole_data_events(chunk, limit, t_ns, event_type) -> the events of whole one-line "
     "data: events, or None."},
    {"timed_select", (PyCFunction)(void (*)(void))timed_select, METH_FASTCALL,
     "timed_select(selector, timeout, woken) -> TimedSelector.select on an epoll selector."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_readpath",
    "The lean transport's per-read steps in C (labkit.wire.readpath).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__readpath(void) {
    name_event = PyUnicode_InternFromString("event");
    name_data = PyUnicode_InternFromString("data");
    name_t_ns = PyUnicode_InternFromString("t_ns");
    if (name_event == NULL || name_data == NULL || name_t_ns == NULL) return NULL;
    struct {
        PyObject **name;
        const char *text;
    } names[] = {
        {&n_clock, "_clock"}, {&n_returned_ns, "returned_ns"}, {&n_selects, "selects"},
        {&n_schedstat, "schedstat"}, {&n_entered_ns, "entered_ns"}, {&n_selector, "_selector"},
        {&n_poll, "poll"}, {&n_fd_to_key, "_fd_to_key"}, {&n_history, "history"},
        {&n_sockets, "_sockets"}, {&n_socket, "_socket"}, {&n_unread, "unread"},
        {&n_watched_from, "watched_from"}, {&n_seen_empty_ns, "seen_empty_ns"},
        {&n_reported_by, "reported_by"}, {&n_reports, "reports"}, {&n_append, "append"},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        *names[i].name = PyUnicode_InternFromString(names[i].text);
        if (*names[i].name == NULL) return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "BLOCKED_NS", BLOCKED_NS) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
