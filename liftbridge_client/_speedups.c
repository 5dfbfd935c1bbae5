/* The hot paths in C: an optional accelerator, each function with a pure-Python twin.
 *
 * These functions, each the equivalent of Python code the package keeps (and uses when
 * this module is not built):
 *
 *   serve_routed     liftbridge_client._transport.nats_shortcuts.serve_routed (the MSG walk)
 *   pending_ack      the pending publish a plain success ack on the NATS inbox settles,
 *                    and its Ack, or None when the bytes are anything but the plain shape
 *                    the server sends or name no publish expecting them; the caller then
 *                    decodes them with protobuf, which decides (and words the error): the
 *                    twin is _publish.nats.NatsPublisher._dispatch_decoded
 *   scan_ack         pending_ack's scan alone (its fields), which the tests hold to
 *                    protobuf's decode field by field
 *   header_entries   envelope.plain_header_entries (the headers of a plain publish)
 *   fnv1a_32         exactly_once.mapping.fnv1a_32 (the exactly-once key mapping)
 *   uuid_fields      exactly_once.uuids.fields_of (each message a read_committed read
 *                    sequences)
 *   uuid_bytes       exactly_once.uuids.uuid_bytes_of (each row the exactly-once sink
 *                    publishes)
 *   new_slotted      cls(*values) for a slotted class whose __init__ only stores them
 *                    (exactly_once.sequencer.Envelope, one per message read committed)
 *   publish_command  envelope.encode_message_plain and the PUB command around it
 *                    (_transport.nats_shortcuts.PubBuffer.append), in one piece
 *   publish_request  _publish.wire.plain_publish_request (PublishAsync's request)
 *   split_messages   _transport.h2.framing.split_messages_twin (the gRPC messages of a
 *                    call's DATA bytes: every answer and every message read over h2)
 *   eo_fields        spark._committed.eo_fields_twin (what a read_committed read sequences
 *                    each message by, without a protobuf object)
 *   data_run         _transport.h2.framing.data_run_twin (the DATA frames of one stream
 *                    that follow each other in a read, joined: every message read over h2)
 *   plain_response   _publish.wire.plain_ack (the common PublishAsync answer over h2),
 *                    checked to the last byte where that one looks at the telling ones
 *
 * tests/unit/test_speedups.py runs both against their Python twins on generated
 * inputs. Why C at all: per ack, the Python walk and protobuf's decode were the two
 * largest costs of a pipelined publish (docs/benchmarks.md); building each message
 * twice (the envelope, then the command) came next.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
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

/* ---- fnv1a_32 ------------------------------------------------------------------------ */

/* fnv1a_32(data) -> int: the twin of exactly_once.mapping.fnv1a_32 (the exactly-once
 * layer's key mapping hashes every keyed row's key). */
static PyObject *
fnv1a_32(PyObject *self, PyObject *data)
{
    if (!PyBytes_CheckExact(data)) {
        PyErr_SetString(PyExc_TypeError, "fnv1a_32 takes bytes");
        return NULL;
    }
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(data);
    Py_ssize_t n = PyBytes_GET_SIZE(data);
    uint32_t h = 0x811c9dc5u;
    for (Py_ssize_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x01000193u;
    }
    return PyLong_FromUnsignedLong(h);
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

/* The limits of a plain publish's headers (envelope.MAX_PLAIN_HEADERS and
 * MAX_HEADER_KEY_BYTES; the module exports them and a test holds them equal). */
#define MAX_PLAIN_HEADERS 8
#define MAX_HEADER_KEY_BYTES 32767

/* header_entries(headers, tag) -> bytes | None
 *
 * The twin of envelope.plain_header_entries: the wire bytes of a map<string, bytes> field
 * (tag byte ``tag``) holding ``headers`` in the dict's order, or None outside the plain
 * case (not exactly a dict, more than MAX_PLAIN_HEADERS entries, a name that is not an
 * exact str encoding to at most MAX_HEADER_KEY_BYTES of UTF-8, a value that is not exact
 * bytes). Each entry writes both of its fields, as upb does.
 */
static PyObject *
header_entries(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "header_entries takes 2 arguments");
        return NULL;
    }
    PyObject *headers = args[0];
    long tag = PyLong_AsLong(args[1]);
    if (tag == -1 && PyErr_Occurred())
        return NULL;
    if (tag < 0 || tag > 0x7f) {
        PyErr_SetString(PyExc_ValueError, "header_entries: the tag must fit in one byte");
        return NULL;
    }
    if (!PyDict_CheckExact(headers) || PyDict_GET_SIZE(headers) > MAX_PLAIN_HEADERS)
        Py_RETURN_NONE;
    Py_ssize_t total = 0, pos = 0;
    PyObject *name, *value;
    while (PyDict_Next(headers, &pos, &name, &value)) {
        if (!PyUnicode_CheckExact(name) || !PyBytes_CheckExact(value))
            Py_RETURN_NONE;
        Py_ssize_t name_len;
        if (PyUnicode_AsUTF8AndSize(name, &name_len) == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
                return NULL;
            PyErr_Clear(); /* a lone surrogate: the general path says what is wrong */
            Py_RETURN_NONE;
        }
        if (name_len > MAX_HEADER_KEY_BYTES)
            Py_RETURN_NONE;
        Py_ssize_t value_len = PyBytes_GET_SIZE(value);
        Py_ssize_t entry = 1 + varint_len((size_t)name_len) + name_len + 1 +
                           varint_len((size_t)value_len) + value_len;
        total += 1 + varint_len((size_t)entry) + entry;
    }
    PyObject *result = PyBytes_FromStringAndSize(NULL, total);
    if (result == NULL)
        return NULL;
    char *out = PyBytes_AS_STRING(result);
    pos = 0;
    while (PyDict_Next(headers, &pos, &name, &value)) {
        Py_ssize_t name_len;
        const char *raw = PyUnicode_AsUTF8AndSize(name, &name_len); /* cached: cannot fail */
        Py_ssize_t value_len = PyBytes_GET_SIZE(value);
        Py_ssize_t entry = 1 + varint_len((size_t)name_len) + name_len + 1 +
                           varint_len((size_t)value_len) + value_len;
        *out++ = (char)tag;
        out = put_varint(out, (size_t)entry);
        *out++ = 0x0a;
        out = put_varint(out, (size_t)name_len);
        memcpy(out, raw, (size_t)name_len);
        out += name_len;
        *out++ = 0x12;
        out = put_varint(out, (size_t)value_len);
        out = put_bytes(out, value);
    }
    return result;
}

/* publish_command(pub_head, msg_head, value, entries, inbox_field, cid, policy_field, limit
 *                 [, key]) -> bytes | None
 *
 * The NATS PUB command (pub_head is b"PUB <subject> ") carrying the enveloped Message
 * that envelope.encode_message_plain builds from the same parts (msg_head: the envelope
 * header and the fields up to the value's tag; entries: its headers, field 9), in one
 * piece. A non-empty ``key`` goes in as field 2 before the value: msg_head is then the
 * keyless one (ending in the value's tag), so callers keep one head for every key. None
 * when that message would not be plain (an empty value or correlation id, a correlation
 * id that is not ASCII) or is over ``limit`` bytes: the caller then takes the general
 * path, which encodes it, or says what is wrong.
 */
