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
 *   CommonPush, Reader
 *       a pushed stream's common reads, the socket read included, as the connection's reader
 *       callback (issue 47)
 *   chat_content_events(read, limit, t_ns, parser, output_ns)
 *       a read of whole chunks of plain chat content chunks and [DONE], decoded, classified
 *       and stamped in one call (readpath.py_chat_content_events; issue 47)
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

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

/* Take every message off fd's error queue: a send stamp (labkit.wire.lean.stamps) that came
 * after the write looked for it wakes the reader (the queue reads as an error) with nothing
 * to read, and would wake it again each loop iteration until taken. Only on a read that
 * found nothing, so never on a token's path. */
static void drain_error_queue(int fd) {
#ifdef MSG_ERRQUEUE
    char control[512];
    for (int i = 0; i < 64; i++) {
        struct msghdr msg;
        memset(&msg, 0, sizeof(msg));
        msg.msg_control = control;
        msg.msg_controllen = sizeof(control);
        if (recvmsg(fd, &msg, MSG_ERRQUEUE | MSG_DONTWAIT) < 0) return;
    }
#else
    (void)fd;
#endif
}

/* One recvmsg() into read_buffer and its stamps (recv_stamped's answer, unboxed): the bytes
 * read (0: the peer closed), -1 with nothing set for a socket that has nothing now, -2 with
 * OSError set for a failed read. */
static Py_ssize_t recv_into_buffer(int fd, Py_ssize_t size, Py_ssize_t ancillary_size,
                                   long stamp_type, long long stamp_unit, int64_t last_t,
                                   int64_t *t_out, int64_t *seen_out, int *kernel_out) {
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
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
            drain_error_queue(fd);
            return -1;
        }
        PyErr_SetFromErrno(PyExc_OSError);
        return -2;
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
    *t_out = t;
    *seen_out = seen;
    *kernel_out = kernel;
    return (Py_ssize_t)n;
}

