/* The transfer engine's per-message work in C (dlxtool.broker.wire._hotpath). Optional: where it is not
 * built, the Python code it stands in for runs instead, with the same results.
 *
 * read_deliveries: the consumer deliveries in a run of received frames (dlxtool.broker.wire.frames.FastInput).
 * publish_frames: the frames of one publish (dlxtool.broker.wire.frames._frames).
 * scan_headers, splice_headers: reading and splicing the header table of encoded properties, for replay's
 *   fast path (dlxtool.ops.replay_raw). This file knows the AMQP wire format and nothing else: which headers
 *   matter, what their values mean and what a replayed message carries are decided in Python, which passes
 *   every name in and gets encoded values back (tests/broker/test_hotpath.py checks that no such knowledge
 *   comes back here). Decoding a header table costs Python ~20 us; these walk the bytes in well under 1 us.
 *   All reads are bounds-checked: input comes off the wire.
 *
 * scan_headers(props, drop, report, picks[, slow_names, slow_prefixes]) -> (picked, reported) | None
 *
 *   props          property flags + property fields, as in a content header frame after body-size
 *   drop           header names (tuple of bytes) splice_headers will remove: every other header is copied byte for
 *                  byte, so its value must be one the Python codec writes back the same (else None)
 *   report         header names whose encoded values are returned
 *   picks          ((name, fields), ...): headers to read fields of, fields a tuple of names
 *   slow_names     lowercase header names (bytes): a header with one of them, in any ASCII case, makes the
 *                  answer None (dlxtool.conventions.fast_path_triggers: the message is Python's to read)
 *   slow_prefixes  the same for names that start with one of these
 *
 *   picked         per pick: None (absent); when the header is a table, that table with only the entries named in
 *                  `fields` (in its order, encoded with its 4-byte size: dlxtool.amqp_values.decode_field_table
 *                  reads it); a list of those when it is an array of tables; else False
 *   reported       ((name, encoded value), ...) of the `report` headers present, in table order; an encoded
 *                  value is its kind byte + payload (dlxtool.amqp_values.decode_field_value reads it)
 *   None           anything outside the shapes this copies exactly: no header table, a second property-flags
 *                  word, trailing bytes, a header name twice, more than MAX_KEYS headers, a kept value Python
 *                  would write back otherwise, malformed bytes.
 *
 * fingerprint(props, body) -> str | None
 *
 *   16 hex digits of BLAKE2b with an 8-byte digest of: the size of props without its header table (4 bytes, big
 *   endian), props without its header table (the headers flag cleared), body. What
 *   dlxtool.ops.provenance.source_fingerprint computes with hashlib (tests/broker/test_hotpath.py compares them);
 *   None where props has a header table that does not parse (find_headers), left to that function, and for a
 *   body over FINGERPRINT_MAX_BODY bytes (hashlib's vectorised BLAKE2b is faster there, and releases the GIL).
 *
 * splice_headers(props, drop, append) -> bytes | None
 *
 *   props with the header table's entries named in `drop` left out and `append` (encoded table entries: name +
 *   value, as many as wanted) added at its end; flags and the other properties as they are. None where the
 *   properties do not parse (as scan_headers).
 *
 * bloom(filter, key, add) -> bool
 *
 *   Three bits of hash(key) in a Bloom filter (a writable buffer), read and, with add, set: the bits
 *   dlxtool.ops.provenance.CopyGuard sets in Python (tests/broker/test_hotpath.py compares the bytes).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Sizes read off the wire (32-bit, unsigned) are held in Py_ssize_t: where that is 32 bits too, one of 2^31 or
 * more turns negative and slips past every bounds check. Not built there (setup.py: optional): Python path. */
#if SIZEOF_SIZE_T < 8
#error "dlxtool.broker.wire._hotpath needs a 64-bit Py_ssize_t"
#endif

#define MAX_DEPTH 64           /* nested tables/arrays deeper than this: None (the Python path) */
#define MAX_KEYS 64            /* top-level headers tracked for duplicates */
#define MAX_PICKS 8
#define FINGERPRINT_MAX_BODY 2048   /* larger bodies: hashlib (see fingerprint) */

typedef struct {
    const uint8_t *p;
    Py_ssize_t n;
} span;

static uint32_t u32(const uint8_t *b) { return ((uint32_t)b[0] << 24) | (b[1] << 16) | (b[2] << 8) | b[3]; }

static uint64_t u64(const uint8_t *b) { return ((uint64_t)u32(b) << 32) | u32(b + 4); }

