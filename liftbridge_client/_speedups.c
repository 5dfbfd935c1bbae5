/* The NATS ack path in C: an optional accelerator with a pure-Python twin.
 *
 * Three functions, each the equivalent of Python code the package keeps (and uses when
 * this module is not built):
 *
 *   serve_routed     liftbridge_client._transport.nats.serve_routed (the MSG walk)
 *   scan_ack         the hot fields of an enveloped api.Ack, or None when the bytes are
 *                    anything but the plain shape the server sends; the caller then
 *                    decodes them with protobuf, which decides (and words the error)
 *   publish_command  envelope.encode_message_plain and the PUB command around it
 *                    (_transport.nats.PubBuffer.append), in one piece
 *
 * tests/unit/test_speedups.py runs both against their Python twins on generated
 * inputs. Why C at all: per ack, the Python walk and protobuf's decode were the two
 * largest costs of a pipelined publish (docs/benchmarks.md); building each message
 * twice (the envelope, then the command) came next.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#define MAX_CONTROL_LINE 4096

/* bytes.split() and bytes.isspace(): ASCII space, \t, \n, \v, \f, \r. */
static inline int
is_space(unsigned char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r');
}

static inline int
all_digits(const char *p, Py_ssize_t n)
{
    if (n == 0)
        return 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (p[i] < '0' || p[i] > '9')
            return 0;
    return 1;
}

static int
add_count(PyObject *counts, const char *key, Py_ssize_t n)
{
    PyObject *name = PyUnicode_FromString(key);
    if (name == NULL)
        return -1;
    PyObject *old = PyObject_GetItem(counts, name);
    if (old == NULL) {
        Py_DECREF(name);
        return -1;
    }
    PyObject *add = PyLong_FromSsize_t(n);
    PyObject *sum = add == NULL ? NULL : PyNumber_Add(old, add);
    Py_DECREF(old);
    Py_XDECREF(add);
    int rc = sum == NULL ? -1 : PyObject_SetItem(counts, name, sum);
    Py_XDECREF(sum);
    Py_DECREF(name);
    return rc;
}

/* serve_routed(data, table, counts, report) -> (pos, partial)
 *
 * data: bytes; table: dict of int sid -> handler(bytes); counts: nats-py's stats dict or
 * None; report(sid, exc): called for an Exception a handler raised (the walk goes on).
 */