/* (data, t_ns, seen_ns, kernel_stamped) of n bytes of read_buffer. */
static PyObject *read_tuple(Py_ssize_t n, int64_t t, int64_t seen, int kernel) {
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
    int64_t t, seen;
    int kernel;
    Py_ssize_t n = recv_into_buffer(fd, size, ancillary_size, stamp_type, stamp_unit, last_t,
                                    &t, &seen, &kernel);
    if (n == -1) Py_RETURN_NONE;
    if (n == -2) return NULL;
    return read_tuple(n, t, seen, kernel);
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

/* The payload of a read of whole chunks (`whole_chunks`): 1 with *payload / *length set
 * (*owned: a buffer the caller frees with PyMem_Free, several chunks' payloads joined; else
 * NULL, the one chunk's payload inside `data`), 0 for a read that is not whole chunks, -1 with
 * MemoryError set. */
static int chunk_payload(const char *data, Py_ssize_t total, const char **payload,
                         Py_ssize_t *length, char **owned) {
    const char *first = NULL;
    Py_ssize_t first_len = 0, payload_total = 0;
    Py_ssize_t chunks = whole_chunks(data, total, &first, &first_len, &payload_total);
    *owned = NULL;
    if (chunks == 0) return 0;
    if (chunks == 1) {
        *payload = first;
        *length = first_len;
        return 1;
    }
    /* Several chunks: their payloads joined, then split (a read that came late). */
    char *joined = PyMem_Malloc((size_t)payload_total);
    if (joined == NULL) {
        PyErr_NoMemory();
        return -1;
    }
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
    *payload = joined;
    *length = payload_total;
    *owned = joined;
    return 1;
}

static PyObject *chunked_data_events(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t limit;
    if (event_args("chunked_data_events", args, nargs, &limit) < 0) return NULL;
    const char *payload = NULL;
    Py_ssize_t length = 0;
    char *owned = NULL;
    int got = chunk_payload(PyBytes_AS_STRING(args[0]), PyBytes_GET_SIZE(args[0]), &payload,
                            &length, &owned);
    if (got <= 0) {
        if (got < 0) return NULL;
        Py_RETURN_NONE;
    }
    PyObject *events = data_events(payload, length, limit, args[2], (PyTypeObject *)args[3]);
    PyMem_Free(owned);
    return events;
}

/* ---- The common chat chunk (issue 47) ---------------------------------------------------
 *
 * chat_content_events(read, limit, t_ns, parser, output_ns): a pushed read as it came, when
 * it is whole chunks of whole one-line `data:` events each of which is `[DONE]` or the plain
 * Chat Completions content chunk
 *
 *   {"id": "...", "object": ..., "created": ..., "model": ..., "system_fingerprint": ...,
 *    "service_tier": ..., "obfuscation": ..., "usage": null,
 *    "choices": [{"index": 0, "delta": {"content": "..."}, "logprobs": null,
 *                 "finish_reason": null}]}
 *
 * (any order; each key at most once, any of them but `choices` and `delta` absent; `object`,
 * `created`, `model`, `service_tier`, `obfuscation` a string, an integer, null or a boolean,
 * none of which OpenAIChatParser reads; `id` a string, with the parser's
 * response_id already set; `system_fingerprint` null or the parser's own, unescaped; every
 * string but the content plain ASCII; JSON whitespace between tokens). Each non-empty content,
 * unescaped as json.loads reads it, goes to parser.text_parts and `t_ns` to `output_ns` once
 * for it: what OpenAIChatParser.on_event and Measurement.event do with those events. The
 * answer is texts * 2 + (1 if a `[DONE]` came). Anything else (a key, value or escape not
 * listed, a lone \u surrogate, a raw control character, invalid UTF-8, a line over `limit`)
 * consumes nothing and answers None: the general path then reads the read. */

#define MAX_COMMON_EVENTS 256

typedef struct {
    const char *at; /* the content's raw bytes, inside the payload */
    Py_ssize_t length;
    int escaped;
} content_span;

static inline const char *skip_ws(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    return p;
}

static inline int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* The code unit of a `\uXXXX` escape at p, or -1 where there is none. */
static inline int hex4(const char *p, const char *end) {
    if (end - p < 6 || p[0] != '\\' || p[1] != 'u') return -1;
    int code = 0;
    for (int i = 2; i < 6; i++) {
        int h = hex_value(p[i]);
        if (h < 0) return -1;
        code = code * 16 + h;
    }
    return code;
}

/* A JSON string starting at the byte after its opening quote: the byte after its closing
 * quote, or NULL where it is not one labkit takes here (a raw control character, a bad escape
 * or a lone surrogate, a byte over 0x7f where `ascii`). *escaped: whether it holds an escape. */
static const char *scan_string(const char *p, const char *end, int ascii, int *escaped) {
    *escaped = 0;
    while (p < end) {
        unsigned char c = (unsigned char)*p;
        if (c == '"') return p + 1;
        if (c < 0x20) return NULL;
        if (c >= 0x80 && ascii) return NULL;
        if (c == '\\') {
            if (p + 1 >= end) return NULL;
            *escaped = 1;
            switch (p[1]) {
            case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
                p += 2;
                continue;
            case 'u': {
                int code = hex4(p, end);
                if (code < 0 || (code >= 0xDC00 && code <= 0xDFFF)) return NULL;
                if (code >= 0xD800 && code <= 0xDBFF) {
                    /* a high surrogate: its low one must follow (a pair is one character) */
                    int low = hex4(p + 6, end);
                    if (low < 0xDC00 || low > 0xDFFF) return NULL;
                    p += 6;
                }
                p += 6;
                continue;
            }
            default:
                return NULL;
            }
        }
        p++;
    }
    return NULL;
}

/* An ignored value: a plain ASCII string, an integer of at most 18 digits, null, true or
 * false; the byte after it, or NULL. */
static const char *scan_scalar(const char *p, const char *end) {
    if (p >= end) return NULL;
    if (*p == '"') {
        int escaped;
        return scan_string(p + 1, end, 1, &escaped);
    }
    if (*p == '-' || (*p >= '0' && *p <= '9')) {
        const char *q = p;
        if (*q == '-') q++;
        if (q >= end || *q < '0' || *q > '9') return NULL;
        if (*q == '0') {
            q++;
        } else {
            while (q < end && *q >= '0' && *q <= '9') q++;
        }
        if (q - p > 18) return NULL;
        if (q < end && (*q == '.' || *q == 'e' || *q == 'E' || (*q >= '0' && *q <= '9')))
            return NULL;
        return q;
    }
    if (end - p >= 4 && memcmp(p, "null", 4) == 0) return p + 4;
    if (end - p >= 4 && memcmp(p, "true", 4) == 0) return p + 4;
    if (end - p >= 5 && memcmp(p, "false", 5) == 0) return p + 5;
    return NULL;
}

/* A literal `word` at p (after whitespace): the byte after it, or NULL. */
static inline const char *expect(const char *p, const char *end, const char *word, size_t n) {
    p = skip_ws(p, end);
    if ((size_t)(end - p) < n || memcmp(p, word, n) != 0) return NULL;
    return p + n;
}

/* An object key at p (after whitespace, the opening quote included): its index in `names`
 * (plain ASCII, no escape), with p moved past its colon; -1 for any other key. */
static int scan_key(const char **pp, const char *end, const char *const *names, int count) {
    const char *p = skip_ws(*pp, end);
    if (p >= end || *p != '"') return -1;
    const char *start = p + 1;
    const char *q = start;
    while (q < end && *q != '"' && *q != '\\' && (unsigned char)*q >= 0x20 &&
           (unsigned char)*q < 0x80)
        q++;
    if (q >= end || *q != '"') return -1;
    size_t n = (size_t)(q - start);
    for (int i = 0; i < count; i++) {
        if (strlen(names[i]) == n && memcmp(start, names[i], n) == 0) {
            p = expect(q + 1, end, ":", 1);
            if (p == NULL) return -1;
            *pp = skip_ws(p, end);
            return i;
        }
    }
    return -1;
}

/* After a member's value: ',' (1, p past it) or '}' (0, p past it); -1 for anything else. */
static int next_member(const char **pp, const char *end) {
    const char *p = skip_ws(*pp, end);
    if (p >= end) return -1;
    *pp = p + 1;
    if (*p == ',') return 1;
    if (*p == '}') return 0;
    return -1;
}

static const char *const chunk_keys[] = {"id",      "object",       "created",
                                         "model",   "system_fingerprint", "choices",
                                         "service_tier", "obfuscation", "usage"};
static const char *const choice_keys[] = {"index", "delta", "logprobs", "finish_reason"};
static const char *const delta_keys[] = {"content"};

/* The choices array `[{...}]` at p: the byte after it, with the content's span, or NULL. */
static const char *scan_choices(const char *p, const char *end, content_span *span) {
    p = expect(p, end, "[", 1);
    if (p == NULL || (p = expect(p, end, "{", 1)) == NULL) return NULL;
    int seen = 0, has_delta = 0;
    for (;;) {
        int key = scan_key(&p, end, choice_keys, 4);
        if (key < 0 || (seen & (1 << key))) return NULL;
        seen |= 1 << key;
        if (key == 0) { /* index: 0 exactly */
            if (p >= end || *p != '0') return NULL;
            p++;
            if (p < end && ((*p >= '0' && *p <= '9') || *p == '.' || *p == 'e' || *p == 'E'))
                return NULL;
        } else if (key == 1) { /* delta: {"content": "<string>"} */
            if ((p = expect(p, end, "{", 1)) == NULL) return NULL;
            if (scan_key(&p, end, delta_keys, 1) != 0) return NULL;
            if (p >= end || *p != '"') return NULL;
            span->at = p + 1;
            p = scan_string(p + 1, end, 0, &span->escaped);
            if (p == NULL) return NULL;
            span->length = (p - 1) - span->at;
            if ((p = expect(p, end, "}", 1)) == NULL) return NULL;
            has_delta = 1;
        } else { /* logprobs, finish_reason: null */
            if (end - p < 4 || memcmp(p, "null", 4) != 0) return NULL;
            p += 4;
        }
        int more = next_member(&p, end);
        if (more < 0) return NULL;
        if (more == 0) break;
    }
    if (!has_delta) return NULL;
    return expect(p, end, "]", 1);
}

/* One event's data (after "data: "): 1 for `[DONE]`, 0 for the common chunk (its content's
 * span set), -1 for anything else. */
static int common_event(const char *p, const char *end, const char *fingerprint,
                        Py_ssize_t fingerprint_len, content_span *span) {
    if (end - p == 6 && memcmp(p, "[DONE]", 6) == 0) return 1;
    if ((p = expect(p, end, "{", 1)) == NULL) return -1;
    int seen = 0;
    for (;;) {
        int key = scan_key(&p, end, chunk_keys, 9);
        if (key < 0 || (seen & (1 << key))) return -1;
        seen |= 1 << key;
        if (key == 0) { /* id: a string (the response id is already the parser's) */
            int escaped;
            if (p >= end || *p != '"' || (p = scan_string(p + 1, end, 1, &escaped)) == NULL)
                return -1;
        } else if (key == 4) { /* system_fingerprint: null, or the parser's own */
            if (end - p >= 4 && memcmp(p, "null", 4) == 0) {
                p += 4;
            } else {
                if (fingerprint == NULL || p >= end || *p != '"') return -1;
                const char *start = p + 1;
                int escaped;
                p = scan_string(start, end, 1, &escaped);
                if (p == NULL || escaped || (p - 1) - start != fingerprint_len ||
                    memcmp(start, fingerprint, (size_t)fingerprint_len) != 0)
                    return -1;
            }
        } else if (key == 5) {
            if ((p = scan_choices(p, end, span)) == NULL) return -1;
        } else if (key == 8) { /* usage: null (the usage chunk itself goes the general way) */
            if (end - p < 4 || memcmp(p, "null", 4) != 0) return -1;
            p += 4;
        } else if ((p = scan_scalar(p, end)) == NULL) {
            return -1;
        }
        int more = next_member(&p, end);
        if (more < 0) return -1;
        if (more == 0) break;
    }
    if (!(seen & (1 << 5))) return -1;
    return skip_ws(p, end) == end ? 0 : -1;
}

/* A content span as json.loads reads it: a new str, or NULL (UnicodeDecodeError cleared and
 * *fallback set where it is not UTF-8; any other error left set). */
static PyObject *content_text(const content_span *span, int *fallback) {
    PyObject *text;
    if (!span->escaped) {
        text = PyUnicode_DecodeUTF8(span->at, span->length, NULL);
    } else {
        char *buffer = PyMem_Malloc((size_t)span->length + 1);
        if (buffer == NULL) return PyErr_NoMemory();
        const char *p = span->at, *end = span->at + span->length;
        Py_ssize_t n = 0;
        while (p < end) {
            if (*p != '\\') {
                buffer[n++] = *p++;
                continue;
            }
            char c = p[1];
            p += 2;
            switch (c) {
            case 'b': buffer[n++] = '\b'; break;
            case 'f': buffer[n++] = '\f'; break;
            case 'n': buffer[n++] = '\n'; break;
            case 'r': buffer[n++] = '\r'; break;
            case 't': buffer[n++] = '\t'; break;
            case 'u': {
                unsigned code = (unsigned)hex4(p - 2, end);
                p += 4;
                if (code >= 0xD800 && code <= 0xDBFF) { /* with its low surrogate */
                    code = 0x10000 + ((code - 0xD800) << 10) + ((unsigned)hex4(p, end) - 0xDC00);
                    p += 6;
                    buffer[n++] = (char)(0xF0 | (code >> 18));
                    buffer[n++] = (char)(0x80 | ((code >> 12) & 0x3F));
                    buffer[n++] = (char)(0x80 | ((code >> 6) & 0x3F));
                    buffer[n++] = (char)(0x80 | (code & 0x3F));
                } else if (code < 0x80) {
                    buffer[n++] = (char)code;
                } else if (code < 0x800) {
                    buffer[n++] = (char)(0xC0 | (code >> 6));
                    buffer[n++] = (char)(0x80 | (code & 0x3F));
                } else {
                    buffer[n++] = (char)(0xE0 | (code >> 12));
                    buffer[n++] = (char)(0x80 | ((code >> 6) & 0x3F));
                    buffer[n++] = (char)(0x80 | (code & 0x3F));
                }
                break;
            }
            default: buffer[n++] = c; /* '"', '\\', '/' */
            }
        }
        text = PyUnicode_DecodeUTF8(buffer, n, NULL);
        PyMem_Free(buffer);
    }
    if (text == NULL && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
        PyErr_Clear();
        *fallback = 1;
    }
    return text;
}

static PyObject *name_response_id, *name_system_fingerprint, *name_text_parts;

/* The common events of a payload (`data_events`'s framing): their count (at most
 * MAX_COMMON_EVENTS) with spans[i] set (at == NULL: `[DONE]`), or -1 for any other payload. */
static Py_ssize_t common_events(const char *payload, Py_ssize_t total, Py_ssize_t limit,
                                const char *fingerprint, Py_ssize_t fingerprint_len,
                                content_span *spans) {
    if (total < 2 || payload[total - 2] != '\n' || payload[total - 1] != '\n' ||
        memchr(payload, '\r', (size_t)total) != NULL)
        return -1;
    Py_ssize_t body = total - 2, at = 0, count = 0;
    for (;;) {
        const char *nl = memchr(payload + at, '\n', (size_t)(body - at));
        Py_ssize_t end = nl == NULL ? body : nl - payload;
        Py_ssize_t length = end - at;
        if (length < 6 || memcmp(payload + at, "data: ", 6) != 0 || length > limit ||
            count == MAX_COMMON_EVENTS)
            return -1;
        content_span *span = &spans[count++];
        int kind = common_event(payload + at + 6, payload + end, fingerprint, fingerprint_len,
                                span);
        if (kind < 0) return -1;
        if (kind == 1) span->at = NULL;
        if (nl == NULL) break;
        if (end + 1 >= body || payload[end + 1] != '\n') return -1;
        at = end + 2;
    }
    return count;
}

/* chat_content_events on `n` bytes at `data` (the read need not be a bytes object yet). */
static PyObject *chat_content(const char *data, Py_ssize_t n, Py_ssize_t limit, PyObject *t_ns,
                              PyObject *parser, PyObject *output_ns) {
    PyObject *response_id = PyObject_GetAttr(parser, name_response_id);
    if (response_id == NULL) return NULL;
    int no_id = response_id == Py_None;
    Py_DECREF(response_id);
    if (no_id) Py_RETURN_NONE; /* the first id is read the general way */
    PyObject *fingerprint_obj = PyObject_GetAttr(parser, name_system_fingerprint);
    if (fingerprint_obj == NULL) return NULL;
    const char *fingerprint = NULL;
    Py_ssize_t fingerprint_len = 0;
    if (PyUnicode_Check(fingerprint_obj)) {
        fingerprint = PyUnicode_AsUTF8AndSize(fingerprint_obj, &fingerprint_len);
        if (fingerprint == NULL) PyErr_Clear(); /* a lone surrogate: never equal */
    }
    const char *payload = NULL;
    Py_ssize_t length = 0;
    char *owned = NULL;
    PyObject *result = NULL, *texts[MAX_COMMON_EVENTS];
    Py_ssize_t made = 0;
    int got = chunk_payload(data, n, &payload, &length, &owned);
    if (got < 0) goto done;
    if (got == 0) goto fall_back;
    content_span spans[MAX_COMMON_EVENTS];
    Py_ssize_t count =
        common_events(payload, length, limit, fingerprint, fingerprint_len, spans);
    if (count < 0) goto fall_back;
    /* Every text made before any is kept: a content that is not UTF-8 leaves all as they were. */
    int is_done = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (spans[i].at == NULL) {
            is_done = 1;
            continue;
        }
        if (spans[i].length == 0) continue;
        int fallback = 0;
        PyObject *text = content_text(&spans[i], &fallback);
        if (text == NULL) {
            if (fallback) goto fall_back;
            goto done;
        }
        texts[made++] = text;
    }
    PyObject *parts = PyObject_GetAttr(parser, name_text_parts);
    if (parts == NULL) goto done;
    if (!PyList_Check(parts)) {
        Py_DECREF(parts);
        goto fall_back;
    }
    for (Py_ssize_t i = 0; i < made; i++) {
        if (PyList_Append(parts, texts[i]) < 0 || PyList_Append(output_ns, t_ns) < 0) {
            Py_DECREF(parts);
            goto done;
        }
    }
    Py_DECREF(parts);
    result = PyLong_FromSsize_t(made * 2 + is_done);
    goto done;
fall_back:
    result = Py_None;
    Py_INCREF(result);
done:
    for (Py_ssize_t i = 0; i < made; i++) Py_DECREF(texts[i]);
    PyMem_Free(owned);
    Py_DECREF(fingerprint_obj);
    return result;
}