/* Strict UTF-8, as Python's decoder: no overlong forms, no surrogates, nothing above U+10FFFF. */
static int valid_utf8(const uint8_t *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) { i++; continue; }
        int need;
        uint8_t lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) need = 1;
        else if (c == 0xE0) { need = 2; lo = 0xA0; }
        else if (c == 0xED) { need = 2; hi = 0x9F; }
        else if (c >= 0xE1 && c <= 0xEF) need = 2;
        else if (c == 0xF0) { need = 3; lo = 0x90; }
        else if (c >= 0xF1 && c <= 0xF3) need = 3;
        else if (c == 0xF4) { need = 3; hi = 0x8F; }
        else return 0;
        if (i + need >= n) return 0;   /* truncated sequence */
        if (s[i + 1] < lo || s[i + 1] > hi) return 0;
        for (int k = 2; k <= need; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xBF) return 0;
        i += need + 1;
    }
    return 1;
}

/* Offset just past the field value whose kind byte is at b[o] (pika's sizes), or -1 when it is malformed,
 * runs past `end`, or is of a kind pika cannot decode. Nested tables and arrays are checked whole. `strict`
 * (a value copied to the output): -1 too for what the Python path would not write back byte for byte, a long
 * string that is not UTF-8 (pika decodes it as bytes, written back as 'x'), a boolean byte other than 0/1
 * (written back as 1), a table with a key twice (a dict keeps one). */
static Py_ssize_t skip_table_body(const uint8_t *b, Py_ssize_t o, Py_ssize_t end, int depth, int strict);

static Py_ssize_t skip_value(const uint8_t *b, Py_ssize_t o, Py_ssize_t end, int depth, int strict) {
    if (o >= end) return -1;
    uint8_t kind = b[o++];
    Py_ssize_t size;
    switch (kind) {
    case 'V': return o;
    case 't': if (strict && o < end && b[o] > 1) return -1; size = 1; break;
    case 'b': case 'B': size = 1; break;
    case 'U': case 'u': case 's': size = 2; break;
    case 'I': case 'i': case 'f': size = 4; break;
    case 'D': size = 5; break;
    case 'L': case 'l': case 'd': case 'T': size = 8; break;
    case 'S': case 'x': case 'A': case 'F': {
        if (end - o < 4) return -1;
        Py_ssize_t n = u32(b + o);
        o += 4;
        if (n > end - o) return -1;
        if (strict && kind == 'S' && !valid_utf8(b + o, n)) return -1;
        if (kind == 'F') return skip_table_body(b, o, o + n, depth + 1, strict) < 0 ? -1 : o + n;
        if (kind == 'A') {
            if (depth + 1 > MAX_DEPTH) return -1;
            Py_ssize_t i = o;
            while (i < o + n) {
                i = skip_value(b, i, o + n, depth + 1, strict);
                if (i < 0) return -1;
            }
        }
        return o + n;
    }
    default: return -1;
    }
    return size > end - o ? -1 : o + size;
}

/* Checks a table's entries between o and end (the 4-byte size already read). 0, or -1. */
static Py_ssize_t skip_table_body(const uint8_t *b, Py_ssize_t o, Py_ssize_t end, int depth, int strict) {
    if (depth > MAX_DEPTH) return -1;
    Py_ssize_t keys[MAX_KEYS], nkeys = 0;   /* offsets of the keys' length bytes */
    while (o < end) {
        Py_ssize_t at = o, klen = b[o];
        o += 1 + klen;
        if (o >= end) return -1;             /* a key must be followed by a value */
        if (strict) {
            if (nkeys == MAX_KEYS) return -1;
            for (Py_ssize_t i = 0; i < nkeys; i++)
                if (b[keys[i]] == klen && memcmp(b + keys[i] + 1, b + at + 1, klen) == 0) return -1;
            keys[nkeys++] = at;
        }
        o = skip_value(b, o, end, depth, strict);
        if (o < 0) return -1;
    }
    return o == end ? 0 : -1;
}

/* key, folded to ASCII lowercase, equals (or, with prefix, starts with) the lowercase `name` */
static int key_folds_to(span key, PyObject *name, int prefix) {
    Py_ssize_t n = PyBytes_GET_SIZE(name);
    if (prefix ? key.n < n : key.n != n) return 0;
    const uint8_t *p = (const uint8_t *)PyBytes_AS_STRING(name);
    for (Py_ssize_t i = 0; i < n; i++) {
        uint8_t c = key.p[i];
        if ((c >= 'A' && c <= 'Z' ? c + 32 : c) != p[i]) return 0;
    }
    return 1;
}

/* A header a convention other than x-death may read (see slow_names): the Python path decides. */
static int key_slow(span key, PyObject *names, PyObject *prefixes) {   /* either may be NULL */
    /* Python's str.lower() folds one more letter to ASCII: KELVIN SIGN (U+212A, E2 84 AA) to 'k' (U+0130 gives
     * 'i' + a combining dot, never an ASCII name). A name with it may match a trigger there: Python decides. */
    for (const uint8_t *p = key.p, *end = key.p + key.n; (p = memchr(p, 0xE2, end - p)) != NULL; p++)
        if (end - p >= 3 && p[1] == 0x84 && p[2] == 0xAA) return 1;
    for (Py_ssize_t i = 0; names && i < PyTuple_GET_SIZE(names); i++)
        if (key_folds_to(key, PyTuple_GET_ITEM(names, i), 0)) return 1;
    for (Py_ssize_t i = 0; prefixes && i < PyTuple_GET_SIZE(prefixes); i++)
        if (key_folds_to(key, PyTuple_GET_ITEM(prefixes, i), 1)) return 1;
    return 0;
}