static PyObject *
serve_routed(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "serve_routed takes 4 arguments");
        return NULL;
    }
    PyObject *data = args[0], *table = args[1], *counts = args[2], *report = args[3];
    if (!PyBytes_CheckExact(data) || !PyDict_CheckExact(table)) {
        PyErr_SetString(PyExc_TypeError, "serve_routed takes bytes and a dict");
        return NULL;
    }
    const char *buf = PyBytes_AS_STRING(data);
    Py_ssize_t end = PyBytes_GET_SIZE(data);
    Py_ssize_t pos = 0, served = 0, served_bytes = 0;
    int partial = 0, failed = 0;
    const char *last_sid = NULL;
    Py_ssize_t last_sid_len = 0;
    PyObject *handler = NULL; /* borrowed from table, kept alive by `held` */
    PyObject *held = NULL;
    PyObject *sid_obj = NULL; /* int(sid) of the handler found last */

    while (pos < end) {
        Py_ssize_t left = end - pos;
        if (left < 4 || memcmp(buf + pos, "MSG ", 4) != 0) {
            partial = left < 4 && memcmp(buf + pos, "MSG ", (size_t)left) == 0;
            break;
        }
        /* data.find(b"\r\n", pos, pos + MAX_CONTROL_LINE) */
        Py_ssize_t limit = pos + MAX_CONTROL_LINE < end ? pos + MAX_CONTROL_LINE : end;
        Py_ssize_t eol = -1;
        for (Py_ssize_t i = pos; i + 1 < limit; i++) {
            if (buf[i] == '\r' && buf[i + 1] == '\n') {
                eol = i;
                break;
            }
        }
        if (eol < 0) {
            partial = left < MAX_CONTROL_LINE;
            break;
        }
        const char *line = buf + pos + 4;
        Py_ssize_t line_len = eol - (pos + 4);
        /* line.split(): up to 5 tokens are enough to tell 3 and 4 from the rest */
        const char *tok[5];
        Py_ssize_t tok_len[5];
        int ntok = 0, has_crlf = 0;
        Py_ssize_t i = 0;
        while (i < line_len) {
            unsigned char c = (unsigned char)line[i];
            if (c == '\r' || c == '\n')
                has_crlf = 1;
            if (is_space(c)) {
                i++;
                continue;
            }
            Py_ssize_t start = i;
            while (i < line_len && !is_space((unsigned char)line[i]))
                i++;
            if (ntok < 5) {
                tok[ntok] = line + start;
                tok_len[ntok] = i - start;
            }
            ntok++;
        }
        const char *sid, *size;
        Py_ssize_t sid_len, size_len;
        if (ntok == 3) {
            sid = tok[1], sid_len = tok_len[1], size = tok[2], size_len = tok_len[2];
        }
        else if (ntok == 4 && !has_crlf) {
            sid = tok[1], sid_len = tok_len[1], size = tok[3], size_len = tok_len[3];
        }
        else {
            break;
        }
        if (last_sid == NULL || sid_len != last_sid_len || memcmp(sid, last_sid, sid_len) != 0) {
            if (!all_digits(sid, sid_len))
                break;
            /* int(sid): leading zeros allowed, any length */
            PyObject *key;
            char small[32];
            if (sid_len < 19) {
                memcpy(small, sid, sid_len);
                small[sid_len] = '\0';
                key = PyLong_FromLongLong(strtoll(small, NULL, 10));
            }
            else {
                PyObject *text = PyBytes_FromStringAndSize(sid, sid_len);
                key = text == NULL ? NULL : PyLong_FromString(PyBytes_AS_STRING(text), NULL, 10);
                Py_XDECREF(text);
            }
            if (key == NULL) {
                failed = 1;
                break;
            }
            Py_XDECREF(sid_obj);
            sid_obj = key;
            PyObject *found = PyDict_GetItemWithError(table, key);
            if (found == NULL && PyErr_Occurred()) {
                failed = 1;
                break;
            }
            Py_XINCREF(found);
            Py_XDECREF(held);
            held = found;
            handler = found;
            last_sid = sid;
            last_sid_len = sid_len;
        }
        /* line.endswith(size): the size is the line's last token, nothing after it */
        if (handler == NULL || !all_digits(size, size_len) || is_space((unsigned char)line[line_len - 1]))
            break;
        Py_ssize_t start = eol + 2;
        while (size_len > 1 && *size == '0') /* int(size) takes leading zeros */
            size++, size_len--;
        if (size_len > 15) { /* more than any buffer holds: wait for bytes (as Python's) */
            partial = 1;
            break;
        }
        char small[16];
        memcpy(small, size, size_len);
        small[size_len] = '\0';
        Py_ssize_t stop = start + (Py_ssize_t)strtoll(small, NULL, 10);
        if (stop + 2 > end) {
            partial = 1;
            break;
        }
        pos = stop + 2;
        served++;
        served_bytes += stop - start;
        PyObject *payload = PyBytes_FromStringAndSize(buf + start, stop - start);
        if (payload == NULL) {
            failed = 1;
            break;
        }
        PyObject *result = PyObject_CallOneArg(handler, payload);
        Py_DECREF(payload);
        if (result != NULL) {
            Py_DECREF(result);
            continue;
        }
        if (!PyErr_ExceptionMatches(PyExc_Exception)) {
            failed = 1; /* SystemExit, KeyboardInterrupt...: counted, then raised */
            break;
        }
        PyObject *type, *exc, *tb;
        PyErr_Fetch(&type, &exc, &tb);
        PyErr_NormalizeException(&type, &exc, &tb);
        if (tb != NULL)
            PyException_SetTraceback(exc, tb);
        PyObject *logged = PyObject_CallFunctionObjArgs(report, sid_obj, exc, NULL);
        Py_XDECREF(type);
        Py_XDECREF(exc);
        Py_XDECREF(tb);
        if (logged == NULL) {
            failed = 1;
            break;
        }
        Py_DECREF(logged);
    }
    Py_XDECREF(held);
    Py_XDECREF(sid_obj);
    if (counts != Py_None && served) {
        PyObject *type = NULL, *value = NULL, *tb = NULL;
        if (failed)
            PyErr_Fetch(&type, &value, &tb);
        int rc = add_count(counts, "in_msgs", served);
        if (rc == 0)
            rc = add_count(counts, "in_bytes", served_bytes);
        if (failed) {
            if (rc < 0)
                PyErr_Clear();
            PyErr_Restore(type, value, tb);
        }
        else if (rc < 0) {
            return NULL;
        }
    }
    if (failed)
        return NULL;
    return Py_BuildValue("(nO)", pos, partial ? Py_True : Py_False);
}