static PyObject *chat_content_events(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5 || !PyBytes_Check(args[0]) || !PyList_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError,
                        "chat_content_events takes (bytes, limit, t_ns, parser, output_ns list)");
        return NULL;
    }
    Py_ssize_t limit = PyLong_AsSsize_t(args[1]);
    if (limit == -1 && PyErr_Occurred()) return NULL;
    return chat_content(PyBytes_AS_STRING(args[0]), PyBytes_GET_SIZE(args[0]), limit, args[2],
                        args[3], args[4]);
}

/* ---- A pushed stream's common reads, whole (issue 47) ----------------------------------
 *
 * CommonPush(parser, output_ns, limit, measurement, read_stamps, read_seen, read_kernel,
 * read_windows, window_before): what the recorder's reader does with a pushed read of
 * plain chat content chunks (chat_content_events, its stamps appended, the measurement's
 * first event, first text and end set) and the read itself, in one call from the lean
 * connection's reader callback: no bytes object, no tuple and no Python frame for the
 * commonest read. `attach(fd, ancillary_size, stamp_type, stamp_unit, last_t, timeout_ns)`
 * binds it to the connection for one push, as the socket's reader callback: each call reads
 * once, takes a common read itself (while the connection's framed sink is set: the chunk
 * framing between chunks, and `enabled`: the recorder's SSE parser between events) and
 * hands `on_other` anything else: True (a common read that ended the stream), the read as
 * recv_stamped gives it, nothing consumed (any other read, the peer's close), or the
 * exception a read or a take raised. */