static int key_in(span key, PyObject *names) {   /* names: tuple of bytes */
    Py_ssize_t count = PyTuple_GET_SIZE(names);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *name = PyTuple_GET_ITEM(names, i);
        if (PyBytes_GET_SIZE(name) == key.n && memcmp(PyBytes_AS_STRING(name), key.p, key.n) == 0) return 1;
    }
    return 0;
}


static int key_eq(span key, PyObject *name) {   /* name: bytes */
    return PyBytes_GET_SIZE(name) == key.n && memcmp(PyBytes_AS_STRING(name), key.p, key.n) == 0;
}

static int all_bytes(PyObject *names) {   /* a tuple of bytes, else TypeError */
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names); i++)
        if (!PyBytes_Check(PyTuple_GET_ITEM(names, i))) {
            PyErr_SetString(PyExc_TypeError, "header names: a tuple of bytes");
            return 0;
        }
    return 1;
}

/* -- scan_headers, splice_headers --------------------------------------------------------------- */

/* Where the header table of encoded properties is: the offset of its 4-byte size and the offset after it. The
 * properties around it are checked too, so that what is copied around the table is exactly what Python decodes
 * (and encodes again). 0, or -1: no header table, a second flags word, a reserved flag, bytes that do not parse. */
static int find_headers(const uint8_t *b, Py_ssize_t size, Py_ssize_t *table, Py_ssize_t *table_end) {
    if (size < 2) return -1;
    unsigned flags = (b[0] << 8) | b[1];
    if ((flags & 1) || !(flags & 0x2000) || (flags & 0x0002)) return -1;
    Py_ssize_t o = 2;
    for (unsigned bit = 0x8000; bit > 0x2000; bit >>= 1)      /* content-type, content-encoding */
        if (flags & bit) { if (o >= size) return -1; o += 1 + b[o]; }
    if (o > size - 4) return -1;
    Py_ssize_t end = o + 4 + (Py_ssize_t)u32(b + o);
    if (end > size) return -1;
    Py_ssize_t rest = end;
    for (unsigned bit = 0x1000; bit >= 0x0004; bit >>= 1) {   /* delivery-mode .. cluster-id */
        if (!(flags & bit)) continue;
        Py_ssize_t n = (bit == 0x1000 || bit == 0x0800) ? 1 : bit == 0x0040 ? 8 : -1;
        if (n < 0) { if (rest >= size) return -1; n = 1 + b[rest]; }
        rest += n;
        if (rest > size) return -1;
    }
    if (rest != size) return -1;
    *table = o;
    *table_end = end;
    return 0;
}

static PyObject *encoded(const uint8_t *b, Py_ssize_t from, Py_ssize_t to) {   /* bytes b[from:to] */
    return PyBytes_FromStringAndSize((const char *)b + from, to - from);
}

/* The table whose entries lie between o and end (checked already) with only the entries named in `fields`, in
 * its order, as an encoded table (4-byte size first). */
static PyObject *sub_table(const uint8_t *b, Py_ssize_t o, Py_ssize_t end, PyObject *fields) {
    Py_ssize_t size = 0;
    for (Py_ssize_t i = o, next; i < end; i = next) {
        span key = {b + i + 1, b[i]};
        next = skip_value(b, i + 1 + key.n, end, 1, 0);
        if (key_in(key, fields)) size += next - i;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, 4 + size);
    if (!out) return NULL;
    uint8_t *w = (uint8_t *)PyBytes_AS_STRING(out);
    uint8_t head[4] = {size >> 24, size >> 16, size >> 8, size};
    memcpy(w, head, 4);
    w += 4;
    for (Py_ssize_t i = o, next; i < end; i = next) {
        span key = {b + i + 1, b[i]};
        next = skip_value(b, i + 1 + key.n, end, 1, 0);
        if (key_in(key, fields)) {
            memcpy(w, b + i, next - i);
            w += next - i;
        }
    }
    return out;
}

/* A picked header's value (kind byte at b[at], checked up to end): see `picked` above. */
static PyObject *pick(const uint8_t *b, Py_ssize_t at, Py_ssize_t end, PyObject *fields) {
    if (b[at] == 'F') return sub_table(b, at + 5, end, fields);
    if (b[at] != 'A') return Py_NewRef(Py_False);
    for (Py_ssize_t i = at + 5; i < end; i += 5 + u32(b + i + 1))
        if (b[i] != 'F') return Py_NewRef(Py_False);
    PyObject *list = PyList_New(0);
    for (Py_ssize_t i = at + 5; list && i < end; i += 5 + u32(b + i + 1)) {
        PyObject *one = sub_table(b, i + 5, i + 5 + u32(b + i + 1), fields);
        if (!one || PyList_Append(list, one) < 0) Py_CLEAR(list);
        Py_XDECREF(one);
    }
    return list;
}

