/* The transfer engine's per-message hot path in C (dlxtool.broker.wire._hotpath). Optional: where it is not
 * built, the Python code it stands in for runs instead, with the same results.
 *
 * read_deliveries: the consumer deliveries in a run of received frames (dlxtool.broker.wire.frames.FastInput).
 * publish_frames: the frames of one publish (dlxtool.broker.wire.frames._frames).
 *
 * replay_properties: a dead letter's content-header properties in, its replayed properties out.
 * dlxtool.ops.replay.ReplayDecider does this in Python for any message: decode the properties, parse
 * x-death, find the origin, drop the history headers, add the provenance header, encode again. That
 * costs ~25 us per message; this does the same on the encoded bytes in ~1 us. Every header it does
 * not interpret is copied byte for byte, and it answers None (= "take the Python path") for anything
 * outside the broker's canonical shapes: a malformed or unusual x-death, a duplicate key, a retry
 * header whose text it would have to render, a second property-flags word, trailing bytes. So its
 * answer is either None or exactly what the Python path publishes for canonical input; tests compare
 * the two (tests/broker/test_hotpath.py). All reads are bounds-checked: input comes off the wire.
 *
 * replay_properties(props, routing_key, history_names, reset_names, keep_history,
 *                   prov_head, at, publish_id, prov_tail[, slow_names, slow_prefixes])
 *                   -> (origin, replay_count, new_props, routing_key) | None
 *
 *   routing_key out: the original routing key the replayed message is published with (the one written
 *                  into the provenance header)
 *
 *   props          property flags + property fields, as in a content header frame after body-size
 *   routing_key    the delivery's routing key (UTF-8), for the provenance when x-death has none
 *   history_names  header names removed that are not reported (x-death, CC, ...), tuple of bytes
 *   reset_names    retry counters removed and reported in provenance "reset", tuple of bytes
 *   keep_history   true: nothing removed (the provenance header is still replaced)
 *   prov_head      the encoded provenance field "from" (constant for a run)
 *   at             provenance "at", seconds since the epoch
 *   publish_id     provenance "id" (UTF-8)
 *   prov_tail      encoded provenance fields after "reset" ("filters"), or b""
 *   slow_names     lowercase header names (bytes) that make it answer None when a header has one of them, in
 *                  any ASCII case: a dead-letter convention other than x-death may explain that message
 *                  (dlxtool.conventions.fast_path_triggers)
 *   slow_prefixes  the same for names that start with one of these
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

#define MAX_DEPTH 64           /* nested tables/arrays deeper than this: the Python path */
#define MAX_KEYS 64            /* top-level headers tracked for duplicates */
#define MAX_SUMMARY 3          /* deaths named in provenance "deaths" (dlxtool.deaths.summarize limit) */

static const char PROVENANCE[] = "dlxtool-replay";

typedef struct {
    const uint8_t *p;
    Py_ssize_t n;
} span;

typedef struct {                 /* an output buffer that grows */
    uint8_t *p;
    Py_ssize_t n, cap;
} outbuf;

static int out_reserve(outbuf *o, Py_ssize_t more) {
    if (o->n + more <= o->cap) return 0;
    Py_ssize_t cap = o->cap ? o->cap : 512;
    while (cap < o->n + more) cap *= 2;
    uint8_t *p = PyMem_Realloc(o->p, cap);
    if (!p) return -1;
    o->p = p;
    o->cap = cap;
    return 0;
}

static int out_put(outbuf *o, const void *src, Py_ssize_t n) {
    if (n == 0) return 0;   /* src may be NULL then (an absent exchange) */
    if (out_reserve(o, n) < 0) return -1;
    memcpy(o->p + o->n, src, n);
    o->n += n;
    return 0;
}

static int out_byte(outbuf *o, uint8_t b) { return out_put(o, &b, 1); }

