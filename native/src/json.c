/* A strict, bounded JSON parser for the bundle manifest (FORMAT.md "Native readers").
 *
 * It accepts what the Python reader accepts (json.loads with duplicate keys and NaN/Infinity
 * refused, after a strict UTF-8 decode): RFC 8259 JSON, no BOM, no control characters in strings,
 * no NaN/Infinity literals, no duplicate keys in an object. Nesting is limited to
 * VKC_JSON_MAX_DEPTH (Python's limit is its recursion limit, near 1000; a manifest nests 5 deep),
 * so recursion is bounded. Every node costs at least one byte of input, so memory is O(input).
 * Integers keep their exact value up to int64; larger ones are flagged `big` (every range check
 * then fails, as Python's does for the exact value).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

typedef struct parser {
    const unsigned char *p, *end, *start;
    jdoc *doc;
    vkc_error *err;
    vkc_status status;
} parser;

static int perr(parser *ps, const char *what) {
    if (ps->status == VKC_OK)
        ps->status = vkc__fail(ps->err, VKC_ERR_BUNDLE, "manifest json",
                               "the manifest is not valid UTF-8 JSON: %s at byte %ld", what,
                               (long)(ps->p - ps->start));
    return -1;
}

static int oom(parser *ps) {
    if (ps->status == VKC_OK)
        ps->status = vkc__fail(ps->err, VKC_ERR_OUT_OF_MEMORY, "", "out of memory parsing the manifest");
    return -1;
}

/* Validates the whole text as UTF-8 first (Python decodes before parsing): no overlongs, no
 * surrogates, nothing above U+10FFFF. */
static int utf8_valid(const unsigned char *s, size_t n, size_t *bad) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i], need, cp, min;
        if (c < 0x80) { i++; continue; }
        if (c >= 0xC2 && c <= 0xDF) { need = 1; cp = c & 0x1F; min = 0x80; }
        else if (c >= 0xE0 && c <= 0xEF) { need = 2; cp = c & 0x0F; min = 0x800; }
        else if (c >= 0xF0 && c <= 0xF4) { need = 3; cp = c & 0x07; min = 0x10000; }
        else { *bad = i; return 0; }
        if (n - i <= need) { *bad = i; return 0; }
        for (unsigned k = 1; k <= need; k++) {
            if ((s[i + k] & 0xC0) != 0x80) { *bad = i; return 0; }
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) { *bad = i; return 0; }
        i += need + 1;
    }
    return 1;
}

static void skip_ws(parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')) ps->p++;
}

static int new_node(parser *ps, uint8_t type) {
    jdoc *d = ps->doc;
    if (d->count == d->cap) {
        uint32_t cap = d->cap ? d->cap * 2 : 64;
        jnode *grown = realloc(d->nodes, (size_t)cap * sizeof *grown);
        if (!grown) return oom(ps);
        d->nodes = grown;
        d->cap = cap;
    }
    memset(&d->nodes[d->count], 0, sizeof d->nodes[0]);
    d->nodes[d->count].type = type;
    return (int)d->count++;
}

static int hex4(parser *ps, unsigned *out) {
    unsigned v = 0;
    if (ps->end - ps->p < 4) return perr(ps, "a truncated \\u escape");
    for (int k = 0; k < 4; k++) {
        unsigned c = *ps->p++, h;
        if (c >= '0' && c <= '9') h = c - '0';
        else if (c >= 'a' && c <= 'f') h = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') h = c - 'A' + 10;
        else return perr(ps, "a bad \\u escape");
        v = v << 4 | h;
    }
    *out = v;
    return 0;
}

static char *put_cp(char *o, unsigned cp) {  /* UTF-8; a lone surrogate as its 3-byte form, as Python keeps it */
    if (cp < 0x80) *o++ = (char)cp;
    else if (cp < 0x800) { *o++ = (char)(0xC0 | cp >> 6); *o++ = (char)(0x80 | (cp & 0x3F)); }
    else if (cp < 0x10000) {
        *o++ = (char)(0xE0 | cp >> 12); *o++ = (char)(0x80 | (cp >> 6 & 0x3F)); *o++ = (char)(0x80 | (cp & 0x3F));
    } else {
        *o++ = (char)(0xF0 | cp >> 18); *o++ = (char)(0x80 | (cp >> 12 & 0x3F));
        *o++ = (char)(0x80 | (cp >> 6 & 0x3F)); *o++ = (char)(0x80 | (cp & 0x3F));
    }
    return o;
}

/* A string at ps->p (on the quote): decoded into doc->strings, which has room for the whole input
 * plus one NUL per string (a decoded string is never longer than its source). */