static int check_picks(PyObject *picks) {
    if (PyTuple_GET_SIZE(picks) > MAX_PICKS) {
        PyErr_SetString(PyExc_ValueError, "too many picks");
        return 0;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(picks); i++) {
        PyObject *one = PyTuple_GET_ITEM(picks, i);
        if (!PyTuple_Check(one) || PyTuple_GET_SIZE(one) != 2 || !PyBytes_Check(PyTuple_GET_ITEM(one, 0)) ||
            !PyTuple_Check(PyTuple_GET_ITEM(one, 1)) || !all_bytes(PyTuple_GET_ITEM(one, 1))) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "picks: ((name, (field, ...)), ...) of bytes");
            return 0;
        }
    }
    return 1;
}

static PyObject *scan_headers(PyObject *self, PyObject *args) {
    Py_buffer props;
    PyObject *drop, *report, *picks, *slow_names = NULL, *slow_prefixes = NULL;
    if (!PyArg_ParseTuple(args, "y*O!O!O!|O!O!", &props, &PyTuple_Type, &drop, &PyTuple_Type, &report,
                          &PyTuple_Type, &picks, &PyTuple_Type, &slow_names, &PyTuple_Type, &slow_prefixes))
        return NULL;
    PyObject *result = NULL, *picked = NULL, *reported = NULL;
    if (!all_bytes(drop) || !all_bytes(report) || !check_picks(picks) || (slow_names && !all_bytes(slow_names)) ||
        (slow_prefixes && !all_bytes(slow_prefixes)))
        goto done;
    int slow = (slow_names && PyTuple_GET_SIZE(slow_names)) || (slow_prefixes && PyTuple_GET_SIZE(slow_prefixes));
    const uint8_t *b = props.buf;
    Py_ssize_t table, table_end;
    if (find_headers(b, props.len, &table, &table_end) < 0) goto decline;

    span keys[MAX_KEYS];
    Py_ssize_t nkeys = 0, nreported = 0, reported_at[MAX_KEYS], reported_end[MAX_KEYS];
    Py_ssize_t npicks = PyTuple_GET_SIZE(picks), pick_at[MAX_PICKS], pick_end[MAX_PICKS];
    for (Py_ssize_t i = 0; i < npicks; i++) pick_at[i] = -1;
    Py_ssize_t o = table + 4;
    while (o < table_end) {
        span key = {b + o + 1, b[o]};
        Py_ssize_t value = o + 1 + key.n;
        if (value >= table_end || nkeys == MAX_KEYS) goto decline;
        for (Py_ssize_t i = 0; i < nkeys; i++)
            if (keys[i].n == key.n && memcmp(keys[i].p, key.p, key.n) == 0) goto decline;
        if (slow && key_slow(key, slow_names, slow_prefixes)) goto decline;
        keys[nkeys++] = key;
        /* a kept value is copied as it is: only where Python would write it back the same */
        Py_ssize_t next = skip_value(b, value, table_end, 0, !key_in(key, drop));
        if (next < 0) goto decline;
        if (key_in(key, report)) {
            reported_at[nreported] = o;
            reported_end[nreported++] = next;
        }
        for (Py_ssize_t i = 0; i < npicks; i++)
            if (key_eq(key, PyTuple_GET_ITEM(PyTuple_GET_ITEM(picks, i), 0))) {
                pick_at[i] = value;
                pick_end[i] = next;
            }
        o = next;
    }

    picked = PyTuple_New(npicks);
    if (!picked) goto done;
    for (Py_ssize_t i = 0; i < npicks; i++) {
        PyObject *one = pick_at[i] < 0 ? Py_NewRef(Py_None)
                        : pick(b, pick_at[i], pick_end[i], PyTuple_GET_ITEM(PyTuple_GET_ITEM(picks, i), 1));
        if (!one) goto done;
        PyTuple_SET_ITEM(picked, i, one);
    }
    reported = PyTuple_New(nreported);
    if (!reported) goto done;
    for (Py_ssize_t r = 0; r < nreported; r++) {
        Py_ssize_t at = reported_at[r], value = at + 1 + b[at];
        PyObject *name = encoded(b, at + 1, value), *raw = name ? encoded(b, value, reported_end[r]) : NULL;
        PyObject *one = raw ? PyTuple_Pack(2, name, raw) : NULL;
        Py_XDECREF(name);
        Py_XDECREF(raw);
        if (!one) goto done;
        PyTuple_SET_ITEM(reported, r, one);
    }
    result = PyTuple_Pack(2, picked, reported);
    goto done;
decline:
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(picked);
    Py_XDECREF(reported);
    PyBuffer_Release(&props);
    return result;
}