static PyObject *
publish_command(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8 && nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "publish_command takes 8 or 9 arguments");
        return NULL;
    }
    for (int k = 0; k < 7; k++) {
        if (k == 5 ? !PyUnicode_CheckExact(args[k]) : !PyBytes_CheckExact(args[k])) {
            PyErr_SetString(PyExc_TypeError, "publish_command takes bytes and a str cid");
            return NULL;
        }
    }
    if (nargs == 9 && !PyBytes_CheckExact(args[8])) {
        PyErr_SetString(PyExc_TypeError, "publish_command takes the key as bytes");
        return NULL;
    }
    PyObject *pub_head = args[0], *msg_head = args[1], *value = args[2], *entries = args[3];
    PyObject *inbox = args[4], *cid = args[5], *policy = args[6];
    PyObject *key = nargs == 9 ? args[8] : NULL;
    Py_ssize_t limit = PyLong_AsSsize_t(args[7]);
    if (limit == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t value_len = PyBytes_GET_SIZE(value);
    if (value_len == 0 || !PyUnicode_IS_ASCII(cid) || PyUnicode_GET_LENGTH(cid) == 0)
        Py_RETURN_NONE;
    Py_ssize_t head_len = PyBytes_GET_SIZE(msg_head);
    Py_ssize_t key_len = key == NULL ? 0 : PyBytes_GET_SIZE(key);
    /* A key replaces the head's last byte, the value's tag, with the key's field and then
     * that tag again: a head ending otherwise is not one this knows. */
    if (key_len && (head_len == 0 || PyBytes_AS_STRING(msg_head)[head_len - 1] != 0x1a))
        Py_RETURN_NONE;
    Py_ssize_t cid_len = PyUnicode_GET_LENGTH(cid);
    Py_ssize_t size = head_len + (key_len ? varint_len((size_t)key_len) + key_len + 1 : 0) +
                      varint_len((size_t)value_len) + value_len + PyBytes_GET_SIZE(entries) +
                      PyBytes_GET_SIZE(inbox) + 1 + varint_len((size_t)cid_len) + cid_len +
                      PyBytes_GET_SIZE(policy);
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
    if (key_len) {
        memcpy(at, PyBytes_AS_STRING(msg_head), (size_t)(head_len - 1));
        at += head_len - 1;
        *at++ = 0x12; /* Message field 2 (key), length-delimited */
        at = put_varint(at, (size_t)key_len);
        at = put_bytes(at, key);
        *at++ = 0x1a; /* then the value's tag, as the head had it */
    } else {
        at = put_bytes(at, msg_head);
    }
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

/* publish_request(value, stream, partition, correlation_id, ack_policy, key, entries)
 *     -> bytes | None
 *
 * The twin of _publish.wire.plain_publish_request, same arguments, same bytes: the gRPC
 * message (5-byte head, then the protobuf) of a PublishRequest with no offset check; None
 * for an empty value, stream or correlation id, or an ack policy other than 0-2. (Any
 * partition from 0 to 2**31-1 is encoded here; the twin leaves those from 128 to protobuf.)
 */
static PyObject *
publish_request(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7 || !PyBytes_CheckExact(args[0]) || !PyUnicode_Check(args[1]) ||
        !PyLong_Check(args[2]) || !PyUnicode_Check(args[3]) || !PyLong_Check(args[4]) ||
        !PyBytes_CheckExact(args[5]) || !PyBytes_CheckExact(args[6])) {
        PyErr_SetString(PyExc_TypeError,
                        "publish_request takes (bytes, str, int, str, int, bytes, bytes)");
        return NULL;
    }
    PyObject *value = args[0], *key = args[5], *entries = args[6];
    long partition = PyLong_AsLong(args[2]);
    long policy = PyLong_AsLong(args[4]);
    if ((partition == -1 || policy == -1) && PyErr_Occurred()) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    Py_ssize_t stream_len, cid_len;
    const char *stream = PyUnicode_AsUTF8AndSize(args[1], &stream_len);
    if (stream == NULL)
        return NULL;
    const char *cid = PyUnicode_AsUTF8AndSize(args[3], &cid_len);
    if (cid == NULL)
        return NULL;
    Py_ssize_t value_len = PyBytes_GET_SIZE(value), key_len = PyBytes_GET_SIZE(key);
    if (policy < 0 || policy > 2 || partition < 0 || partition > 0x7fffffffL || value_len == 0 ||
        stream_len == 0 || cid_len == 0)
        Py_RETURN_NONE;
    /* ackPolicy (field 8; LEADER, 0, omitted), then expectedOffset (field 9) = -1 */
    static const char no_check[11] = {0x48, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0x01};
    Py_ssize_t size = (key_len ? 1 + varint_len((size_t)key_len) + key_len : 0) + 1 +
                      varint_len((size_t)value_len) + value_len + 1 +
                      varint_len((size_t)stream_len) + stream_len +
                      (partition ? 1 + varint_len((size_t)partition) : 0) +
                      PyBytes_GET_SIZE(entries) + 1 + varint_len((size_t)cid_len) + cid_len +
                      (policy ? 2 : 0) + (Py_ssize_t)sizeof no_check;
    if (size > 0xffffffffLL)
        Py_RETURN_NONE;
    PyObject *out = PyBytes_FromStringAndSize(NULL, 5 + size);
    if (out == NULL)
        return NULL;
    char *at = PyBytes_AS_STRING(out);
    *at++ = 0; /* not compressed */
    *at++ = (char)(size >> 24);
    *at++ = (char)(size >> 16);
    *at++ = (char)(size >> 8);
    *at++ = (char)size;
    if (key_len) {
        *at++ = 0x0a; /* field 1, key */
        at = put_varint(at, (size_t)key_len);
        at = put_bytes(at, key);
    }
    *at++ = 0x12; /* field 2, value */
    at = put_varint(at, (size_t)value_len);
    at = put_bytes(at, value);
    *at++ = 0x1a; /* field 3, stream */
    at = put_varint(at, (size_t)stream_len);
    memcpy(at, stream, (size_t)stream_len);
    at += stream_len;
    if (partition) {
        *at++ = 0x20; /* field 4, partition */
        at = put_varint(at, (size_t)partition);
    }
    at = put_bytes(at, entries); /* field 5, headers */
    *at++ = 0x3a; /* field 7, correlationId */
    at = put_varint(at, (size_t)cid_len);
    memcpy(at, cid, (size_t)cid_len);
    at += cid_len;
    if (policy) {
        *at++ = 0x40; /* field 8, ackPolicy */
        *at++ = (char)policy;
    }
    memcpy(at, no_check, sizeof no_check);
    return out;
}

/* ---- scan_ack ------------------------------------------------------------------------ */

static const unsigned char ACK_HEADER[8] = {0xb9, 0x0e, 0x43, 0xb4, 0, 8, 0, 1};

/* A varint of at most `most` bytes; -1 for anything else (longer, cut): the caller then
 * leaves the whole message to protobuf. */