/* ---- publish_command ----------------------------------------------------------------- */

static inline Py_ssize_t
varint_len(size_t v)
{
    Py_ssize_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static inline char *
put_varint(char *out, size_t v)
{
    while (v >= 0x80) {
        *out++ = (char)((v & 0x7f) | 0x80);
        v >>= 7;
    }
    *out++ = (char)v;
    return out;
}

static inline char *
put_bytes(char *out, PyObject *b)
{
    Py_ssize_t n = PyBytes_GET_SIZE(b);
    memcpy(out, PyBytes_AS_STRING(b), (size_t)n);
    return out + n;
}

/* publish_command(pub_head, msg_head, value, entries, inbox_field, cid, policy_field, limit)
 *     -> bytes | None
 *
 * The NATS PUB command (pub_head is b"PUB <subject> ") carrying the enveloped Message
 * that envelope.encode_message_plain builds from the same parts (msg_head: the envelope
 * header and the fields up to the value's tag; entries: its headers, field 9), in one
 * piece. None when that message would not be plain (an empty value or correlation id, a
 * correlation id that is not ASCII) or is over ``limit`` bytes: the caller then takes the
 * general path, which encodes it, or says what is wrong.
 */
static PyObject *
publish_command(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "publish_command takes 8 arguments");
        return NULL;
    }
    for (int k = 0; k < 7; k++) {
        if (k == 5 ? !PyUnicode_CheckExact(args[k]) : !PyBytes_CheckExact(args[k])) {
            PyErr_SetString(PyExc_TypeError, "publish_command takes bytes and a str cid");
            return NULL;
        }
    }
    PyObject *pub_head = args[0], *msg_head = args[1], *value = args[2], *entries = args[3];
    PyObject *inbox = args[4], *cid = args[5], *policy = args[6];
    Py_ssize_t limit = PyLong_AsSsize_t(args[7]);
    if (limit == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t value_len = PyBytes_GET_SIZE(value);
    if (value_len == 0 || !PyUnicode_IS_ASCII(cid) || PyUnicode_GET_LENGTH(cid) == 0)
        Py_RETURN_NONE;
    Py_ssize_t cid_len = PyUnicode_GET_LENGTH(cid);
    Py_ssize_t size = PyBytes_GET_SIZE(msg_head) + varint_len((size_t)value_len) + value_len +
                      PyBytes_GET_SIZE(entries) + PyBytes_GET_SIZE(inbox) + 1 +
                      varint_len((size_t)cid_len) + cid_len + PyBytes_GET_SIZE(policy);
    if (size > limit)
        Py_RETURN_NONE;
    char digits[24];
    int ndigits = snprintf(digits, sizeof digits, "%zd", size);
    Py_ssize_t total = PyBytes_GET_SIZE(pub_head) + ndigits + 2 + size + 2;
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL)
        return NULL;
    char *at = PyBytes_AS_STRING(out);
    at = put_bytes(at, pub_head);
    memcpy(at, digits, (size_t)ndigits);
    at += ndigits;
    *at++ = '\r';
    *at++ = '\n';
    at = put_bytes(at, msg_head);
    at = put_varint(at, (size_t)value_len);
    at = put_bytes(at, value);
    at = put_bytes(at, entries);
    at = put_bytes(at, inbox);
    *at++ = 0x5a; /* field 11 (correlationId), length-delimited */
    at = put_varint(at, (size_t)cid_len);
    memcpy(at, PyUnicode_1BYTE_DATA(cid), (size_t)cid_len);
    at += cid_len;
    at = put_bytes(at, policy);
    *at++ = '\r';
    *at++ = '\n';
    return out;
}

/* ---- scan_ack ------------------------------------------------------------------------ */