typedef struct {
    PyObject_HEAD
    PyObject *parser, *output_ns, *measurement, *read_stamps, *read_seen, *read_kernel,
        *read_windows, *window_before, *connection, *on_other;
    Py_ssize_t limit, ancillary_size;
    int fd, enabled, kernel, took_latest, first_event_known, first_text_known;
    long stamp_type;
    long long stamp_unit, last_t, t, seen, parse_ns, terminator_ns, timeout_ns, deadline_ns;
    Py_ssize_t taken;
} CommonPush;

static PyObject *name_first_event_ns, *name_first_text_ns, *name_done;

static int common_push_init(CommonPush *self, PyObject *args, PyObject *kwds) {
    PyObject *parser, *output_ns, *measurement, *read_stamps, *read_seen, *read_kernel,
        *read_windows, *window_before;
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "OO!nOOOOOO", &parser, &PyList_Type, &output_ns, &limit,
                          &measurement, &read_stamps, &read_seen, &read_kernel, &read_windows,
                          &window_before))
        return -1;
    if (read_stamps != Py_None &&
        !(PyList_Check(read_stamps) && PyList_Check(read_seen) && PyList_Check(read_kernel))) {
        PyErr_SetString(PyExc_TypeError, "CommonPush: the read lists must be lists");
        return -1;
    }
    if (read_windows != Py_None && !PyDict_Check(read_windows)) {
        PyErr_SetString(PyExc_TypeError, "CommonPush: read_windows must be a dict or None");
        return -1;
    }
    Py_XSETREF(self->parser, Py_NewRef(parser));
    Py_XSETREF(self->output_ns, Py_NewRef(output_ns));
    Py_XSETREF(self->measurement, Py_NewRef(measurement));
    Py_XSETREF(self->read_stamps, Py_NewRef(read_stamps));
    Py_XSETREF(self->read_seen, Py_NewRef(read_seen));
    Py_XSETREF(self->read_kernel, Py_NewRef(read_kernel));
    Py_XSETREF(self->read_windows, Py_NewRef(read_windows));
    Py_XSETREF(self->window_before, Py_NewRef(window_before));
    self->limit = limit;
    self->fd = -1;
    self->enabled = 0;
    self->terminator_ns = -1;
    self->timeout_ns = -1;
    return 0;
}