static inline int
read_varint_of(const unsigned char *p, Py_ssize_t n, Py_ssize_t *at, unsigned long long *out,
               int most)
{
    unsigned long long v = 0;
    for (int shift = 0, k = 0; k < most; k++, shift += 7) {
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

/* A value varint of at most 9 bytes (63 bits: never negative as protobuf reads it). */
static inline int
read_varint(const unsigned char *p, Py_ssize_t n, Py_ssize_t *at, unsigned long long *out)
{
    return read_varint_of(p, n, at, out, 9);
}

/* A tag or a length: protobuf (upb) refuses those of more than 5 bytes, however small
 * their value, so a longer one is left to it. */
static inline int
read_varint32(const unsigned char *p, Py_ssize_t n, Py_ssize_t *at, unsigned long long *out)
{
    return read_varint_of(p, n, at, out, 5);
}

/* A field's value in the scanned bytes: its start and length (0, 0 when absent). */
struct span {
    Py_ssize_t at, len;
};

/* One field of the scanned bytes: its number and wire type, and its value: a varint
 * (wire type 0) or where a length-delimited one lies (wire type 2). */
struct field {
    unsigned number, wire;
    unsigned long long varint;
    struct span span;
};

/* The field at p[*at], stepped over: numbered under 32 (a one-byte tag), a varint or a
 * length-delimited value within the bytes; -1 for anything else (the scans leave such
 * bytes to protobuf). */
static inline int
next_field(const unsigned char *p, Py_ssize_t n, Py_ssize_t *at, struct field *f)
{
    unsigned long long tag, len;
    if (read_varint32(p, n, at, &tag) < 0 || tag > 0xff)
        return -1;
    f->number = (unsigned)(tag >> 3);
    f->wire = (unsigned)(tag & 7);
    if (f->wire == 0)
        return read_varint(p, n, at, &f->varint);
    if (f->wire != 2 || read_varint32(p, n, at, &len) < 0 || len > (unsigned long long)(n - *at))
        return -1;
    f->span.at = *at;
    f->span.len = (Py_ssize_t)len;
    *at += (Py_ssize_t)len;
    return 0;
}

/* Strict UTF-8, as Python's decoder and protobuf's check it: no overlong forms, no
 * surrogates, nothing past U+10FFFF. */
static int
utf8_valid(const unsigned char *p, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    while (i < n) {
        unsigned char c = p[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int more;
        unsigned char lo = 0x80, hi = 0xbf;
        if (c >= 0xc2 && c <= 0xdf)
            more = 1;
        else if (c >= 0xe0 && c <= 0xef) {
            more = 2;
            if (c == 0xe0)
                lo = 0xa0;
            else if (c == 0xed)
                hi = 0x9f;
        }
        else if (c >= 0xf0 && c <= 0xf4) {
            more = 3;
            if (c == 0xf0)
                lo = 0x90;
            else if (c == 0xf4)
                hi = 0x8f;
        }
        else
            return 0;
        if (n - i <= more)
            return 0;
        if (p[i + 1] < lo || p[i + 1] > hi)
            return 0;
        for (int k = 2; k <= more; k++)
            if (p[i + k] < 0x80 || p[i + k] > 0xbf)
                return 0;
        i += more + 1;
    }
    return 1;
}

/* What scan_plain_ack finds in an api.Ack: where its three hot strings are, and its enums. */
struct ack_scan {
    Py_ssize_t at[7], len[7]; /* string fields 1, 2, 3, 5, 6 by number */
    unsigned long long offset, ack_error, ack_policy;
};

/* 0 when p[0:n] is an api.Ack of the plain shape: only fields 1-10, each with its own
 * wire type, strings valid UTF-8, varints under 9 bytes, enums within int32. On such
 * bytes protobuf's decode cannot fail and reads the values found. -1 for anything else:
 * the caller leaves the bytes to protobuf, which decides (and words the error). */
static int
scan_plain_ack(const unsigned char *p, Py_ssize_t n, struct ack_scan *out)
{
    memset(out, 0, sizeof *out);
    struct field f;
    for (Py_ssize_t at = 0; at < n;) {
        if (next_field(p, n, &at, &f) < 0)
            return -1;
        switch (f.number) {
        case 1: case 2: case 3: case 5: case 6:
            /* protobuf checks every occurrence, not only the last one, which it keeps */
            if (f.wire != 2 || !utf8_valid(p + f.span.at, f.span.len))
                return -1;
            out->at[f.number] = f.span.at;
            out->len[f.number] = f.span.len;
            break;
        case 4: case 7: case 8: case 9: case 10:
            if (f.wire != 0)
                return -1;
            if (f.number == 4) /* under 9 bytes: non-negative, as protobuf reads it */
                out->offset = f.varint;
            else if (f.number == 7 || f.number == 10) {
                if (f.varint > 0x7fffffffULL)
                    return -1;
                if (f.number == 7)
                    out->ack_policy = f.varint;
                else
                    out->ack_error = f.varint;
            }
            break;
        default:
            return -1;
        }
    }
    return 0;
}

static inline PyObject *
ack_string(const unsigned char *p, const struct ack_scan *scan, int field)
{
    return PyUnicode_DecodeUTF8((const char *)p + scan->at[field], scan->len[field], NULL);
}

/* The Ack an ack scan returns: an instance of the class the caller names
 * (liftbridge_client.models.Ack), made as models.ack_from_wire makes it - the encoded
 * api.Ack kept to be decoded when a field other than the offset is first read - but
 * without a Python call per slot (three descriptor calls cost more than the scan). The
 * class's slots are found by name once and set through their member descriptors. */
static PyTypeObject *ack_class = NULL;
static PyMemberDef *ack_decoded = NULL, *ack_offset = NULL, *ack_raw = NULL;

static PyMemberDef *
slot_of(PyTypeObject *cls, const char *name)
{
    PyObject *descr = PyDict_GetItemString(cls->tp_dict, name); /* borrowed */
    /* The class's own slot: a descriptor of another class's layout, copied into this
     * one's namespace, would have us write past the end of its instances. */
    if (descr == NULL || !PyObject_TypeCheck(descr, &PyMemberDescr_Type) ||
        PyDescr_TYPE(descr) != cls) {
        PyErr_Format(PyExc_TypeError, "%s has no slot %s", cls->tp_name, name);
        return NULL;
    }
    return ((PyMemberDescrObject *)descr)->d_member;
}

static int
use_ack_class(PyObject *cls)
{
    if ((PyTypeObject *)cls == ack_class)
        return 0;
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "the ack class must be a class");
        return -1;
    }
    PyTypeObject *type = (PyTypeObject *)cls;
    PyMemberDef *decoded = slot_of(type, "_decoded"), *offset = NULL, *raw = NULL;
    if (decoded == NULL || (offset = slot_of(type, "_offset")) == NULL ||
        (raw = slot_of(type, "_raw")) == NULL)
        return -1;
    Py_INCREF(cls);
    Py_XSETREF(ack_class, type);
    ack_decoded = decoded, ack_offset = offset, ack_raw = raw;
    return 0;
}

static PyObject *
new_ack(PyObject *cls, const unsigned char *raw, Py_ssize_t n, unsigned long long offset)
{
    if (use_ack_class(cls) < 0)
        return NULL;
    PyObject *ack = ack_class->tp_alloc(ack_class, 0);
    if (ack == NULL)
        return NULL;
    PyObject *payload = PyBytes_FromStringAndSize((const char *)raw, n);
    PyObject *at = payload == NULL ? NULL : PyLong_FromUnsignedLongLong(offset);
    if (at == NULL || PyMember_SetOne((char *)ack, ack_decoded, Py_None) < 0 ||
        PyMember_SetOne((char *)ack, ack_offset, at) < 0 ||
        PyMember_SetOne((char *)ack, ack_raw, payload) < 0) {
        Py_XDECREF(payload);
        Py_XDECREF(at);
        Py_DECREF(ack);
        return NULL;
    }
    Py_DECREF(payload);
    Py_DECREF(at);
    /* Its slots hold only None, an int, bytes and later the decoded api.Ack: nothing that
     * can lead back to it, so it is never part of a cycle. Untracked, it does not count
     * towards the collector's next run, as an untracked tuple would not (one ack per
     * publish; a pipelined publisher keeps thousands alive). A class with a __dict__
     * could hold anything: that one stays tracked. */
    if (ack_class->tp_dictoffset == 0)
        PyObject_GC_UnTrack(ack);
    return ack;
}

/* The api.Ack inside an enveloped ack of the plain shape (the header the server sends, no
 * CRC; scan_plain_ack), scanned into *scan; NULL for anything else. */
static const unsigned char *
enveloped_ack(PyObject *data, struct ack_scan *scan)
{
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(data);
    Py_ssize_t n = PyBytes_GET_SIZE(data);
    if (n < 8 || memcmp(p, ACK_HEADER, 8) != 0 || scan_plain_ack(p + 8, n - 8, scan) < 0)
        return NULL;
    return p + 8;
}

/* scan_ack(data, ack_class) -> (correlation_id, stream, msg_subject, ack_error, ack_policy,
 *                                ack) | None
 *
 * data: an enveloped Ack; None unless its header is the one the server sends (no CRC)
 * and its payload is an api.Ack of the plain shape (scan_plain_ack). ack: an instance of
 * ack_class over the payload, its offset read (new_ack).
 */
static PyObject *
scan_ack(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyBytes_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "scan_ack takes bytes and the ack class");
        return NULL;
    }
    Py_ssize_t n = PyBytes_GET_SIZE(args[0]);
    struct ack_scan scan;
    const unsigned char *p = enveloped_ack(args[0], &scan);
    if (p == NULL)
        Py_RETURN_NONE;
    PyObject *ack = new_ack(args[1], p, n - 8, scan.offset);
    PyObject *cid = ack == NULL ? NULL : ack_string(p, &scan, 6);
    PyObject *stream = cid == NULL ? NULL : ack_string(p, &scan, 1);
    PyObject *subject = stream == NULL ? NULL : ack_string(p, &scan, 3);
    PyObject *result = subject == NULL ? NULL
                                       : Py_BuildValue("(OOOKKO)", cid, stream, subject,
                                                       scan.ack_error, scan.ack_policy, ack);
    Py_XDECREF(ack);
    Py_XDECREF(cid);
    Py_XDECREF(stream);
    Py_XDECREF(subject);
    return result;
}

/* Whether str `obj` is the UTF-8 text p[0:n] (valid UTF-8: the scan checked it). 0 for
 * anything else, also for a str UTF-8 cannot encode (a lone surrogate): the caller then
 * leaves the ack to the path that compares decoded strings. */
static int
str_is(PyObject *obj, const unsigned char *p, Py_ssize_t n)
{
    if (!PyUnicode_CheckExact(obj))
        return 0;
    Py_ssize_t size;
    const char *text = PyUnicode_AsUTF8AndSize(obj, &size); /* no copy for ASCII */
    if (text == NULL) {
        PyErr_Clear();
        return 0;
    }
    return size == n && memcmp(text, p, (size_t)n) == 0;
}