static int parse_string(parser *ps, const char **out, uint32_t *out_len) {
    char *start = ps->doc->strings + ps->doc->strings_used, *o = start;
    ps->p++;
    for (;;) {
        unsigned c;
        if (ps->p >= ps->end) return perr(ps, "an unterminated string");
        c = *ps->p++;
        if (c == '"') break;
        if (c < 0x20) return perr(ps, "a control character in a string");
        if (c != '\\') { *o++ = (char)c; continue; }
        if (ps->p >= ps->end) return perr(ps, "an unterminated string");
        c = *ps->p++;
        switch (c) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '/': *o++ = '/'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            unsigned cp, lo;
            if (hex4(ps, &cp)) return -1;
            if (cp >= 0xD800 && cp <= 0xDBFF && ps->end - ps->p >= 6 && ps->p[0] == '\\' && ps->p[1] == 'u') {
                const unsigned char *save = ps->p;
                ps->p += 2;
                if (hex4(ps, &lo)) return -1;
                if (lo >= 0xDC00 && lo <= 0xDFFF) cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                else ps->p = save;
            }
            o = put_cp(o, cp);
            break;
        }
        default: return perr(ps, "a bad escape");
        }
    }
    *o++ = '\0';
    *out = start;
    *out_len = (uint32_t)(o - start - 1);
    ps->doc->strings_used += (size_t)(o - start);
    return 0;
}

static int parse_number(parser *ps, int idx) {
    const unsigned char *s = ps->p;
    int is_float = 0, neg = 0;
    if (ps->p < ps->end && *ps->p == '-') { neg = 1; ps->p++; }
    if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') return perr(ps, "a bad number");
    if (*ps->p == '0') ps->p++;
    else while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') ps->p++;
    if (ps->p < ps->end && *ps->p == '.') {
        is_float = 1;
        ps->p++;
        if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') return perr(ps, "a bad number");
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') ps->p++;
    }
    if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
        is_float = 1;
        ps->p++;
        if (ps->p < ps->end && (*ps->p == '+' || *ps->p == '-')) ps->p++;
        if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') return perr(ps, "a bad number");
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') ps->p++;
    }
    {
        jnode *n = &ps->doc->nodes[idx];
        size_t len = (size_t)(ps->p - s);
        if (is_float) {
            char buf[512];
            if (len >= sizeof buf) {  /* absurdly long float: Python parses it; its value is huge or tiny */
                n->type = J_FLOAT;
                n->d = HUGE_VAL;
                return 0;
            }
            memcpy(buf, s, len);
            buf[len] = '\0';
            n->type = J_FLOAT;
            n->d = strtod(buf, NULL);
        } else {
            const unsigned char *q = s + neg;
            uint64_t v = 0;
            n->type = J_INT;
            if (len - (size_t)neg > 4300) return perr(ps, "an integer of more than 4300 digits");
            for (; q < ps->p; q++) {
                unsigned dgt = (unsigned)(*q - '0');
                if (v > (UINT64_MAX - dgt) / 10) { n->big = 1; break; }
                v = v * 10 + dgt;
            }
            if (!n->big && !neg && v > (uint64_t)INT64_MAX) n->big = 1;
            if (!n->big && neg && v > (uint64_t)INT64_MAX + 1) n->big = 1;
            if (n->big) n->i = neg ? INT64_MIN : INT64_MAX;
            else n->i = neg ? (v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v) : (int64_t)v;
        }
    }
    return 0;
}

static int key_cmp(const void *a, const void *b) {
    const jnode *x = *(const jnode *const *)a, *y = *(const jnode *const *)b;
    return strcmp(x->key, y->key);
}

static int parse_value(parser *ps, int depth);

/* No two members of an object share a key: sort pointers to them, compare neighbours. Keys hold
 * no NUL only when escaped as \u0000; such keys compare by their prefix, a stricter check. */
static int check_duplicates(parser *ps, int obj) {
    jdoc *d = ps->doc;
    uint32_t n = d->nodes[obj].len, k = 0, c;
    const jnode **list;
    if (n < 2) return 0;
    list = malloc((size_t)n * sizeof *list);
    if (!list) return oom(ps);
    for (c = d->nodes[obj].first; c; c = d->nodes[c].next) list[k++] = &d->nodes[c];
    qsort(list, n, sizeof *list, key_cmp);
    for (k = 1; k < n; k++)
        if (strcmp(list[k - 1]->key, list[k]->key) == 0) {
            free(list);
            return perr(ps, "a key that appears twice in one object");
        }
    free(list);
    return 0;
}