static PyObject *common_push_attach(CommonPush *self, PyObject *args) {
    int fd;
    Py_ssize_t ancillary_size;
    long stamp_type;
    long long stamp_unit, last_t, timeout_ns;
    PyObject *connection, *on_other;
    if (!PyArg_ParseTuple(args, "inlLLLOO", &fd, &ancillary_size, &stamp_type, &stamp_unit,
                          &last_t, &timeout_ns, &connection, &on_other))
        return NULL;
    Py_XSETREF(self->connection, Py_NewRef(connection));
    Py_XSETREF(self->on_other, Py_NewRef(on_other));
    self->fd = fd;
    self->ancillary_size = ancillary_size;
    self->stamp_type = stamp_type;
    self->stamp_unit = stamp_unit;
    self->last_t = last_t;
    self->timeout_ns = timeout_ns;
    self->deadline_ns = 0;
    self->took_latest = 0;
    Py_RETURN_NONE;
}

/* Sets `name` on the measurement to `value` unless it is set already (*known: it is now). */
static int set_once(PyObject *measurement, PyObject *name, PyObject *value, int *known) {
    PyObject *current = PyObject_GetAttr(measurement, name);
    if (current == NULL) return -1;
    int unset = current == Py_None;
    Py_DECREF(current);
    *known = 1;
    return unset ? PyObject_SetAttr(measurement, name, value) : 0;
}