static PyObject *expect_name = NULL;

/* pending_ack(data, ack_class, entries) -> (entry, ack) | None
 *
 * scan_ack, then what the NATS dispatch does with its fields, in one step: a success
 * ack (ackError OK) with an ack policy this client knows (0-2), whose correlation id
 * names an entry of `entries` (a dict: the pending publishes by correlation id) whose
 * `expect` is exactly (stream, msgSubject) of the ack. None for anything else: the caller
 * decodes the bytes with protobuf and decides (an unknown id, a mismatched ack, an error
 * ack, another shape). Nothing is changed: the caller settles the entry. The ack's
 * strings are compared as bytes, never made into str objects.
 */
static PyObject *
pending_ack(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyBytes_CheckExact(args[0]) || !PyDict_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "pending_ack takes bytes, the ack class and a dict");
        return NULL;
    }
    Py_ssize_t n = PyBytes_GET_SIZE(args[0]);
    struct ack_scan scan;
    const unsigned char *p = enveloped_ack(args[0], &scan);
    if (p == NULL || scan.ack_error != 0 || scan.ack_policy > 2)
        Py_RETURN_NONE;
    if (expect_name == NULL && (expect_name = PyUnicode_InternFromString("expect")) == NULL)
        return NULL;
    PyObject *cid = ack_string(p, &scan, 6);
    if (cid == NULL)
        return NULL;
    PyObject *entry = PyDict_GetItemWithError(args[2], cid); /* borrowed */
    Py_DECREF(cid);
    if (entry == NULL) {
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE;
    }
    Py_INCREF(entry); /* reading an attribute may run code that drops it from the dict */
    PyObject *expect = PyObject_GetAttr(entry, expect_name);
    if (expect == NULL) {
        Py_DECREF(entry);
        return NULL;
    }
    int match = PyTuple_CheckExact(expect) && PyTuple_GET_SIZE(expect) == 2 &&
                str_is(PyTuple_GET_ITEM(expect, 0), p + scan.at[1], scan.len[1]) &&
                str_is(PyTuple_GET_ITEM(expect, 1), p + scan.at[3], scan.len[3]);
    Py_DECREF(expect);
    PyObject *ack = match ? new_ack(args[1], p, n - 8, scan.offset) : NULL;
    PyObject *result = ack == NULL ? NULL : PyTuple_Pack(2, entry, ack);
    Py_DECREF(entry);
    Py_XDECREF(ack);
    if (!match)
        Py_RETURN_NONE;
    return result;
}

/* plain_response(response, ack_class) -> (correlation_id, ack) | None
 *
 * The twin of _publish.wire.plain_ack, exact where that one is quick: a PublishResponse
 * (without its gRPC head) holding exactly field 1, an api.Ack of the plain shape
 * (scan_plain_ack) without error and with an ack policy this client knows (0-2), and
 * field 3, a correlation id the ack names too (its field 6). None for anything else
 * (an asyncError, an error ack, other shapes): the caller decodes it fully. ack: an
 * instance of ack_class over the encoded ack, its offset read (new_ack).
 */
static PyObject *
plain_response(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyBytes_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "plain_response takes bytes and the ack class");
        return NULL;
    }
    PyObject *data = args[0];
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(data);
    Py_ssize_t n = PyBytes_GET_SIZE(data), at = 0;
    Py_ssize_t ack_at = -1, ack_len = 0, cid_at = -1, cid_len = 0;
    while (at < n) {
        unsigned long long tag, value;
        if (read_varint32(p, n, &at, &tag) < 0 || (tag != 0x0a && tag != 0x1a) ||
            read_varint32(p, n, &at, &value) < 0 || value > (unsigned long long)(n - at))
            Py_RETURN_NONE;
        if (tag == 0x0a) {
            if (ack_at >= 0) /* a repeated message field merges: leave it to protobuf */
                Py_RETURN_NONE;
            ack_at = at, ack_len = (Py_ssize_t)value;
        }
        else {
            if (cid_at >= 0)
                Py_RETURN_NONE;
            cid_at = at, cid_len = (Py_ssize_t)value;
        }
        at += (Py_ssize_t)value;
    }
    struct ack_scan scan;
    if (ack_at < 0 || cid_len == 0 || scan_plain_ack(p + ack_at, ack_len, &scan) < 0 ||
        scan.ack_error != 0 || scan.ack_policy > 2 || scan.len[6] != cid_len ||
        memcmp(p + ack_at + scan.at[6], p + cid_at, (size_t)cid_len) != 0)
        Py_RETURN_NONE;
    PyObject *ack = new_ack(args[1], p + ack_at, ack_len, scan.offset);
    if (ack == NULL)
        return NULL;
    /* valid UTF-8 already (the ack's field 6): only memory fails here */
    PyObject *cid = PyUnicode_DecodeUTF8((const char *)p + cid_at, cid_len, NULL);
    if (cid == NULL) {
        Py_DECREF(ack);
        return NULL;
    }
    return Py_BuildValue("(NN)", cid, ack);
}

/* ---- uuid_fields, new_slotted: the read_committed reader's hot path -------------------- */

/* uuid_fields(raw) -> (producer, clock, flags) | None: the twin of
 * exactly_once.uuids.fields_of for exact 16-byte bytes; None for anything else (the twin
 * then says what is wrong). Every message a read_committed read sequences is split so. */
static PyObject *
uuid_fields(PyObject *self, PyObject *raw)
{
    if (!PyBytes_CheckExact(raw) || PyBytes_GET_SIZE(raw) != 16)
        Py_RETURN_NONE;
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(raw);
    uint64_t head = 0;
    for (int i = 0; i < 8; i++)
        head = (head << 8) | p[i];
    unsigned int seq = ((unsigned int)p[8] << 8) | p[9];
    /* Unsigned arithmetic wraps at 64 bits, as the twin's "& _U64". */
    uint64_t clock = ((head >> 32) << 4) | (((head >> 16) & 0xFFFF) << 36) | ((head & 0xFFFF) << 52);
    clock |= (seq >> 10) & 0xF;
    PyObject *producer = PyBytes_FromStringAndSize((const char *)p + 10, 6);
    if (producer == NULL)
        return NULL;
    PyObject *c = PyLong_FromUnsignedLongLong(clock);
    PyObject *f = c == NULL ? NULL : PyLong_FromLong((long)(seq & 0x3FF));
    if (f == NULL) {
        Py_DECREF(producer);
        Py_XDECREF(c);
        return NULL;
    }
    PyObject *out = PyTuple_New(3);
    if (out == NULL) {
        Py_DECREF(producer);
        Py_DECREF(c);
        Py_DECREF(f);
        return NULL;
    }
    PyTuple_SET_ITEM(out, 0, producer);
    PyTuple_SET_ITEM(out, 1, c);
    PyTuple_SET_ITEM(out, 2, f);
    return out;
}

/* uuid_bytes(producer, clock, flags) -> bytes | None: the twin of
 * exactly_once.uuids.uuid_bytes_of, the 16 bytes of the v1 UUID of a 6-byte producer at a
 * clock in [0, 2**64) with flags in 0..0x3ff; None for anything else (the twin then
 * decides). The exactly-once sink makes one per row. */
static PyObject *
uuid_bytes(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "uuid_bytes takes 3 arguments");
        return NULL;
    }
    PyObject *producer = args[0];
    if (!PyBytes_CheckExact(producer) || PyBytes_GET_SIZE(producer) != 6 ||
        !PyLong_CheckExact(args[1]) || !PyLong_CheckExact(args[2]))
        Py_RETURN_NONE;
    unsigned long long clock = PyLong_AsUnsignedLongLong(args[1]);
    if (clock == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear(); /* negative or over 64 bits */
        Py_RETURN_NONE;
    }
    long flags = PyLong_AsLong(args[2]);
    if (flags == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    if (flags < 0 || flags > 0x3FF)
        Py_RETURN_NONE;
    uint64_t time_low = (clock >> 4) & 0xFFFFFFFFu;
    uint64_t time_mid = (clock >> 36) & 0xFFFFu;
    uint64_t time_hi = ((clock >> 52) & 0xFFFFu) | 0x1000u; /* version 1 */
    uint64_t head = (time_low << 32) | (time_mid << 16) | time_hi;
    unsigned int seq = (unsigned int)(((clock << 10) & 0x3C00u) | (unsigned long)flags | 0x8000u);
    PyObject *out = PyBytes_FromStringAndSize(NULL, 16);
    if (out == NULL)
        return NULL;
    unsigned char *at = (unsigned char *)PyBytes_AS_STRING(out);
    for (int i = 0; i < 8; i++)
        at[i] = (unsigned char)(head >> (56 - 8 * i));
    at[8] = (unsigned char)(seq >> 8);
    at[9] = (unsigned char)seq;
    memcpy(at + 10, PyBytes_AS_STRING(producer), 6);
    return out;
}