static PyObject *splice_headers(PyObject *self, PyObject *args) {
    Py_buffer props, append;
    PyObject *drop;
    if (!PyArg_ParseTuple(args, "y*O!y*", &props, &PyTuple_Type, &drop, &append)) return NULL;
    PyObject *result = NULL;
    if (!all_bytes(drop)) goto done;
    const uint8_t *b = props.buf;
    Py_ssize_t table, table_end, kept = 0;
    if (find_headers(b, props.len, &table, &table_end) < 0) goto decline;
    for (Py_ssize_t o = table + 4, next; o < table_end; o = next) {
        span key = {b + o + 1, b[o]};
        Py_ssize_t value = o + 1 + key.n;
        next = value < table_end ? skip_value(b, value, table_end, 0, 0) : -1;
        if (next < 0) goto decline;
        if (!key_in(key, drop)) kept += next - o;
    }
    Py_ssize_t size = kept + append.len;
    if (size > 0xFFFFFFFF) goto decline;
    result = PyBytes_FromStringAndSize(NULL, table + 4 + size + (props.len - table_end));
    if (!result) goto done;
    uint8_t *w = (uint8_t *)PyBytes_AS_STRING(result);
    memcpy(w, b, table);
    w += table;
    uint8_t head[4] = {size >> 24, size >> 16, size >> 8, size};
    memcpy(w, head, 4);
    w += 4;
    for (Py_ssize_t o = table + 4, next; o < table_end; o = next) {   /* checked above */
        span key = {b + o + 1, b[o]};
        next = skip_value(b, o + 1 + key.n, table_end, 0, 0);
        if (!key_in(key, drop)) {
            memcpy(w, b + o, next - o);
            w += next - o;
        }
    }
    memcpy(w, append.buf, append.len);
    w += append.len;
    memcpy(w, b + table_end, props.len - table_end);
    goto done;
decline:
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&props);
    PyBuffer_Release(&append);
    return result;
}

/* -- fingerprint: BLAKE2b (RFC 7693), unkeyed, 8-byte digest, as hashlib.blake2b(digest_size=8) ------------ */

static const uint64_t B2_IV[8] = {
    0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL, 0xa54ff53a5f1d36f1ULL,
    0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL, 0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL};
static const uint8_t B2_SIGMA[12][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4}, {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13}, {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11}, {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5}, {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3}};

typedef struct {
    uint64_t h[8];
    uint64_t t;        /* bytes compressed so far (inputs here are far below 2^64) */
    uint8_t buf[128];
    size_t n;          /* bytes in buf, not compressed yet: the last block is compressed by b2_final */
} b2_state;

static uint64_t rotr64(uint64_t x, int r) { return (x >> r) | (x << (64 - r)); }

static uint64_t le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

#define B2_G(a, b, c, d, x, y)                                  \
    do {                                                        \
        a = a + b + (x); d = rotr64(d ^ a, 32);                 \
        c = c + d; b = rotr64(b ^ c, 24);                       \
        a = a + b + (y); d = rotr64(d ^ a, 16);                 \
        c = c + d; b = rotr64(b ^ c, 63);                       \
    } while (0)

static void b2_compress(b2_state *s, int last) {
    uint64_t m[16], v[16];
    for (int i = 0; i < 16; i++) m[i] = le64(s->buf + 8 * i);
    for (int i = 0; i < 8; i++) {
        v[i] = s->h[i];
        v[i + 8] = B2_IV[i];
    }
    v[12] ^= s->t;
    if (last) v[14] = ~v[14];
    for (int r = 0; r < 12; r++) {
        const uint8_t *z = B2_SIGMA[r];
        B2_G(v[0], v[4], v[8], v[12], m[z[0]], m[z[1]]);
        B2_G(v[1], v[5], v[9], v[13], m[z[2]], m[z[3]]);
        B2_G(v[2], v[6], v[10], v[14], m[z[4]], m[z[5]]);
        B2_G(v[3], v[7], v[11], v[15], m[z[6]], m[z[7]]);
        B2_G(v[0], v[5], v[10], v[15], m[z[8]], m[z[9]]);
        B2_G(v[1], v[6], v[11], v[12], m[z[10]], m[z[11]]);
        B2_G(v[2], v[7], v[8], v[13], m[z[12]], m[z[13]]);
        B2_G(v[3], v[4], v[9], v[14], m[z[14]], m[z[15]]);
    }
    for (int i = 0; i < 8; i++) s->h[i] ^= v[i] ^ v[i + 8];
}

static void b2_init(b2_state *s, unsigned digest_size) {
    memcpy(s->h, B2_IV, sizeof s->h);
    s->h[0] ^= 0x01010000ULL ^ digest_size;   /* fanout 1, depth 1, no key */
    s->t = 0;
    s->n = 0;
}