static PyObject *common_push_read(CommonPush *self, int framed_ok) {
    if (self->fd < 0) {
        PyErr_SetString(PyExc_ValueError, "CommonPush is not attached to a connection");
        return NULL;
    }
    int64_t t, seen;
    int kernel;
    Py_ssize_t n = recv_into_buffer(self->fd, MAX_READ, self->ancillary_size, self->stamp_type,
                                    self->stamp_unit, self->last_t, &t, &seen, &kernel);
    if (n == -1) Py_RETURN_NONE;
    if (n == -2) return NULL;
    self->last_t = t;
    self->t = t;
    self->seen = seen;
    self->kernel = kernel;
    if (self->timeout_ns >= 0) self->deadline_ns = seen + self->timeout_ns;
    self->took_latest = 0;
    if (n == 0 || !framed_ok || !self->enabled) return read_tuple(n, t, seen, kernel);
    int64_t t_read = clock_ns(CLOCK_MONOTONIC);
    PyObject *t_obj = PyLong_FromLongLong(t), *seen_obj = NULL, *result = NULL;
    if (t_obj == NULL) return NULL;
    PyObject *got =
        chat_content(read_buffer, n, self->limit, t_obj, self->parser, self->output_ns);
    if (got == NULL) goto done;
    if (got == Py_None) {
        result = read_tuple(n, t, seen, kernel);
        goto done;
    }
    long code = PyLong_AsLong(got);
    if (code == -1 && PyErr_Occurred()) goto done;
    seen_obj = PyLong_FromLongLong(seen);
    if (seen_obj == NULL) goto done;
    if (self->read_stamps != Py_None &&
        (PyList_Append(self->read_stamps, t_obj) < 0 ||
         PyList_Append(self->read_seen, seen_obj) < 0 ||
         PyList_Append(self->read_kernel, kernel ? Py_True : Py_False) < 0))
        goto done;
    if (code) {
        /* texts x 2 + [DONE]: what the recorder's stamp does for each of those events */
        if (!self->first_event_known &&
            set_once(self->measurement, name_first_event_ns, t_obj, &self->first_event_known) <
                0)
            goto done;
        if (code > 1 && !self->first_text_known &&
            set_once(self->measurement, name_first_text_ns, t_obj, &self->first_text_known) < 0)
            goto done;
        if ((code & 1) && PyObject_SetAttr(self->measurement, name_done, Py_True) < 0) goto done;
        if (code > 3 && self->read_windows != Py_None) {
            /* several output events under one stamp: when the loop saw them arrive */
            PyObject *window = PyObject_CallOneArg(self->window_before, seen_obj);
            if (window == NULL) goto done;
            int failed = window != Py_None && PyDict_SetItem(self->read_windows, t_obj, window) < 0;
            Py_DECREF(window);
            if (failed) goto done;
        }
    }
    self->parse_ns += clock_ns(CLOCK_MONOTONIC) - t_read;
    self->took_latest = 1;
    self->taken++;
    if (code & 1) {
        self->terminator_ns = t;
        result = Py_NewRef(Py_True);
    } else {
        result = Py_NewRef(Py_False);
    }
done:
    Py_XDECREF(got);
    Py_XDECREF(seen_obj);
    Py_DECREF(t_obj);
    return result;
}

static PyObject *name_framed_sink;

/* The reader callback: one read (common_push_read, with the connection's framed sink); what
 * is not a common read taken goes to on_other: True, the read's tuple, or the exception. */