static int out_u32(outbuf *o, uint32_t v) {
    uint8_t b[4] = {v >> 24, v >> 16, v >> 8, v};
    return out_put(o, b, 4);
}

static void put_u32_at(outbuf *o, Py_ssize_t at, uint32_t v) {
    o->p[at] = v >> 24; o->p[at + 1] = v >> 16; o->p[at + 2] = v >> 8; o->p[at + 3] = v;
}

static int out_shortstr(outbuf *o, const char *s) {
    size_t n = strlen(s);
    return out_byte(o, (uint8_t)n) < 0 ? -1 : out_put(o, s, n);
}

static int out_longstr(outbuf *o, const uint8_t *s, Py_ssize_t n) {   /* 'S' value */
    if (out_byte(o, 'S') < 0 || out_u32(o, (uint32_t)n) < 0) return -1;
    return out_put(o, s, n);
}

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

static int key_is(span key, const char *name) {
    size_t n = strlen(name);
    return (size_t)key.n == n && memcmp(key.p, name, n) == 0;
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

/* A long string value 'S' holding valid UTF-8 at b[o]: its text in *out, returns the offset after it. */
static Py_ssize_t read_text(const uint8_t *b, Py_ssize_t o, Py_ssize_t end, span *out) {
    if (end - o < 5 || b[o] != 'S') return -1;
    Py_ssize_t n = u32(b + o + 1);
    if (n > end - o - 5 || !valid_utf8(b + o + 5, n)) return -1;
    out->p = b + o + 5;
    out->n = n;
    return o + 5 + n;
}

/* An integer the Python path reads as int: 'I' (32-bit) or 'l'/'L' (64-bit). */
static Py_ssize_t read_int(const uint8_t *b, Py_ssize_t o, Py_ssize_t end, long long *out) {
    if (o >= end) return -1;
    if (b[o] == 'I' && end - o >= 5) { *out = (int32_t)u32(b + o + 1); return o + 5; }
    if ((b[o] == 'l' || b[o] == 'L') && end - o >= 9) { *out = (int64_t)u64(b + o + 1); return o + 9; }
    return -1;
}

typedef struct {
    span queue, reason, exchange, key0;
    int has_exchange, has_key0, has_expiration;
    long long count;
} death;

static int is_failure(span reason) {  /* dlxtool.deaths.FAILURE_REASONS */
    return key_is(reason, "rejected") || key_is(reason, "delivery_limit") || key_is(reason, "maxlen");
}

/* One x-death entry (a table, 4-byte size at b[o]) in the broker's shape; the offset after it, or -1. */
static Py_ssize_t read_death(const uint8_t *b, Py_ssize_t o, Py_ssize_t end, death *d) {
    if (o >= end || b[o] != 'F' || end - o < 5) return -1;
    Py_ssize_t n = u32(b + o + 1);
    o += 5;
    if (n > end - o) return -1;
    Py_ssize_t stop = o + n;
    int seen_queue = 0, seen_reason = 0, seen_count = 0, seen_exchange = 0, seen_keys = 0;
    memset(d, 0, sizeof *d);
    while (o < stop) {
        span key = {b + o + 1, b[o]};
        o += 1 + key.n;
        if (o >= stop) return -1;
        Py_ssize_t next;
        if (key_is(key, "queue")) {
            if (seen_queue++) return -1;
            next = read_text(b, o, stop, &d->queue);
        } else if (key_is(key, "reason")) {
            if (seen_reason++) return -1;
            next = read_text(b, o, stop, &d->reason);
        } else if (key_is(key, "count")) {
            if (seen_count++) return -1;
            next = read_int(b, o, stop, &d->count);
        } else if (key_is(key, "exchange")) {
            if (seen_exchange++) return -1;
            next = read_text(b, o, stop, &d->exchange);
            d->has_exchange = 1;
        } else if (key_is(key, "routing-keys")) {
            if (seen_keys++ || b[o] != 'A' || stop - o < 5) return -1;
            Py_ssize_t len = u32(b + o + 1), i = o + 5;
            if (len > stop - i) return -1;
            next = i + len;
            while (i < next) {   /* every key must be text, as the Python path reads them all */
                span k;
                i = read_text(b, i, next, &k);
                if (i < 0) return -1;
                if (!d->has_key0) { d->key0 = k; d->has_key0 = 1; }
            }
        } else {
            if (key_is(key, "original-expiration")) d->has_expiration = 1;
            next = skip_value(b, o, stop, 1, 0);
        }
        if (next < 0) return -1;
        o = next;
    }
    return (seen_queue && seen_reason && seen_count) ? stop : -1;
}

/* Python's str(int) */
static int out_decimal(outbuf *o, long long v) {
    char text[32];
    int n = snprintf(text, sizeof text, "%lld", v);
    return out_put(o, text, n);
}

/* "rejected×3 from orders.q, expired×3 from orders.wait, +1 more" (dlxtool.deaths.summarize) */
static int write_summary(outbuf *o, const death *deaths, Py_ssize_t count) {
    for (Py_ssize_t i = 0; i < count && i < MAX_SUMMARY; i++) {
        const death *d = &deaths[i];
        if (i && out_put(o, ", ", 2) < 0) return -1;
        if ((d->reason.n ? out_put(o, d->reason.p, d->reason.n) : out_put(o, "?", 1)) < 0) return -1;
        if (out_put(o, "\xc3\x97", 2) < 0 || out_decimal(o, d->count) < 0 || out_put(o, " from ", 6) < 0) return -1;
        if ((d->queue.n ? out_put(o, d->queue.p, d->queue.n) : out_put(o, "?", 1)) < 0) return -1;
    }
    if (count > MAX_SUMMARY) {
        if (out_put(o, ", +", 3) < 0 || out_decimal(o, count - MAX_SUMMARY) < 0 || out_put(o, " more", 5) < 0)
            return -1;
    }
    return 0;
}

/* A removed retry header's value as dlxtool.ops.replay._short renders it: str(value)[:40]. Only text and
 * integers here; -1 for anything else (the Python path renders it). */
static int write_short_value(outbuf *o, const uint8_t *b, Py_ssize_t at, Py_ssize_t end) {
    long long v;
    if (read_int(b, at, end, &v) >= 0) return out_decimal(o, v);
    span text;
    if (read_text(b, at, end, &text) < 0) return -1;
    Py_ssize_t i = 0;
    for (int chars = 0; i < text.n && chars < 40; chars++) {   /* 40 code points, not bytes */
        uint8_t c = text.p[i];
        i += c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    }
    return out_put(o, text.p, i);
}

typedef struct {
    span key;
    Py_ssize_t value;            /* offset of its kind byte */
} removed;

static int cmp_removed(const void *a, const void *b) {
    const span *x = &((const removed *)a)->key, *y = &((const removed *)b)->key;
    int c = memcmp(x->p, y->p, x->n < y->n ? x->n : y->n);
    return c ? c : (x->n > y->n) - (x->n < y->n);
}

#define FALLBACK do { goto fallback; } while (0)

static PyObject *replay_properties(PyObject *self, PyObject *args) {
    Py_buffer props, routing_key, prov_head, publish_id, prov_tail;
    PyObject *history_names, *reset_names, *slow_names = NULL, *slow_prefixes = NULL;
    int keep_history;
    unsigned long long at;
    if (!PyArg_ParseTuple(args, "y*y*O!O!py*Ky*y*|O!O!", &props, &routing_key, &PyTuple_Type, &history_names,
                          &PyTuple_Type, &reset_names, &keep_history, &prov_head, &at, &publish_id, &prov_tail,
                          &PyTuple_Type, &slow_names, &PyTuple_Type, &slow_prefixes))
        return NULL;
    PyObject *result = NULL;
    outbuf out = {0}, summary = {0}, reset = {0};
    death *deaths = NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(history_names); i++)
        if (!PyBytes_Check(PyTuple_GET_ITEM(history_names, i))) { PyErr_SetString(PyExc_TypeError, "names: bytes"); goto done; }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(reset_names); i++)
        if (!PyBytes_Check(PyTuple_GET_ITEM(reset_names, i))) { PyErr_SetString(PyExc_TypeError, "names: bytes"); goto done; }
    for (int t = 0; t < 2; t++) {
        PyObject *names = t ? slow_prefixes : slow_names;
        for (Py_ssize_t i = 0; names && i < PyTuple_GET_SIZE(names); i++)
            if (!PyBytes_Check(PyTuple_GET_ITEM(names, i))) { PyErr_SetString(PyExc_TypeError, "names: bytes"); goto done; }
    }
    int slow = (slow_names && PyTuple_GET_SIZE(slow_names)) || (slow_prefixes && PyTuple_GET_SIZE(slow_prefixes));

    const uint8_t *b = props.buf;
    Py_ssize_t size = props.len, o = 2;
    if (size < 2) FALLBACK;
    unsigned flags = (b[0] << 8) | b[1];
    if ((flags & 1) || !(flags & 0x2000)) FALLBACK;          /* a second flag word; no headers */
    for (unsigned bit = 0x8000; bit > 0x2000; bit >>= 1)      /* content-type, content-encoding */
        if (flags & bit) { if (o >= size) FALLBACK; o += 1 + b[o]; }
    Py_ssize_t headers_at = o;
    if (o > size - 4) FALLBACK;
    Py_ssize_t table_end = o + 4 + (Py_ssize_t)u32(b + o);
    if (table_end > size) FALLBACK;
    /* the properties after the headers: checked so that what is copied is exactly what Python decodes */
    Py_ssize_t rest = table_end;
    for (unsigned bit = 0x1000; bit >= 0x0004; bit >>= 1) {
        if (!(flags & bit)) continue;
        Py_ssize_t n = (bit == 0x1000 || bit == 0x0800) ? 1 : bit == 0x0040 ? 8 : -1;
        if (n < 0) { if (rest >= size) FALLBACK; n = 1 + b[rest]; }
        rest += n;
        if (rest > size) FALLBACK;
    }
    if (rest != size || (flags & 0x0002)) FALLBACK;

    /* top-level headers: find x-death, the old provenance, the removed ones; refuse duplicates */
    span keys[MAX_KEYS];
    Py_ssize_t nkeys = 0, xdeath_at = -1, prov_at = -1, nremoved = 0;
    removed removed_list[MAX_KEYS];
    o = headers_at + 4;
    while (o < table_end) {
        span key = {b + o + 1, b[o]};
        Py_ssize_t value = o + 1 + key.n;
        if (value >= table_end || nkeys == MAX_KEYS) FALLBACK;
        for (Py_ssize_t i = 0; i < nkeys; i++)
            if (keys[i].n == key.n && memcmp(keys[i].p, key.p, key.n) == 0) FALLBACK;
        if (slow && key_slow(key, slow_names, slow_prefixes)) FALLBACK;
        keys[nkeys++] = key;
        int kept = !key_is(key, PROVENANCE) &&
                   (keep_history || !(key_in(key, history_names) || key_in(key, reset_names)));
        Py_ssize_t next = skip_value(b, value, table_end, 0, kept);   /* kept: copied as is, so as Python writes it */
        if (next < 0) FALLBACK;
        if (key_is(key, "x-death")) xdeath_at = value;
        else if (key_is(key, PROVENANCE)) {
            prov_at = value;
            if (!keep_history && key_in(key, reset_names)) FALLBACK;   /* reported as a reset counter: Python */
        }
        if (!keep_history && !key_is(key, PROVENANCE) && !key_in(key, history_names) && key_in(key, reset_names)) {
            removed_list[nremoved].key = key;
            removed_list[nremoved++].value = value;
        }
        o = next;
    }
    if (xdeath_at < 0 || b[xdeath_at] != 'A') FALLBACK;

    /* x-death: deaths, most recent first; the origin is the latest one with a failure reason */
    Py_ssize_t len = u32(b + xdeath_at + 1), i = xdeath_at + 5, ndeaths = 0, origin = -1;
    Py_ssize_t deaths_end = i + len;
    deaths = PyMem_Malloc(sizeof(death) * (len / 5 + 1));
    if (!deaths) { PyErr_NoMemory(); goto done; }
    while (i < deaths_end) {
        i = read_death(b, i, deaths_end, &deaths[ndeaths]);
        if (i < 0) FALLBACK;
        if (origin < 0 && deaths[ndeaths].queue.n && is_failure(deaths[ndeaths].reason)) origin = ndeaths;
        ndeaths++;
    }
    if (origin < 0) FALLBACK;   /* origin from x-first-death-* or a wait queue's route: the Python path */
    if (deaths[origin].has_expiration) FALLBACK;   /* a per-message TTL to restore: the Python path */

    /* an earlier replay's provenance: how many times replayed before ("count"; a table without one: 0) and the
     * first origin's exchange and routing key, which win over x-death's (a temporary exchange, or the queue name) */
    long long replayed = 0;
    span first_exchange = {0}, first_key = {0};
    int has_first_exchange = 0, has_first_key = 0, seen_count = 0;
    if (prov_at >= 0 && b[prov_at] == 'F') {
        Py_ssize_t p = prov_at + 5, pend = prov_at + 5 + u32(b + prov_at + 1);
        while (p < pend) {
            span key = {b + p + 1, b[p]};
            p += 1 + key.n;
            if (key_is(key, "count")) {
                if (seen_count++ || read_int(b, p, pend, &replayed) < 0) FALLBACK;   /* a text or float count: Python */
            } else if (key_is(key, "exchange")) {
                if (has_first_exchange++ || read_text(b, p, pend, &first_exchange) < 0) FALLBACK;
            } else if (key_is(key, "routing-key")) {
                if (has_first_key++ || read_text(b, p, pend, &first_key) < 0) FALLBACK;
            } else if (key_is(key, "expiration")) {
                FALLBACK;   /* a recorded TTL to restore: the Python path */
            }
            p = skip_value(b, p, pend, 1, 0);
            if (p < 0) FALLBACK;
        }
    }
    if (replayed >= 0x7FFFFFFF || replayed < -0x80000000LL) FALLBACK;

    /* "reset": the removed retry counters, sorted by name */
    qsort(removed_list, nremoved, sizeof(removed), cmp_removed);
    for (Py_ssize_t r = 0; r < nremoved; r++) {
        if (!valid_utf8(removed_list[r].key.p, removed_list[r].key.n)) FALLBACK;
        if (r && out_put(&reset, ", ", 2) < 0) goto nomem;
        if (out_put(&reset, removed_list[r].key.p, removed_list[r].key.n) < 0 || out_byte(&reset, '=') < 0) goto nomem;
        int w = write_short_value(&reset, b, removed_list[r].value, table_end);
        if (w < 0) { if (PyErr_Occurred()) goto done; FALLBACK; }
    }
    if (write_summary(&summary, deaths, ndeaths) < 0) goto nomem;

    /* out: flags and the properties before the headers, unchanged */
    if (out_put(&out, b, headers_at) < 0) goto nomem;
    Py_ssize_t table_size_at = out.n;
    if (out_u32(&out, 0) < 0) goto nomem;
    o = headers_at + 4;
    while (o < table_end) {   /* kept headers, byte for byte */
        span key = {b + o + 1, b[o]};
        Py_ssize_t next = skip_value(b, o + 1 + key.n, table_end, 0, 0);
        int drop = key_is(key, PROVENANCE) || (!keep_history && (key_in(key, history_names) || key_in(key, reset_names)));
        if (!drop && out_put(&out, b + o, next - o) < 0) goto nomem;
        o = next;
    }
    /* the provenance table, fields in the order dlxtool.ops.replay.replay_headers writes them */
    if (out_shortstr(&out, PROVENANCE) < 0 || out_byte(&out, 'F') < 0) goto nomem;
    Py_ssize_t prov_size_at = out.n;
    if (out_u32(&out, 0) < 0 || out_put(&out, prov_head.buf, prov_head.len) < 0) goto nomem;
    uint8_t stamp[9] = {'T', at >> 56, at >> 48, at >> 40, at >> 32, at >> 24, at >> 16, at >> 8, at};
    if (out_shortstr(&out, "at") < 0 || out_put(&out, stamp, 9) < 0) goto nomem;
    if (out_shortstr(&out, "id") < 0 || out_longstr(&out, publish_id.buf, publish_id.len) < 0) goto nomem;
    if (out_shortstr(&out, "count") < 0 || out_byte(&out, 'I') < 0 || out_u32(&out, (uint32_t)(replayed + 1)) < 0)
        goto nomem;
    const death *d = &deaths[origin];
    /* dlxtool.ops.replay.first_address: the earlier provenance's fields, else the origin's x-death entry */
    span exchange = has_first_exchange ? first_exchange : (span){d->exchange.p, d->has_exchange ? d->exchange.n : 0};
    if (out_shortstr(&out, "exchange") < 0 || out_longstr(&out, exchange.p, exchange.n) < 0) goto nomem;
    span key = has_first_key ? first_key : d->has_key0 ? d->key0 : (span){routing_key.buf, routing_key.len};
    if (out_shortstr(&out, "routing-key") < 0 || out_longstr(&out, key.p, key.n) < 0) goto nomem;
    if (out_shortstr(&out, "deaths") < 0 || out_longstr(&out, summary.p, summary.n) < 0) goto nomem;
    if (nremoved && (out_shortstr(&out, "reset") < 0 || out_longstr(&out, reset.p, reset.n) < 0)) goto nomem;
    if (out_put(&out, prov_tail.buf, prov_tail.len) < 0) goto nomem;
    put_u32_at(&out, prov_size_at, (uint32_t)(out.n - prov_size_at - 4));
    put_u32_at(&out, table_size_at, (uint32_t)(out.n - table_size_at - 4));
    if (out_put(&out, b + table_end, size - table_end) < 0) goto nomem;

    PyObject *origin_text = PyUnicode_DecodeUTF8((const char *)d->queue.p, d->queue.n, "strict");
    if (origin_text) {
        PyObject *key_text = PyUnicode_DecodeUTF8((const char *)key.p, key.n, "strict");
        if (key_text) result = Py_BuildValue("(NLy#N)", origin_text, replayed, (const char *)out.p, out.n, key_text);
        else Py_DECREF(origin_text);
    }
    goto done;
nomem:
    PyErr_NoMemory();
    goto done;
fallback:
    result = Py_NewRef(Py_None);
done:
    PyMem_Free(out.p);
    PyMem_Free(summary.p);
    PyMem_Free(reset.p);
    PyMem_Free(deaths);
    PyBuffer_Release(&props);
    PyBuffer_Release(&routing_key);
    PyBuffer_Release(&prov_head);
    PyBuffer_Release(&publish_id);
    PyBuffer_Release(&prov_tail);
    return result;
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
     "frames): the whole deliveries on `channel` from `offset` on, up to the first frame that is not part of one"},
    {"replay_properties", replay_properties, METH_VARARGS,
     "replay_properties(props, routing_key, history_names, reset_names, keep_history, prov_head, at, "
     "publish_id, prov_tail[, slow_names, slow_prefixes]) -> (origin, replay_count, new_props, original_routing_key) "
     "or None"},
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