static void b2_update(b2_state *s, const uint8_t *p, size_t len) {
    while (len > 0) {
        if (s->n == sizeof s->buf) {   /* more input follows: this block is not the last */
            s->t += sizeof s->buf;
            b2_compress(s, 0);
            s->n = 0;
        }
        size_t take = sizeof s->buf - s->n < len ? sizeof s->buf - s->n : len;
        memcpy(s->buf + s->n, p, take);
        s->n += take;
        p += take;
        len -= take;
    }
}

static uint64_t b2_final(b2_state *s) {
    s->t += s->n;
    memset(s->buf + s->n, 0, sizeof s->buf - s->n);
    b2_compress(s, 1);
    return s->h[0];
}

static PyObject *fingerprint(PyObject *self, PyObject *args) {
    Py_buffer props, body;
    if (!PyArg_ParseTuple(args, "y*y*", &props, &body)) return NULL;
    PyObject *result = NULL;
    const uint8_t *b = props.buf;
    Py_ssize_t table = props.len, table_end = props.len;   /* no header table: all of props */
    if (props.len < 2 || body.len > FINGERPRINT_MAX_BODY) goto decline;
    unsigned flags = (b[0] << 8) | b[1];
    if ((flags & 0x2000) && !(flags & 1) && props.len > 2 && find_headers(b, props.len, &table, &table_end) < 0)
        goto decline;
    Py_ssize_t kept = table == props.len ? props.len : props.len - (table_end - table);
    uint8_t head[6] = {kept >> 24, kept >> 16, kept >> 8, kept, b[0], b[1]};
    if (table != props.len) head[4] &= ~0x20;   /* the headers flag, cleared */
    b2_state s;
    b2_init(&s, 8);
    b2_update(&s, head, 6);
    b2_update(&s, b + 2, table - 2);
    b2_update(&s, b + table_end, props.len - table_end);
    b2_update(&s, body.buf, body.len);
    uint64_t h = b2_final(&s);
    char hex[16];
    for (int i = 0; i < 8; i++) {   /* the digest's bytes in order: h[0] little endian */
        uint8_t byte = (h >> (8 * i)) & 0xFF;
        hex[2 * i] = "0123456789abcdef"[byte >> 4];
        hex[2 * i + 1] = "0123456789abcdef"[byte & 15];
    }
    result = PyUnicode_FromStringAndSize(hex, 16);
    goto done;
decline:
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&props);
    PyBuffer_Release(&body);
    return result;
}

/* -- bloom ------------------------------------------------------------------------------------------ */

/* bloom(filter, key, add) -> bool: whether the three bits hash(key) picks were all set in `filter`, a writable
 * buffer of a power of two bits; with `add` true they are set as well. The bits are hash & mask, hash >> 20 & mask
 * and hash >> 40 & mask (mask = bits - 1, below 2**24 for the shifts to agree with Python's on a negative hash),
 * bit i of byte i >> 3 by (1 << (i & 7)): the filter Python fills the same way gets the same bytes. */
static PyObject *bloom(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "bloom(filter, key, add) takes 3 arguments");
        return NULL;
    }
    Py_hash_t h = PyObject_Hash(args[1]);
    if (h == -1 && PyErr_Occurred()) return NULL;
    int add = PyObject_IsTrue(args[2]);
    if (add < 0) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_WRITABLE) < 0) return NULL;
    uint64_t bits = (uint64_t)view.len * 8;
    if (view.len <= 0 || (bits & (bits - 1)) || bits > ((uint64_t)1 << 24)) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "bloom: the filter must hold a power of two bits, at most 2**24");
        return NULL;
    }
    uint64_t mask = bits - 1, u = (uint64_t)h;
    uint64_t picks[3] = {u & mask, (u >> 20) & mask, (u >> 40) & mask};
    uint8_t *b = view.buf;
    int all = 1;
    for (int i = 0; i < 3; i++) {
        uint8_t bit = (uint8_t)(1u << (picks[i] & 7));
        if (!(b[picks[i] >> 3] & bit)) {
            all = 0;
            if (!add) break;
            b[picks[i] >> 3] |= bit;
        }
    }
    PyBuffer_Release(&view);
    return PyBool_FromLong(all);
}

/* -- read_deliveries ---------------------------------------------------------------------------- */

static PyTypeObject DeliverType;
static PyStructSequence_Field deliver_fields[] = {
    {"consumer_tag", NULL}, {"delivery_tag", NULL}, {"redelivered", NULL}, {"exchange", NULL},
    {"routing_key", NULL}, {NULL, NULL}};
static PyStructSequence_Desc deliver_desc = {
    "dlxtool.broker.wire._hotpath.Deliver", "Basic.Deliver's fields, as pika's Basic.Deliver names them", deliver_fields, 5};