static int parse_container(parser *ps, int depth, int is_object) {
    int idx = new_node(ps, is_object ? J_OBJECT : J_ARRAY), last = 0;
    unsigned char close = is_object ? '}' : ']';
    if (idx < 0) return -1;
    if (depth >= VKC_JSON_MAX_DEPTH) return perr(ps, "nesting deeper than 64 levels");
    ps->p++;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
        return idx;
    }
    for (;;) {
        const char *key = NULL;
        uint32_t key_len;
        int child;
        skip_ws(ps);
        if (is_object) {
            if (ps->p >= ps->end || *ps->p != '"') return perr(ps, "an object key that is not a string");
            if (parse_string(ps, &key, &key_len)) return -1;
            skip_ws(ps);
            if (ps->p >= ps->end || *ps->p != ':') return perr(ps, "a missing ':'");
            ps->p++;
            skip_ws(ps);
        }
        child = parse_value(ps, depth + 1);
        if (child < 0) return -1;
        ps->doc->nodes[child].key = key;
        if (last) ps->doc->nodes[last].next = (uint32_t)child;
        else ps->doc->nodes[idx].first = (uint32_t)child;
        last = child;
        ps->doc->nodes[idx].len++;
        skip_ws(ps);
        if (ps->p >= ps->end) return perr(ps, "an unterminated list or object");
        if (*ps->p == ',') { ps->p++; continue; }
        if (*ps->p == close) { ps->p++; break; }
        return perr(ps, "a missing ',' or closing bracket");
    }
    if (is_object && check_duplicates(ps, idx)) return -1;
    return idx;
}

static int literal(parser *ps, const char *word, uint8_t type) {
    size_t n = strlen(word);
    int idx;
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0) return perr(ps, "an unexpected character");
    ps->p += n;
    idx = new_node(ps, type);
    return idx;
}

static int parse_value(parser *ps, int depth) {
    if (ps->p >= ps->end) return perr(ps, "an unexpected end");
    switch (*ps->p) {
    case '{': return parse_container(ps, depth, 1);
    case '[': return parse_container(ps, depth, 0);
    case '"': {
        int idx = new_node(ps, J_STRING);
        const char *s;
        uint32_t n;
        if (idx < 0 || parse_string(ps, &s, &n)) return -1;
        ps->doc->nodes[idx].s = s;
        ps->doc->nodes[idx].len = n;
        return idx;
    }
    case 't': return literal(ps, "true", J_TRUE);
    case 'f': return literal(ps, "false", J_FALSE);
    case 'n': return literal(ps, "null", J_NULL);
    case 'N': case 'I': return perr(ps, "NaN or Infinity, which is not JSON");
    default: {
        int idx;
        if (*ps->p == '-' && ps->end - ps->p >= 9 && memcmp(ps->p, "-Infinity", 9) == 0)
            return perr(ps, "-Infinity, which is not JSON");
        idx = new_node(ps, J_INT);
        if (idx < 0 || parse_number(ps, idx)) return -1;
        return idx;
    }
    }
}

vkc_status vkc_json_parse(const char *text, size_t len, jdoc *doc, vkc_error *err) {
    parser ps;
    size_t bad;
    memset(doc, 0, sizeof *doc);
    ps.start = ps.p = (const unsigned char *)text;
    ps.end = ps.p + len;
    ps.doc = doc;
    ps.err = err;
    ps.status = VKC_OK;
    if (!utf8_valid(ps.p, len, &bad))
        return vkc__fail(err, VKC_ERR_BUNDLE, "manifest json", "the manifest is not valid UTF-8 JSON: "
                         "invalid UTF-8 at byte %lu", (unsigned long)bad);
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0)
        return vkc__fail(err, VKC_ERR_BUNDLE, "manifest json", "the manifest is not valid UTF-8 JSON: "
                         "it starts with a byte order mark");
    doc->strings = malloc(len + 1);
    if (!doc->strings) return vkc__fail(err, VKC_ERR_OUT_OF_MEMORY, "", "out of memory parsing the manifest");
    skip_ws(&ps);
    if (parse_value(&ps, 0) < 0) {
        vkc_json_free(doc);
        return ps.status;
    }
    skip_ws(&ps);
    if (ps.p != ps.end) {
        perr(&ps, "extra data after the JSON value");
        vkc_json_free(doc);
        return ps.status;
    }
    if (doc->nodes[0].type != J_OBJECT) {
        static const char *const names[] = {"null", "bool", "bool", "int", "float", "str", "list", "dict"};
        vkc_status s = vkc__fail(err, VKC_ERR_BUNDLE, "manifest json", "the manifest is a JSON %s, not an object",
                                 names[doc->nodes[0].type]);
        vkc_json_free(doc);
        return s;
    }
    return VKC_OK;
}

void vkc_json_free(jdoc *doc) {
    free(doc->nodes);
    free(doc->strings);
    memset(doc, 0, sizeof *doc);
}

const jnode *vkc_json_child(const jdoc *doc, const jnode *node) {
    return node && (node->type == J_ARRAY || node->type == J_OBJECT) && node->first ? &doc->nodes[node->first] : NULL;
}

const jnode *vkc_json_next(const jdoc *doc, const jnode *node) {
    return node && node->next ? &doc->nodes[node->next] : NULL;
}

const jnode *vkc_json_get(const jdoc *doc, const jnode *obj, const char *key) {
    const jnode *c;
    if (!obj || obj->type != J_OBJECT) return NULL;
    for (c = vkc_json_child(doc, obj); c; c = vkc_json_next(doc, c))
        if (strcmp(c->key, key) == 0) return c;
    return NULL;
}