/* new_slotted(cls, *values) -> an instance of cls with its __slots__ set to values, in
 * order, without calling __init__: the twin of cls(*values) for a slotted class whose
 * __init__ only stores its arguments (exactly_once.sequencer.Envelope, a frozen
 * dataclass: its __init__ stores each field with object.__setattr__, 2 us a message
 * here). Every slot must be given; the slots are the class's own, found once. */
#define MAX_SLOTS 16
static PyTypeObject *slotted_class = NULL;
static PyMemberDef *slotted_members[MAX_SLOTS];
static Py_ssize_t slotted_count = 0;

static int
use_slotted_class(PyObject *cls)
{
    if ((PyTypeObject *)cls == slotted_class)
        return 0;
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "new_slotted takes a class first");
        return -1;
    }
    PyTypeObject *type = (PyTypeObject *)cls;
    PyObject *names = PyDict_GetItemString(type->tp_dict, "__slots__"); /* borrowed */
    if (names == NULL || !PyTuple_CheckExact(names) || PyTuple_GET_SIZE(names) > MAX_SLOTS) {
        PyErr_Format(PyExc_TypeError, "%s has no tuple of at most %d __slots__",
                     type->tp_name, MAX_SLOTS);
        return -1;
    }
    PyMemberDef *members[MAX_SLOTS];
    Py_ssize_t count = PyTuple_GET_SIZE(names);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *name = PyTuple_GET_ITEM(names, i);
        const char *text = PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
        if (text == NULL) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "%s has a slot name that is not a str",
                             type->tp_name);
            return -1;
        }
        if ((members[i] = slot_of(type, text)) == NULL)
            return -1;
    }
    Py_INCREF(cls);
    Py_XSETREF(slotted_class, type);
    memcpy(slotted_members, members, sizeof(members[0]) * (size_t)count);
    slotted_count = count;
    return 0;
}

static PyObject *
new_slotted(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1) {
        PyErr_SetString(PyExc_TypeError, "new_slotted takes a class first");
        return NULL;
    }
    if (use_slotted_class(args[0]) < 0)
        return NULL;
    if (nargs - 1 != slotted_count) {
        PyErr_Format(PyExc_TypeError, "%s takes %zd slot values, got %zd",
                     slotted_class->tp_name, slotted_count, nargs - 1);
        return NULL;
    }
    PyObject *obj = slotted_class->tp_alloc(slotted_class, 0);
    if (obj == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < slotted_count; i++) {
        if (PyMember_SetOne((char *)obj, slotted_members[i], args[i + 1]) < 0) {
            Py_DECREF(obj);
            return NULL;
        }
    }
    return obj;
}

/* ---- message_of: a subscribed api.Message straight into models.Message ---------------- */

/* What scan_message finds in an api.Message (fields by number; the last occurrence wins,
 * as in protobuf). */
struct message_scan {
    struct span bytes[13]; /* 2 key, 3 value, 5 stream, 7 subject, 8 replySubject */
    unsigned long long offset, timestamp, partition;
    int headers; /* field 9 occurred: the map is not empty */
};

/* 0 when p[0:n] is a map<string, bytes> entry protobuf reads without fail: fields 1 (a
 * valid UTF-8 key) and 2 (bytes) only, each with its own wire type. */
static int
scan_header_entry(const unsigned char *p, Py_ssize_t n)
{
    struct field f;
    for (Py_ssize_t at = 0; at < n;) {
        if (next_field(p, n, &at, &f) < 0 || f.wire != 2 || (f.number != 1 && f.number != 2))
            return -1;
        if (f.number == 1 && !utf8_valid(p + f.span.at, f.span.len))
            return -1;
    }
    return 0;
}

/* 0 when p[0:n] is an api.Message of the plain shape: only fields 1-12, each with its own
 * wire type, strings valid UTF-8, header entries as scan_header_entry takes them, varints
 * under 9 bytes (so offsets and timestamps are not negative), partition and ackPolicy
 * within int32. On such bytes protobuf's decode cannot fail and reads the values found.
 * -1 for anything else: the caller leaves the bytes to protobuf, which decides. */
static int
scan_message(const unsigned char *p, Py_ssize_t n, struct message_scan *out)
{
    memset(out, 0, sizeof *out);
    struct field f;
    for (Py_ssize_t at = 0; at < n;) {
        if (next_field(p, n, &at, &f) < 0)
            return -1;
        unsigned field = f.number;
        struct span s = f.span;
        switch (field) {
        case 2: case 3: case 5: case 7: case 8: case 9: case 10: case 11:
            if (f.wire != 2)
                return -1;
            if (field == 9) {
                if (scan_header_entry(p + s.at, s.len) < 0)
                    return -1;
                out->headers = 1;
            }
            else if (field != 2 && field != 3 && !utf8_valid(p + s.at, s.len))
                return -1;
            out->bytes[field] = s; /* the last occurrence wins, as in protobuf */
            break;
        case 1: case 4: case 6: case 12:
            if (f.wire != 0 || ((field == 6 || field == 12) && f.varint > 0x7fffffffULL))
                return -1;
            if (field == 1)
                out->offset = f.varint;
            else if (field == 4)
                out->timestamp = f.varint;
            else if (field == 6)
                out->partition = f.varint;
            break;
        default:
            return -1;
        }
    }
    return 0;
}

/* The classes message_of fills, and their slots (found by name once). */
static PyTypeObject *message_class = NULL, *headers_class = NULL;
enum { M_STREAM, M_PARTITION, M_OFFSET, M_VALUE, M_KEY, M_TIMESTAMP, M_SUBJECT, M_REPLY,
       M_HEADERS, M_SLOTS };
static const char *const message_slots[M_SLOTS] = {
    "stream", "partition", "offset", "value", "key", "timestamp_ns", "subject",
    "reply_subject", "headers"};
static PyMemberDef *message_members[M_SLOTS];
enum { H_PB, H_DICT, H_SERVER, H_SLOTS };
static const char *const headers_slots[H_SLOTS] = {"_pb", "_dict", "_server"};
static PyMemberDef *headers_members[H_SLOTS];
static PyObject *no_server = NULL; /* (None, None): no server header filtered out yet */
static PyObject *empty_headers = NULL;

static int
use_message_classes(PyObject *cls, PyObject *headers_cls, PyObject *empty)
{
    if ((PyTypeObject *)cls == message_class && (PyTypeObject *)headers_cls == headers_class &&
        empty == empty_headers)
        return 0;
    if (!PyType_Check(cls) || !PyType_Check(headers_cls)) {
        PyErr_SetString(PyExc_TypeError, "message_of takes the message and headers classes");
        return -1;
    }
    PyMemberDef *members[M_SLOTS], *hmembers[H_SLOTS];
    for (int i = 0; i < M_SLOTS; i++)
        if ((members[i] = slot_of((PyTypeObject *)cls, message_slots[i])) == NULL)
            return -1;
    for (int i = 0; i < H_SLOTS; i++)
        if ((hmembers[i] = slot_of((PyTypeObject *)headers_cls, headers_slots[i])) == NULL)
            return -1;
    if (no_server == NULL && (no_server = PyTuple_Pack(2, Py_None, Py_None)) == NULL)
        return -1;
    Py_INCREF(cls);
    Py_INCREF(headers_cls);
    Py_INCREF(empty);
    Py_XSETREF(message_class, (PyTypeObject *)cls);
    Py_XSETREF(headers_class, (PyTypeObject *)headers_cls);
    Py_XSETREF(empty_headers, empty);
    memcpy(message_members, members, sizeof members);
    memcpy(headers_members, hmembers, sizeof hmembers);
    return 0;
}

/* A stream's messages share their stream and subject: the str made last for each is kept
 * and given again while the bytes match (str objects are immutable; only identity
 * differs from protobuf's fresh ones). */
static PyObject *last_stream = NULL, *last_subject = NULL;