static PyObject *common_push_step(CommonPush *self) {
    if (self->connection == NULL || self->on_other == NULL) {
        PyErr_SetString(PyExc_ValueError, "CommonPush is not attached to a connection");
        return NULL;
    }
    PyObject *framed = PyObject_GetAttr(self->connection, name_framed_sink);
    if (framed == NULL) return NULL;
    int framed_ok = framed != Py_None;
    Py_DECREF(framed);
    PyObject *got = common_push_read(self, framed_ok);
    if (got == NULL) {
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        PyErr_NormalizeException(&type, &value, &traceback);
        if (value == NULL) {
            Py_XDECREF(type);
            Py_XDECREF(traceback);
            return NULL;
        }
        if (traceback != NULL) PyException_SetTraceback(value, traceback);
        Py_XDECREF(type);
        Py_XDECREF(traceback);
        got = value;
    }
    if (got == Py_None || got == Py_False) return got;
    /* on_other may detach this object: hold it for the call */
    PyObject *on_other = Py_NewRef(self->on_other);
    PyObject *out = PyObject_CallOneArg(on_other, got);
    Py_DECREF(on_other);
    Py_DECREF(got);
    return out;
}

static PyObject *common_push_call(CommonPush *self, PyObject *args, PyObject *kwds) {
    if (PyTuple_GET_SIZE(args) != 0 || kwds != NULL) {
        PyErr_SetString(PyExc_TypeError, "CommonPush takes no arguments");
        return NULL;
    }
    return common_push_step(self);
}

static int common_push_traverse(CommonPush *self, visitproc visit, void *arg) {
    Py_VISIT(self->connection);
    Py_VISIT(self->on_other);
    Py_VISIT(self->parser);
    Py_VISIT(self->output_ns);
    Py_VISIT(self->measurement);
    Py_VISIT(self->read_stamps);
    Py_VISIT(self->read_seen);
    Py_VISIT(self->read_kernel);
    Py_VISIT(self->read_windows);
    Py_VISIT(self->window_before);
    return 0;
}

static int common_push_clear(CommonPush *self) {
    Py_CLEAR(self->connection);
    Py_CLEAR(self->on_other);
    Py_CLEAR(self->parser);
    Py_CLEAR(self->output_ns);
    Py_CLEAR(self->measurement);
    Py_CLEAR(self->read_stamps);
    Py_CLEAR(self->read_seen);
    Py_CLEAR(self->read_kernel);
    Py_CLEAR(self->read_windows);
    Py_CLEAR(self->window_before);
    return 0;
}