/* A short string as pika decodes it: str when UTF-8, else bytes. */
static PyObject *short_text(const uint8_t *p, Py_ssize_t n) {
    if (valid_utf8(p, n)) return PyUnicode_DecodeUTF8((const char *)p, n, "strict");
    return PyBytes_FromStringAndSize((const char *)p, n);
}

typedef struct {
    uint8_t kind;
    unsigned channel;
    Py_ssize_t payload, end;     /* payload offset; offset after the frame-end octet */
} frame_t;

/* The frame at b[o], complete and well terminated, or 0. */
static int next_frame(const uint8_t *b, Py_ssize_t o, Py_ssize_t size, frame_t *f) {
    if (size - o < 8) return 0;
    Py_ssize_t len = u32(b + o + 3);
    if (len > size - o - 8 || b[o + 7 + len] != 0xCE) return 0;
    f->kind = b[o];
    f->channel = (b[o + 1] << 8) | b[o + 2];
    f->payload = o + 7;
    f->end = o + 8 + len;
    return 1;
}

/* One whole delivery (deliver method, content header, body frames) on `channel` at b[o] whose consumer tag is
 * one of `tags`: its (method, properties, body) and the offset after it, or NULL with *at unchanged. */
static PyObject *read_delivery(const uint8_t *b, Py_ssize_t *at, Py_ssize_t size, unsigned channel, PyObject *tags,
                               Py_ssize_t *frames) {
    frame_t m, h, f;
    Py_ssize_t o = *at;
    if (!next_frame(b, o, size, &m) || m.kind != 1 || m.channel != channel) return NULL;
    Py_ssize_t p = m.payload, pend = m.end - 1;
    if (pend - p < 5 || u32(b + p) != 0x003C003C) return NULL;   /* Basic.Deliver */
    p += 4;
    span tag = {b + p + 1, b[p]};
    p += 1 + tag.n;
    if (pend - p < 9 || !key_in(tag, tags)) return NULL;
    uint64_t delivery_tag = u64(b + p);
    int redelivered = b[p + 8] & 1;
    p += 9;
    if (p >= pend) return NULL;
    span exchange = {b + p + 1, b[p]};
    p += 1 + exchange.n;
    if (p >= pend) return NULL;
    span routing_key = {b + p + 1, b[p]};
    p += 1 + routing_key.n;
    if (p > pend) return NULL;
    if (!next_frame(b, m.end, size, &h) || h.kind != 2 || h.channel != channel || h.end - 1 - h.payload < 14)
        return NULL;
    uint64_t body_size = u64(b + h.payload + 4);
    if (u32(b + h.payload) >> 16 != 60) return NULL;
    Py_ssize_t n = 2, got = 0, first = -1, last = h.end;
    o = h.end;
    while ((uint64_t)got < body_size) {   /* every body frame must be here */
        if (!next_frame(b, o, size, &f) || f.kind != 3 || f.channel != channel) return NULL;
        got += f.end - 1 - f.payload;
        if (first < 0) first = o;
        n++;
        o = last = f.end;
    }
    if ((uint64_t)got != body_size) return NULL;
    PyObject *body;
    if (n == 3) {
        body = PyBytes_FromStringAndSize((const char *)b + first + 7, got);
    } else {
        body = PyBytes_FromStringAndSize(NULL, got);
        if (body) {
            char *dst = PyBytes_AS_STRING(body);
            for (Py_ssize_t q = h.end; q < last; q = f.end) {
                next_frame(b, q, size, &f);
                memcpy(dst, b + f.payload, f.end - 1 - f.payload);
                dst += f.end - 1 - f.payload;
            }
        }
    }
    PyObject *props = PyBytes_FromStringAndSize((const char *)b + h.payload + 12, h.end - 1 - h.payload - 12);
    PyObject *method = PyStructSequence_New(&DeliverType);
    PyObject *out = NULL;
    if (body && props && method) {
        PyObject *fields[5] = {short_text(tag.p, tag.n), PyLong_FromUnsignedLongLong(delivery_tag),
                               PyBool_FromLong(redelivered), short_text(exchange.p, exchange.n),
                               short_text(routing_key.p, routing_key.n)};
        int ok = 1;
        for (int i = 0; i < 5; i++) {
            if (!fields[i]) ok = 0;
            PyStructSequence_SET_ITEM(method, i, fields[i] ? fields[i] : Py_NewRef(Py_None));
        }
        if (ok) out = PyTuple_Pack(3, method, props, body);
    }
    Py_XDECREF(method);
    Py_XDECREF(props);
    Py_XDECREF(body);
    if (out) {
        *at = last;
        *frames += n;
    }
    return out;
}