static PyObject *
shared_str(PyObject **last, const unsigned char *p, struct span s)
{
    if (*last != NULL && str_is(*last, p + s.at, s.len))
        return Py_NewRef(*last);
    PyObject *text = PyUnicode_DecodeUTF8((const char *)p + s.at, s.len, NULL);
    if (text != NULL)
        Py_XSETREF(*last, Py_NewRef(text));
    return text;
}

/* message_of(raw, message_cls, headers_cls, empty) -> message | None
 *
 * The twin of models.owned_message_from_proto(api_pb2.Message.FromString(raw)) for the
 * plain shape (scan_message): an instance of message_cls (models.Message) with its slots
 * set from the wire, without a protobuf object. Headers stay undecoded, as there: when the
 * message has any, `headers` is an instance of headers_cls (models._LazyHeaders) holding
 * raw, to be decoded on first use; else `empty`. None for any other shape: the caller
 * decodes the bytes with protobuf (which raises for what is malformed).
 */
static PyObject *
message_of(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyBytes_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError,
                        "message_of takes bytes, the message and headers classes and the "
                        "empty headers");
        return NULL;
    }
    if (use_message_classes(args[1], args[2], args[3]) < 0)
        return NULL;
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    struct message_scan scan;
    if (scan_message(p, PyBytes_GET_SIZE(args[0]), &scan) < 0)
        Py_RETURN_NONE;
    PyObject *values[M_SLOTS] = {NULL};
    values[M_STREAM] = shared_str(&last_stream, p, scan.bytes[5]);
    values[M_PARTITION] = PyLong_FromUnsignedLongLong(scan.partition);
    values[M_OFFSET] = PyLong_FromUnsignedLongLong(scan.offset);
    values[M_VALUE] = PyBytes_FromStringAndSize((const char *)p + scan.bytes[3].at,
                                                scan.bytes[3].len);
    values[M_KEY] = PyBytes_FromStringAndSize((const char *)p + scan.bytes[2].at,
                                              scan.bytes[2].len);
    values[M_TIMESTAMP] = PyLong_FromUnsignedLongLong(scan.timestamp);
    values[M_SUBJECT] = shared_str(&last_subject, p, scan.bytes[7]);
    values[M_REPLY] = PyUnicode_DecodeUTF8((const char *)p + scan.bytes[8].at,
                                           scan.bytes[8].len, NULL);
    if (scan.headers) {
        PyObject *lazy = headers_class->tp_alloc(headers_class, 0);
        if (lazy != NULL && (PyMember_SetOne((char *)lazy, headers_members[H_PB], args[0]) < 0 ||
                             PyMember_SetOne((char *)lazy, headers_members[H_DICT], Py_None) < 0 ||
                             PyMember_SetOne((char *)lazy, headers_members[H_SERVER], no_server) < 0))
            Py_CLEAR(lazy);
        values[M_HEADERS] = lazy;
    }
    else
        values[M_HEADERS] = Py_NewRef(empty_headers);
    PyObject *msg = NULL;
    for (int i = 0; i < M_SLOTS; i++)
        if (values[i] == NULL)
            goto done;
    msg = message_class->tp_alloc(message_class, 0);
    if (msg == NULL)
        goto done;
    for (int i = 0; i < M_SLOTS; i++)
        if (PyMember_SetOne((char *)msg, message_members[i], values[i]) < 0) {
            Py_CLEAR(msg);
            goto done;
        }
done:
    for (int i = 0; i < M_SLOTS; i++)
        Py_XDECREF(values[i]);
    return msg;
}

/* The next header entry of a message scan_message took, from p[*at] on: where its bytes
 * start (*entry) and its name's (field 1) and value's (field 2) spans in them, each
 * absent or its last occurrence. 0 when no entry is left. */
static int
next_header(const unsigned char *p, Py_ssize_t n, Py_ssize_t *at, const unsigned char **entry,
            struct span *key, struct span *value)
{
    struct field f = {0}, e = {0};
    while (*at < n) {
        next_field(p, n, at, &f); /* scan_message checked every field: it cannot fail */
        if (f.number != 9)
            continue;
        const unsigned char *q = p + f.span.at;
        *key = (struct span){0, 0};
        *value = (struct span){0, 0};
        for (Py_ssize_t eat = 0; eat < f.span.len;) {
            next_field(q, f.span.len, &eat, &e);
            if (e.number == 1)
                *key = e.span;
            else
                *value = e.span;
        }
        *entry = q;
        return 1;
    }
    return 0;
}

/* headers_of(raw) -> (headers, subject, reply_subject) | None
 *
 * The twin of (dict(pb.headers), pb.subject.encode(), pb.replySubject.encode()) for
 * pb = api_pb2.Message.FromString(raw), when raw is of message_of's plain shape: the
 * header map as a dict (the last entry of a name wins, as in protobuf; entries in wire
 * order), and the subject fields' bytes. None for any other shape: the caller decodes.
 */
static PyObject *
headers_of(PyObject *self, PyObject *raw)
{
    if (!PyBytes_CheckExact(raw)) {
        PyErr_SetString(PyExc_TypeError, "headers_of takes bytes");
        return NULL;
    }
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(raw);
    Py_ssize_t n = PyBytes_GET_SIZE(raw);
    struct message_scan scan;
    if (scan_message(p, n, &scan) < 0)
        Py_RETURN_NONE;
    PyObject *headers = PyDict_New();
    if (headers == NULL)
        return NULL;
    const unsigned char *q;
    struct span key, value;
    for (Py_ssize_t at = 0; scan.headers && next_header(p, n, &at, &q, &key, &value);) {
        PyObject *name = PyUnicode_DecodeUTF8((const char *)q + key.at, key.len, NULL);
        PyObject *data = name == NULL ? NULL
                                      : PyBytes_FromStringAndSize((const char *)q + value.at,
                                                                  value.len);
        int failed = data == NULL || PyDict_SetItem(headers, name, data) < 0;
        Py_XDECREF(name);
        Py_XDECREF(data);
        if (failed) {
            Py_DECREF(headers);
            return NULL;
        }
    }
    PyObject *subject = PyBytes_FromStringAndSize((const char *)p + scan.bytes[7].at,
                                                  scan.bytes[7].len);
    PyObject *reply = subject == NULL ? NULL
                                      : PyBytes_FromStringAndSize(
                                            (const char *)p + scan.bytes[8].at, scan.bytes[8].len);
    PyObject *result = reply == NULL ? NULL : PyTuple_Pack(3, headers, subject, reply);
    Py_DECREF(headers);
    Py_XDECREF(subject);
    Py_XDECREF(reply);
    return result;
}

/* eo_fields(raw, uuid_name, clocks_name) -> (offset, uuid, clocks, size) | None
 *
 * What a read_committed read needs of each message to sequence it, from the wire: for
 * pb = api_pb2.Message.FromString(raw) of message_of's plain shape, (pb.offset,
 * pb.headers.get(uuid_name), pb.headers.get(clocks_name), len(pb.key) + len(pb.value)),
 * the names given as UTF-8 bytes (the last entry of a name wins, as in protobuf). None for
 * any other shape: the caller decodes with protobuf. The twin is
 * spark._committed.eo_fields_twin.
 */
static PyObject *
eo_fields(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyBytes_CheckExact(args[0]) || !PyBytes_CheckExact(args[1]) ||
        !PyBytes_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "eo_fields takes three bytes");
        return NULL;
    }
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t n = PyBytes_GET_SIZE(args[0]);
    struct message_scan scan;
    if (scan_message(p, n, &scan) < 0)
        Py_RETURN_NONE;
    const char *names[2] = {PyBytes_AS_STRING(args[1]), PyBytes_AS_STRING(args[2])};
    Py_ssize_t lens[2] = {PyBytes_GET_SIZE(args[1]), PyBytes_GET_SIZE(args[2])};
    const unsigned char *found[2] = {NULL, NULL};
    Py_ssize_t found_len[2] = {0, 0};
    const unsigned char *q;
    struct span key, value;
    for (Py_ssize_t at = 0; scan.headers && next_header(p, n, &at, &q, &key, &value);) {
        for (int k = 0; k < 2; k++)
            if (key.len == lens[k] && memcmp(q + key.at, names[k], (size_t)key.len) == 0) {
                found[k] = q + value.at;
                found_len[k] = value.len;
            }
    }
    PyObject *values[2];
    for (int k = 0; k < 2; k++) {
        if (found[k] == NULL) {
            values[k] = Py_NewRef(Py_None);
            continue;
        }
        values[k] = PyBytes_FromStringAndSize((const char *)found[k], found_len[k]);
        if (values[k] == NULL) {
            if (k == 1)
                Py_DECREF(values[0]);
            return NULL;
        }
    }
    /* api.Message.offset is an int64: protobuf reads a varint above 2**63 as negative. */
    return Py_BuildValue("(LNNn)", (long long)scan.offset, values[0], values[1],
                         scan.bytes[2].len + scan.bytes[3].len);
}