static void common_push_dealloc(CommonPush *self) {
    PyObject_GC_UnTrack(self);
    common_push_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *common_push_detach(CommonPush *self, PyObject *unused) {
    self->fd = -1;
    Py_CLEAR(self->connection);
    Py_CLEAR(self->on_other);
    Py_RETURN_NONE;
}

static PyMethodDef common_push_methods[] = {
    {"detach", (PyCFunction)common_push_detach, METH_NOARGS,
     "Let go of the connection (no more reads)."},
    {"attach", (PyCFunction)common_push_attach, METH_VARARGS,
     "attach(fd, ancillary_size, stamp_type, stamp_unit, last_t, timeout_ns, connection, "
     "on_other): bind to a connection for one push (timeout_ns -1: none)."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef common_push_members[] = {
    {"enabled", T_INT, offsetof(CommonPush, enabled), 0,
     "whether a read may be taken (the SSE parser between events)"},
    {"last_t", T_LONGLONG, offsetof(CommonPush, last_t), 0, "the latest read's stamp"},
    {"t", T_LONGLONG, offsetof(CommonPush, t), READONLY, "the latest read's stamp"},
    {"seen", T_LONGLONG, offsetof(CommonPush, seen), READONLY, "when labkit saw it"},
    {"kernel", T_INT, offsetof(CommonPush, kernel), READONLY, "whether the kernel stamped it"},
    {"took_latest", T_INT, offsetof(CommonPush, took_latest), READONLY,
     "whether the latest read was taken here"},
    {"parse_ns", T_LONGLONG, offsetof(CommonPush, parse_ns), READONLY,
     "the reads' parse time taken here (ns)"},
    {"terminator_ns", T_LONGLONG, offsetof(CommonPush, terminator_ns), READONLY,
     "the stamp of the read that ended the stream here, or -1"},
    {"taken", T_PYSSIZET, offsetof(CommonPush, taken), READONLY, "the reads taken here"},
    {"deadline_ns", T_LONGLONG, offsetof(CommonPush, deadline_ns), READONLY,
     "the latest read's seen_ns plus the timeout (0: none yet)"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject CommonPushType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "labkit.wire._readpath.CommonPush",
    .tp_basicsize = sizeof(CommonPush),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A pushed stream's common reads, read and taken in one call (issue 47).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)common_push_init,
    .tp_call = (ternaryfunc)common_push_call,
    .tp_traverse = (traverseproc)common_push_traverse,
    .tp_clear = (inquiry)common_push_clear,
    .tp_dealloc = (destructor)common_push_dealloc,
    .tp_methods = common_push_methods,
    .tp_members = common_push_members,
};

/* ---- Reader: a lean connection's one reader callback -----------------------------------
 *
 * Reader(fallback): registered with the loop once a connection; each call is its `common`
 * CommonPush's while one is set (a pushed stream), else fallback() (the connection's Python
 * reader). A push then attaches by setting `common`, not by registering anew with the loop
 * (a handle, a selector key and a cancelled handle twice a request). */

typedef struct {
    PyObject_HEAD
    PyObject *fallback;
    PyObject *common; /* a CommonPush, or NULL */
} Reader;

static int reader_init(Reader *self, PyObject *args, PyObject *kwds) {
    PyObject *fallback;
    if (!PyArg_ParseTuple(args, "O", &fallback)) return -1;
    if (!PyCallable_Check(fallback)) {
        PyErr_SetString(PyExc_TypeError, "Reader(fallback): fallback must be callable");
        return -1;
    }
    Py_XSETREF(self->fallback, Py_NewRef(fallback));
    Py_CLEAR(self->common);
    return 0;
}

static PyObject *reader_call(Reader *self, PyObject *args, PyObject *kwds) {
    if (PyTuple_GET_SIZE(args) != 0 || kwds != NULL) {
        PyErr_SetString(PyExc_TypeError, "Reader takes no arguments");
        return NULL;
    }
    if (self->common != NULL) {
        /* held for the call: on_other may detach it */
        PyObject *common = Py_NewRef(self->common);
        PyObject *out = common_push_step((CommonPush *)common);
        Py_DECREF(common);
        return out;
    }
    if (self->fallback == NULL) {
        PyErr_SetString(PyExc_ValueError, "Reader was not initialised");
        return NULL;
    }
    return PyObject_CallNoArgs(self->fallback);
}

static PyObject *reader_get_common(Reader *self, void *closure) {
    return Py_NewRef(self->common != NULL ? self->common : Py_None);
}

static int reader_set_common(Reader *self, PyObject *value, void *closure) {
    if (value == NULL || value == Py_None) {
        Py_CLEAR(self->common);
        return 0;
    }
    if (!PyObject_TypeCheck(value, &CommonPushType)) {
        PyErr_SetString(PyExc_TypeError, "Reader.common must be a CommonPush or None");
        return -1;
    }
    Py_XSETREF(self->common, Py_NewRef(value));
    return 0;
}

static int reader_traverse(Reader *self, visitproc visit, void *arg) {
    Py_VISIT(self->fallback);
    Py_VISIT(self->common);
    return 0;
}

static int reader_clear(Reader *self) {
    Py_CLEAR(self->fallback);
    Py_CLEAR(self->common);
    return 0;
}

static void reader_dealloc(Reader *self) {
    PyObject_GC_UnTrack(self);
    reader_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyGetSetDef reader_getset[] = {
    {"common", (getter)reader_get_common, (setter)reader_set_common,
     "the pushed stream's CommonPush that reads now, or None (fallback reads)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "labkit.wire._readpath.Reader",
    .tp_basicsize = sizeof(Reader),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A lean connection's reader callback: its CommonPush's while set, else fallback().",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)reader_init,
    .tp_call = (ternaryfunc)reader_call,
    .tp_traverse = (traverseproc)reader_traverse,
    .tp_clear = (inquiry)reader_clear,
    .tp_dealloc = (destructor)reader_dealloc,
    .tp_getset = reader_getset,
};

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
    {"chat_content_events", (PyCFunction)(void (*)(void))chat_content_events, METH_FASTCALL,
     "chat_content_events(read, limit, t_ns, parser, output_ns) -> texts * 2 + done for a "
     "read of whole chunks of [DONE] and plain chat content chunks (their texts appended to "
     "parser.text_parts, t_ns to output_ns once each), or None with nothing consumed."},
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
    name_response_id = PyUnicode_InternFromString("response_id");
    name_system_fingerprint = PyUnicode_InternFromString("system_fingerprint");
    name_text_parts = PyUnicode_InternFromString("text_parts");
    name_first_event_ns = PyUnicode_InternFromString("first_event_ns");
    name_first_text_ns = PyUnicode_InternFromString("first_text_ns");
    name_done = PyUnicode_InternFromString("done");
    name_framed_sink = PyUnicode_InternFromString("framed_sink");
    if (name_event == NULL || name_data == NULL || name_t_ns == NULL ||
        name_response_id == NULL || name_system_fingerprint == NULL || name_text_parts == NULL ||
        name_first_event_ns == NULL || name_first_text_ns == NULL || name_done == NULL ||
        name_framed_sink == NULL)
        return NULL;
    if (PyType_Ready(&CommonPushType) < 0 || PyType_Ready(&ReaderType) < 0) return NULL;
    PyObject *mod = PyModule_Create(&module);
    if (mod == NULL) return NULL;
    if (PyModule_AddObjectRef(mod, "CommonPush", (PyObject *)&CommonPushType) < 0 ||
        PyModule_AddObjectRef(mod, "Reader", (PyObject *)&ReaderType) < 0) {
        Py_DECREF(mod);
        return NULL;
    }
    return mod;
}
