/* The lean transport's per-read steps in C: the same answers as their Python versions.
 *
 * Each streamed token costs one socket read; in Python its stamp and its SSE split run as
 * bytecodes across several frames, cold between context switches. These functions do the
 * common case of each in one call and return None for anything else, which the Python code
 * then handles as before (labkit.wire.readpath says which runs; tests/wire/test_readpath.py
 * holds them to the Python ones). The chunk framing alone and the timed select() were here
 * too and left: each saved less than the noise of a loaded level (docs/accuracy.md, make
 * bench-readpath); the framing and split of a pushed read came back as one call, measured
 * side by side in one process (issue 47).
 *
 *   recv_stamped(fd, size, ancillary_size, stamp_type, stamp_unit, last_t)
 *       one recvmsg() and its stamps, as Connection._on_readable took them
 *   whole_data_events(chunk, limit, t_ns, event_type)
 *       the events of a read of whole one-line `data:` events (SSEParser._whole_data_events)
 *   chunked_data_events(read, limit, t_ns, event_type)
 *       the same of a read of whole HTTP chunks, framing and all (readpath.py_chunked_data_events)
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define MAX_READ (64 * 1024)

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

/* The payload bytes of `data` when it is whole non-empty chunks with bare hex sizes (1 to 16
 * digits) and nothing else, as readpath.py_whole_chunks reads them: the number of chunks, with
 * the first chunk's payload at *first / *first_len; 0 for any other read. */
static Py_ssize_t whole_chunks(const char *data, Py_ssize_t total, const char **first,
                               Py_ssize_t *first_len, Py_ssize_t *payload_total) {
    Py_ssize_t at = 0, chunks = 0;
    *payload_total = 0;
    while (at < total) {
        Py_ssize_t end = at;
        uint64_t size = 0;
        while (end < total && end - at < 16) {
            char c = data[end];
            int digit;
            if (c >= '0' && c <= '9')
                digit = c - '0';
            else if (c >= 'a' && c <= 'f')
                digit = c - 'a' + 10;
            else if (c >= 'A' && c <= 'F')
                digit = c - 'A' + 10;
            else
                break;
            if (size > ((uint64_t)MAX_READ << 4)) return 0; /* beyond any read: cut */
            size = size * 16 + (uint64_t)digit;
            end++;
        }
        /* the size line ends at "\r\n" within 18 bytes of its start, after 1+ digits */
        if (end == at || end + 1 >= total || data[end] != '\r' || data[end + 1] != '\n')
            return 0;
        if (size == 0) return 0; /* the last chunk */
        Py_ssize_t start = end + 2;
        if ((uint64_t)(total - start) < size + 2) return 0; /* cut by the read's end */
        Py_ssize_t stop = start + (Py_ssize_t)size;
        if (data[stop] != '\r' || data[stop + 1] != '\n') return 0;
        if (chunks == 0) {
            *first = data + start;
            *first_len = (Py_ssize_t)size;
        }
        *payload_total += (Py_ssize_t)size;
        chunks++;
        at = stop + 2;
    }
    return chunks;
}

static PyObject *chunked_data_events(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t limit;
    if (event_args("chunked_data_events", args, nargs, &limit) < 0) return NULL;
    const char *data = PyBytes_AS_STRING(args[0]);
    Py_ssize_t total = PyBytes_GET_SIZE(args[0]);
    const char *first = NULL;
    Py_ssize_t first_len = 0, payload_total = 0;
    Py_ssize_t chunks = whole_chunks(data, total, &first, &first_len, &payload_total);
    if (chunks == 0) Py_RETURN_NONE;
    if (chunks == 1)
        return data_events(first, first_len, limit, args[2], (PyTypeObject *)args[3]);
    /* Several chunks: their payloads joined, then split (a read that came late). */
    char *joined = PyMem_Malloc((size_t)payload_total);
    if (joined == NULL) return PyErr_NoMemory();
    Py_ssize_t at = 0, out = 0;
    while (at < total) {
        Py_ssize_t end = at;
        uint64_t size = 0;
        while (data[end] != '\r') {
            char c = data[end++];
            size = size * 16 + (uint64_t)(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
        }
        memcpy(joined + out, data + end + 2, (size_t)size);
        out += (Py_ssize_t)size;
        at = end + 2 + (Py_ssize_t)size + 2;
    }
    PyObject *events = data_events(joined, payload_total, limit, args[2], (PyTypeObject *)args[3]);
    PyMem_Free(joined);
    return events;
}

static PyMethodDef methods[] = {
    {"recv_stamped", (PyCFunction)(void (*)(void))recv_stamped, METH_FASTCALL,
     "recv_stamped(fd, size, ancillary_size, stamp_type, stamp_unit, last_t) -> "
     "(data, t_ns, seen_ns, kernel_stamped), or None when the socket has nothing now."},
    {"whole_data_events", (PyCFunction)(void (*)(void))whole_data_events, METH_FASTCALL,
     "whole_data_events(chunk, limit, t_ns, event_type) -> the events of whole one-line "
     "data: events, or None."},
    {"chunked_data_events", (PyCFunction)(void (*)(void))chunked_data_events, METH_FASTCALL,
     "chunked_data_events(read, limit, t_ns, event_type) -> the events of a read of whole "
     "chunks of whole one-line data: events, or None."},
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
    return PyModule_Create(&module);
}