/* ---- split_messages: gRPC messages out of a call's DATA bytes ------------------------- */

/* split_messages(data, max_length) -> (messages, end)
 *
 * The twin of _transport.h2.framing.split_messages_twin: the payloads of the complete,
 * uncompressed gRPC messages of at most max_length bytes at the start of data, in order,
 * and the offset where the walk stopped: at an incomplete message, at a head the caller
 * must refuse (a flag set, too long), or at the end.
 */
static PyObject *
split_messages(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyBytes_CheckExact(args[0]) || !PyLong_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "split_messages takes bytes and an int");
        return NULL;
    }
    long long max_length = PyLong_AsLongLong(args[1]);
    if (max_length == -1 && PyErr_Occurred())
        return NULL;
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t size = PyBytes_GET_SIZE(args[0]), i = 0;
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    while (size - i >= 5) {
        unsigned long long length = ((unsigned long long)p[i + 1] << 24) |
                                    ((unsigned long long)p[i + 2] << 16) |
                                    ((unsigned long long)p[i + 3] << 8) | p[i + 4];
        if (p[i] != 0 || (long long)length > max_length ||
            length > (unsigned long long)(size - i - 5))
            break;
        PyObject *message =
            PyBytes_FromStringAndSize((const char *)p + i + 5, (Py_ssize_t)length);
        if (message == NULL || PyList_Append(out, message) < 0) {
            Py_XDECREF(message);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(message);
        i += 5 + (Py_ssize_t)length;
    }
    PyObject *end = PyLong_FromSsize_t(i);
    if (end == NULL) {
        Py_DECREF(out);
        return NULL;
    }
    PyObject *result = PyTuple_Pack(2, out, end);
    Py_DECREF(out);
    Py_DECREF(end);
    return result;
}

/* ---- data_run: a run of DATA frames of one stream, in one piece --------------------- */

/* data_run(data, i, head, max_frame) -> (payload, flow, end)
 *
 * The twin of _transport.h2.framing.data_run_twin: from offset i, the complete HTTP/2
 * frames whose type, flags and stream id (the 6 bytes after the length) equal head and
 * whose length is at most max_frame, their payloads joined, the sum of their lengths and
 * the offset after the last one. head is a DATA frame's without flags (no padding), so a
 * frame's payload is all of it. A server sends each gRPC message in a frame of its own:
 * a read chunk carries hundreds of these, walked here rather than one by one in Python.
 */
static PyObject *
data_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyBytes_CheckExact(args[0]) || !PyLong_CheckExact(args[1]) ||
        !PyBytes_CheckExact(args[2]) || PyBytes_GET_SIZE(args[2]) != 6 ||
        !PyLong_CheckExact(args[3])) {
        PyErr_SetString(PyExc_TypeError,
                        "data_run takes bytes, an int, 6 bytes of frame head and an int");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    if (start == -1 && PyErr_Occurred())
        return NULL;
    long long max_frame = PyLong_AsLongLong(args[3]);
    if (max_frame == -1 && PyErr_Occurred())
        return NULL;
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    const char *head = PyBytes_AS_STRING(args[2]);
    Py_ssize_t size = PyBytes_GET_SIZE(args[0]);
    if (start < 0 || start > size) {
        PyErr_SetString(PyExc_ValueError, "data_run: offset out of range");
        return NULL;
    }
    /* First the extent, then one copy into a bytes object of the right size. */
    Py_ssize_t i = start, total = 0;
    while (size - i >= 9) {
        Py_ssize_t length = ((Py_ssize_t)p[i] << 16) | ((Py_ssize_t)p[i + 1] << 8) | p[i + 2];
        if (length > max_frame || length > size - i - 9 || memcmp(p + i + 3, head, 6) != 0)
            break;
        total += length;
        i += 9 + length;
    }
    Py_ssize_t end = i;
    PyObject *payload = PyBytes_FromStringAndSize(NULL, total);
    if (payload == NULL)
        return NULL;
    char *out = PyBytes_AS_STRING(payload);
    for (i = start; i < end;) {
        Py_ssize_t length = ((Py_ssize_t)p[i] << 16) | ((Py_ssize_t)p[i + 1] << 8) | p[i + 2];
        memcpy(out, p + i + 9, (size_t)length);
        out += length;
        i += 9 + length;
    }
    return Py_BuildValue("(Nnn)", payload, total, end);
}

/* ---- plain_span and message_columns: a subscription's messages as Spark's columns ---- */

/* plain_span(raws) -> (first, last) | None
 *
 * The offsets of the first and last of raws (a non-empty list of bytes) when every one is
 * an api.Message of the plain shape (scan_message, so protobuf would decode it) and their
 * offsets strictly ascend; None otherwise (the caller decodes them with protobuf).
 */
static PyObject *
plain_span(PyObject *self, PyObject *raws)
{
    if (!PyList_CheckExact(raws)) {
        PyErr_SetString(PyExc_TypeError, "plain_span takes a list of bytes");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(raws);
    unsigned long long first = 0, last = 0;
    struct message_scan scan;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *raw = PyList_GET_ITEM(raws, i);
        if (!PyBytes_CheckExact(raw) ||
            scan_message((const unsigned char *)PyBytes_AS_STRING(raw), PyBytes_GET_SIZE(raw),
                         &scan) < 0 ||
            (i > 0 && scan.offset <= last))
            Py_RETURN_NONE;
        if (i == 0)
            first = scan.offset;
        last = scan.offset;
    }
    if (n == 0)
        Py_RETURN_NONE;
    return Py_BuildValue("(KK)", first, last);
}

/* Where one row's columns lie in its message's bytes. */
struct row_spans {
    PyObject *raw; /* a reference: p points into it */
    const unsigned char *p;
    struct span key, value, subject;
    unsigned long long offset, timestamp;
};

/* A bytes object of n zeroed bytes, to fill. */
static PyObject *
zeroed_bytes(Py_ssize_t n)
{
    PyObject *b = PyBytes_FromStringAndSize(NULL, n);
    if (b != NULL)
        memset(PyBytes_AS_STRING(b), 0, (size_t)n);
    return b;
}

/* message_columns(raws, end, magic[, ordered]) -> (rows, offsets, timestamps, value_offsets, values,
 *                                       key_offsets, keys, key_validity, key_nulls,
 *                                       subject) | None
 *
 * The columns the Spark source makes of a subscription's messages (their stream and
 * partition are the subscription's: constants), straight from the wire bytes, without a
 * protobuf object or a bytes object per row. raws: a list of api.Message bytes; the rows
 * are those before the first offset at or past `end`. Arrow's buffers, little-endian:
 * offsets and timestamps (int64 each), the values' int32 offsets and data, the keys'
 * (an empty key is null: key_validity is the validity bitmap, key_nulls how many are
 * null), and subject: the str every row has, or a list of each row's. None when a message
 * is not of the plain shape (scan_message), offsets do not strictly ascend, a value
 * starts with `magic` (a packed message: the caller's decoding path unpacks it), or a
 * column would outgrow int32 offsets: the caller then decodes with protobuf. ordered
 * false (default true) takes offsets in any order (a read_committed read delivers each
 * transaction at its commit, after messages that came later) and every row: None when
 * one is at or past `end`.
 */
static PyObject *
message_columns(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    long long end;
    if ((nargs != 3 && nargs != 4) || !PyList_CheckExact(args[0]) ||
        !PyLong_CheckExact(args[1]) || !PyBytes_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError,
                        "message_columns takes a list of bytes, an int, bytes and a flag");
        return NULL;
    }
    if ((end = PyLong_AsLongLong(args[1])) == -1 && PyErr_Occurred())
        return NULL;
    int ordered = nargs == 4 ? PyObject_IsTrue(args[3]) : 1;
    if (ordered < 0)
        return NULL;
#if !PY_LITTLE_ENDIAN
    Py_RETURN_NONE; /* Arrow's buffers are little-endian: leave it to protobuf's path */