static const unsigned char ACK_HEADER[8] = {0xb9, 0x0e, 0x43, 0xb4, 0, 8, 0, 1};

/* A varint of at most 9 bytes (63 bits); -1 for anything else (longer, cut): the
 * caller then leaves the whole ack to protobuf. */
static inline int
read_varint(const unsigned char *p, Py_ssize_t n, Py_ssize_t *at, unsigned long long *out)
{
    unsigned long long v = 0;
    for (int shift = 0, k = 0; k < 9; k++, shift += 7) {
        if (*at >= n)
            return -1;
        unsigned char b = p[(*at)++];
        v |= (unsigned long long)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return 0;
        }
    }
    return -1;
}

/* scan_ack(data) -> (correlation_id, stream, msg_subject, ack_error, ack_policy) | None
 *
 * data: an enveloped Ack. None unless the header is the one the server sends (no CRC)
 * and the payload holds only api.Ack's fields 1-10, each with its own wire type, its
 * strings valid UTF-8, its varints under 9 bytes and its enums within int32: on those
 * bytes protobuf's decode cannot fail and reads these values.
 */
static PyObject *
scan_ack(PyObject *self, PyObject *data)
{
    if (!PyBytes_CheckExact(data)) {
        PyErr_SetString(PyExc_TypeError, "scan_ack takes bytes");
        return NULL;
    }
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(data);
    Py_ssize_t n = PyBytes_GET_SIZE(data);
    if (n < 8 || memcmp(p, ACK_HEADER, 8) != 0)
        Py_RETURN_NONE;
    Py_ssize_t at = 8;
    Py_ssize_t str_at[7] = {0}, str_len[7] = {0}; /* fields 1, 2, 3, 5, 6 by number */
    unsigned long long ack_error = 0, ack_policy = 0;
    while (at < n) {
        unsigned long long tag, value;
        if (read_varint(p, n, &at, &tag) < 0 || tag > 0xff)
            Py_RETURN_NONE;
        unsigned field = (unsigned)(tag >> 3), wire = (unsigned)(tag & 7);
        switch (field) {
        case 1: case 2: case 3: case 5: case 6:
            if (wire != 2 || read_varint(p, n, &at, &value) < 0 || value > (unsigned long long)(n - at))
                Py_RETURN_NONE;
            str_at[field] = at; /* the last occurrence wins, as in protobuf */
            str_len[field] = (Py_ssize_t)value;
            at += (Py_ssize_t)value;
            break;
        case 4: case 7: case 8: case 9: case 10:
            if (wire != 0 || read_varint(p, n, &at, &value) < 0)
                Py_RETURN_NONE;
            if (field == 7 || field == 10) {
                if (value > 0x7fffffffULL)
                    Py_RETURN_NONE;
                if (field == 7)
                    ack_policy = value;
                else
                    ack_error = value;
            }
            break;
        default:
            Py_RETURN_NONE;
        }
    }
    PyObject *strs[7] = {NULL};
    PyObject *result = NULL;
    static const int fields[5] = {1, 2, 3, 5, 6};
    for (int k = 0; k < 5; k++) {
        int f = fields[k];
        strs[f] = PyUnicode_DecodeUTF8((const char *)p + str_at[f], str_len[f], NULL);
        if (strs[f] == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
                goto done;
            PyErr_Clear(); /* not UTF-8: protobuf refuses it, and says so */
            Py_INCREF(Py_None);
            result = Py_None;
            goto done;
        }
    }
    result = Py_BuildValue("(OOOKK)", strs[6], strs[1], strs[3], ack_error, ack_policy);
done:
    for (int f = 0; f < 7; f++)
        Py_XDECREF(strs[f]);
    return result;
}

static PyMethodDef methods[] = {
    {"serve_routed", (PyCFunction)(void (*)(void))serve_routed, METH_FASTCALL,
     "The C twin of _transport.nats.serve_routed."},
    {"scan_ack", scan_ack, METH_O, "The hot fields of a plain enveloped api.Ack, or None."},
    {"publish_command", (PyCFunction)(void (*)(void))publish_command, METH_FASTCALL,
     "The PUB command of a plain enveloped Message, in one piece, or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "liftbridge_client._speedups",
    "The NATS ack path in C (optional; the package has a pure-Python twin of each function).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    return PyModule_Create(&module);
}