static PyObject *read_deliveries(PyObject *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t o;
    unsigned int channel;
    PyObject *tags;
    if (!PyArg_ParseTuple(args, "y*nIO!", &buf, &o, &channel, &PyTuple_Type, &tags)) return NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tags); i++)
        if (!PyBytes_Check(PyTuple_GET_ITEM(tags, i))) {
            PyBuffer_Release(&buf);
            PyErr_SetString(PyExc_TypeError, "consumer tags: bytes");
            return NULL;
        }
    PyObject *list = PyList_New(0), *result = NULL;
    Py_ssize_t frames = 0;
    if (list && (o < 0 || o > buf.len)) PyErr_SetString(PyExc_ValueError, "offset outside the buffer");
    if (!list || PyErr_Occurred()) goto done;
    for (;;) {
        PyObject *one = read_delivery(buf.buf, &o, buf.len, channel, tags, &frames);
        if (!one) break;
        int err = PyList_Append(list, one);
        Py_DECREF(one);
        if (err < 0) goto done;
    }
    if (!PyErr_Occurred()) result = Py_BuildValue("(nOn)", o, list, frames);
done:
    Py_XDECREF(list);
    PyBuffer_Release(&buf);
    return result;
}

/* -- publish_frames ----------------------------------------------------------------------------- */

static uint8_t *frame_head(uint8_t *w, uint8_t kind, unsigned channel, Py_ssize_t len) {
    w[0] = kind; w[1] = channel >> 8; w[2] = channel;
    w[3] = len >> 24; w[4] = len >> 16; w[5] = len >> 8; w[6] = len;
    return w + 7;
}

/* Basic.Publish + content header + body frames in one bytes object, as dlxtool.broker.wire.frames._frames. */
static PyObject *publish_frames(PyObject *self, PyObject *args) {
    Py_buffer method, props, body;
    unsigned int channel;
    Py_ssize_t body_max;
    if (!PyArg_ParseTuple(args, "Iy*y*y*n", &channel, &method, &props, &body, &body_max)) return NULL;
    PyObject *out = NULL;
    if (body_max <= 0 || channel > 0xFFFF) {
        PyErr_SetString(PyExc_ValueError, "body_max must be positive, channel a 16-bit number");
        goto done;
    }
    Py_ssize_t nbody = (body.len + body_max - 1) / body_max;
    out = PyBytes_FromStringAndSize(NULL, 8 + method.len + 8 + 12 + props.len + nbody * 8 + body.len);
    if (!out) goto done;
    uint8_t *w = (uint8_t *)PyBytes_AS_STRING(out);
    w = frame_head(w, 1, channel, method.len);
    memcpy(w, method.buf, method.len);
    w += method.len;
    *w++ = 0xCE;
    w = frame_head(w, 2, channel, props.len + 12);
    uint64_t size = body.len;
    uint8_t head[12] = {0, 60, 0, 0, size >> 56, size >> 48, size >> 40, size >> 32, size >> 24, size >> 16,
                        size >> 8, size};
    memcpy(w, head, 12);
    memcpy(w + 12, props.buf, props.len);
    w += 12 + props.len;
    *w++ = 0xCE;
    for (Py_ssize_t at = 0; at < body.len; at += body_max) {
        Py_ssize_t n = body.len - at < body_max ? body.len - at : body_max;
        w = frame_head(w, 3, channel, n);
        memcpy(w, (const uint8_t *)body.buf + at, n);
        w += n;
        *w++ = 0xCE;
    }
done:
    PyBuffer_Release(&method);
    PyBuffer_Release(&props);
    PyBuffer_Release(&body);
    return out;
}

static PyMethodDef methods[] = {
    {"publish_frames", publish_frames, METH_VARARGS,
     "publish_frames(channel, method, props, body, body_max) -> bytes: the frames of one publish"},
    {"read_deliveries", read_deliveries, METH_VARARGS,
     "read_deliveries(buf, offset, channel, consumer_tags) -> (offset after them, [(Deliver, properties, body)], "
     "frames): the whole deliveries on `channel` starting at `offset`, up to the first frame that is not part of one"},
    {"scan_headers", scan_headers, METH_VARARGS,
     "scan_headers(props, drop, report, picks[, slow_names, slow_prefixes]) -> (picked, reported) or None: the "
     "encoded values of the headers and fields asked for (see _hotpath.c)"},
    {"fingerprint", fingerprint, METH_VARARGS,
     "fingerprint(props, body) -> str or None: 16 hex digits of BLAKE2b-64 over props without its header table and "
     "body (see _hotpath.c)"},
    {"bloom", (PyCFunction)(void (*)(void))bloom, METH_FASTCALL,
     "bloom(filter, key, add) -> bool: whether the three bits of hash(key) were all set in the filter (a writable "
     "buffer); add: set them too (see _hotpath.c)"},
    {"splice_headers", splice_headers, METH_VARARGS,
     "splice_headers(props, drop, append) -> bytes or None: the properties with the `drop` headers left out and "
     "the encoded entries `append` added to the header table"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_hotpath", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__hotpath(void) {
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyStructSequence_InitType2(&DeliverType, &deliver_desc) < 0 ||
        PyModule_AddObjectRef(m, "Deliver", (PyObject *)&DeliverType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