#endif
    PyObject *raws = args[0];
    const unsigned char *magic = (const unsigned char *)PyBytes_AS_STRING(args[2]);
    Py_ssize_t magic_len = PyBytes_GET_SIZE(args[2]), n = PyList_GET_SIZE(raws), rows = 0;
    struct row_spans *spans = PyMem_Malloc(sizeof *spans * (size_t)(n > 0 ? n : 1));
    if (spans == NULL)
        return PyErr_NoMemory();
    PyObject *result = NULL, *subject = NULL;
    PyObject *bufs[8] = {NULL};
    long long values_total = 0, keys_total = 0;
    int same_subject = 1;
    struct message_scan scan;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *raw = PyList_GET_ITEM(raws, i);
        if (!PyBytes_CheckExact(raw))
            goto none;
        const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(raw);
        if (scan_message(p, PyBytes_GET_SIZE(raw), &scan) < 0 ||
            (ordered && i > 0 && scan.offset <= spans[i - 1].offset))
            goto none;
        if (end < 0 || scan.offset >= (unsigned long long)end) {
            if (!ordered)
                goto none; /* unordered rows have no cut: never drop one silently */
            break; /* offsets are never negative: a negative end takes no row */
        }
        struct row_spans *r = &spans[rows++];
        /* Each row holds its bytes: an allocation below may run a collection, and Python
         * code it runs (a __del__) could empty the caller's list. The scan allocates
         * nothing, so the list cannot change before this. */
        r->raw = Py_NewRef(raw);
        r->p = p;
        r->key = scan.bytes[2];
        r->value = scan.bytes[3];
        r->subject = scan.bytes[7];
        r->offset = scan.offset;
        r->timestamp = scan.timestamp;
        if (r->value.len >= magic_len && memcmp(p + r->value.at, magic, (size_t)magic_len) == 0)
            goto none;
        values_total += r->value.len;
        keys_total += r->key.len;
        if (values_total > 0x7fffffffLL || keys_total > 0x7fffffffLL)
            goto none;
        if (same_subject && rows > 1 &&
            (r->subject.len != spans[0].subject.len ||
             memcmp(p + r->subject.at, spans[0].p + spans[0].subject.at,
                    (size_t)r->subject.len) != 0))
            same_subject = 0;
    }
    /* offsets, timestamps, value offsets, values, key offsets, keys, key validity */
    Py_ssize_t sizes[7] = {8 * rows, 8 * rows, 4 * (rows + 1), (Py_ssize_t)values_total,
                           4 * (rows + 1), (Py_ssize_t)keys_total, (rows + 7) / 8};
    for (int k = 0; k < 7; k++)
        if ((bufs[k] = zeroed_bytes(sizes[k])) == NULL)
            goto done;
    char *offsets = PyBytes_AS_STRING(bufs[0]), *stamps = PyBytes_AS_STRING(bufs[1]);
    char *voffs = PyBytes_AS_STRING(bufs[2]), *values = PyBytes_AS_STRING(bufs[3]);
    char *koffs = PyBytes_AS_STRING(bufs[4]), *keys = PyBytes_AS_STRING(bufs[5]);
    unsigned char *valid = (unsigned char *)PyBytes_AS_STRING(bufs[6]);
    int32_t vat = 0, kat = 0;
    Py_ssize_t nulls = 0;
    if (same_subject) {
        subject = rows ? shared_str(&last_subject, spans[0].p, spans[0].subject)
                       : PyUnicode_FromStringAndSize("", 0);
        if (subject == NULL)
            goto done;
    }
    else if ((subject = PyList_New(rows)) == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < rows; i++) {
        struct row_spans *r = &spans[i];
        int64_t offset = (int64_t)r->offset, stamp = (int64_t)r->timestamp;
        memcpy(offsets + 8 * i, &offset, 8);
        memcpy(stamps + 8 * i, &stamp, 8);
        memcpy(voffs + 4 * i, &vat, 4);
        memcpy(values + vat, r->p + r->value.at, (size_t)r->value.len);
        vat += (int32_t)r->value.len;
        memcpy(koffs + 4 * i, &kat, 4);
        if (r->key.len > 0) {
            memcpy(keys + kat, r->p + r->key.at, (size_t)r->key.len);
            kat += (int32_t)r->key.len;
            valid[i / 8] |= (unsigned char)(1u << (i % 8));
        }
        else
            nulls++;
        if (!same_subject) {
            PyObject *text = shared_str(&last_subject, r->p, r->subject);
            if (text == NULL)
                goto done;
            PyList_SET_ITEM(subject, i, text);
        }
    }
    memcpy(voffs + 4 * rows, &vat, 4);
    memcpy(koffs + 4 * rows, &kat, 4);
    result = Py_BuildValue("(nOOOOOOOnO)", rows, bufs[0], bufs[1], bufs[2], bufs[3], bufs[4],
                           bufs[5], bufs[6], nulls, subject);
    goto done;
none:
    result = Py_NewRef(Py_None);
done:
    for (Py_ssize_t i = 0; i < rows; i++)
        Py_DECREF(spans[i].raw);
    PyMem_Free(spans);
    for (int k = 0; k < 8; k++)
        Py_XDECREF(bufs[k]);
    Py_XDECREF(subject);
    return result;
}

static PyMethodDef methods[] = {
    {"serve_routed", (PyCFunction)(void (*)(void))serve_routed, METH_FASTCALL,
     "The C twin of _transport.nats_shortcuts.serve_routed."},
    {"scan_ack", (PyCFunction)(void (*)(void))scan_ack, METH_FASTCALL,
     "The hot fields of a plain enveloped api.Ack and its Ack, or None."},
    {"pending_ack", (PyCFunction)(void (*)(void))pending_ack, METH_FASTCALL,
     "The pending entry a plain success ack settles and its Ack, or None."},
    {"data_run", (PyCFunction)(void (*)(void))data_run, METH_FASTCALL,
     "A run of one stream's DATA frames: (payload, flow, end)."},
    {"eo_fields", (PyCFunction)(void (*)(void))eo_fields, METH_FASTCALL,
     "A message's offset, two headers and key and value size, from the wire."},
    {"split_messages", (PyCFunction)(void (*)(void))split_messages, METH_FASTCALL,
     "The payloads of the complete gRPC messages at the start of bytes, and where it stopped."},
    {"fnv1a_32", fnv1a_32, METH_O, "The 32-bit FNV-1a hash of bytes."},
    {"uuid_bytes", (PyCFunction)(void (*)(void))uuid_bytes, METH_FASTCALL,
     "the 16 bytes of a v1 UUID of (producer, clock, flags), or None"},
    {"uuid_fields", uuid_fields, METH_O,
     "(producer, clock, flags) of an exactly-once UUID's 16 bytes, or None."},
    {"new_slotted", (PyCFunction)(void (*)(void))new_slotted, METH_FASTCALL,
     "An instance of a slotted class with its slots set, without __init__."},
    {"header_entries", (PyCFunction)(void (*)(void))header_entries, METH_FASTCALL,
     "The wire bytes of a plain map<string, bytes> field, or None."},
    {"publish_command", (PyCFunction)(void (*)(void))publish_command, METH_FASTCALL,
     "The PUB command of a plain enveloped Message, in one piece, or None."},
    {"publish_request", (PyCFunction)(void (*)(void))publish_request, METH_FASTCALL,
     "The gRPC message of a plain PublishRequest, in one piece, or None."},
    {"plain_response", (PyCFunction)(void (*)(void))plain_response, METH_FASTCALL,
     "The correlation id and Ack of a plain PublishResponse, or None."},
    {"message_of", (PyCFunction)(void (*)(void))message_of, METH_FASTCALL,
     "A received api.Message of the plain shape as a models.Message, or None."},
    {"headers_of", headers_of, METH_O,
     "The header map and subject bytes of a plain api.Message, or None."},
    {"plain_span", plain_span, METH_O,
     "The first and last offsets of plain api.Messages in ascending order, or None."},
    {"message_columns", (PyCFunction)(void (*)(void))message_columns, METH_FASTCALL,
     "The Spark source's columns of plain api.Messages, as Arrow buffers, or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "liftbridge_client._speedups",
    "The hot paths in C (optional; the package has a pure-Python twin of each function).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "MAX_PLAIN_HEADERS", MAX_PLAIN_HEADERS) < 0 ||
        PyModule_AddIntConstant(m, "MAX_HEADER_KEY_BYTES", MAX_HEADER_KEY_BYTES) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
