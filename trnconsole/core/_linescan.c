/* Runs of step lines of one shape, read into columns in one call: the runners' metrics.jsonl step lines
 * and the `LOG <time> - (<epoch>, <step>) name : value ...` lines of the Neuron samples.
 *
 * Each function reads lines[start:] while every line has the first one's shape and returns the columns of
 * those lines as typed arrays (array.array: 'q' for a column of integers, 'd' for one of floats), so that
 * no Python object is made per value. It stops at the first line it cannot read exactly as the line-by-line
 * parser in parsers.py does, which then reads that line: anything unusual (escapes, non-ASCII text in a LOG
 * line, integers of 19 digits or more, JSON's NaN literals, underscores in numbers, a metrics.jsonl value
 * that is an integer where the first line had a float or the other way round) ends a run.
 *
 * Numbers are read as json and float() read them. Nearly all are read here, each by one correctly rounded
 * operation on exact operands (see exact_double); the few others (more than 19 digits, exponents far from
 * 0, ties) are copied into one JSON array read by a single orjson.loads call, as the line path reads
 * metrics.jsonl, and any orjson refuses (beyond a double) one by one with PyOS_string_to_double, the
 * function behind both json and float().
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <float.h>
#include <stdint.h>
#include <string.h>

#define MAX_FIELDS 128
#define MAX_INT_DIGITS 18 /* an int the parsers read without a bigint */
#define MAX_TOKEN 63
#define MAX_EXACT_MANTISSA (1ULL << 53)

static PyObject *orjson_loads; /* NULL without orjson */
static PyObject *array_type;   /* array.array */
static double nan_value, inf_value;

static const double powers_of_ten[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                       1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

typedef struct {
    const char *text;
    Py_ssize_t len;
} Span;

static inline int is_digit(char c) { return c >= '0' && c <= '9'; }
static inline int is_json_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static inline int is_log_space(char c) { return c == ' ' || c == '\t'; }

static int span_is(Span s, const char *text) {
    Py_ssize_t n = (Py_ssize_t)strlen(text);
    return s.len == n && memcmp(s.text, text, n) == 0;
}

static int grow(void **data, Py_ssize_t *cap, Py_ssize_t need, size_t item) {
    if (need <= *cap) return 0;
    Py_ssize_t more = need * 2;
    void *bigger = PyMem_Realloc(*data, more * item);
    if (bigger == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    *data = bigger;
    *cap = more;
    return 0;
}

/* ---- the table of a run: one 8-byte cell per value, row after row ---- */

typedef union {
    int64_t i;
    double d;
} Cell;

typedef struct {
    Cell *cells;
    Py_ssize_t len, cap;
    /* Numbers left to orjson: their text as a JSON array, "[1.5,2e-300,", and the cells they go to. */
    char *slow;
    Py_ssize_t slow_len, slow_cap;
    Py_ssize_t *slow_at;
    Py_ssize_t slow_count, slow_at_cap;
} Table;

typedef struct {
    Py_ssize_t cells, slow_len, slow_count;
} Mark;

static Mark mark_of(const Table *t) { return (Mark){t->len, t->slow_len, t->slow_count}; }

static void rewind_to(Table *t, Mark m) {
    t->len = m.cells;
    t->slow_len = m.slow_len;
    t->slow_count = m.slow_count;
}

static void table_free(Table *t) {
    PyMem_Free(t->cells);
    PyMem_Free(t->slow);
    PyMem_Free(t->slow_at);
}

static int push_int(Table *t, int64_t v) {
    if (grow((void **)&t->cells, &t->cap, t->len + 1, sizeof(Cell)) < 0) return -1;
    t->cells[t->len++].i = v;
    return 0;
}

static int push_double(Table *t, double v) {
    if (grow((void **)&t->cells, &t->cap, t->len + 1, sizeof(Cell)) < 0) return -1;
    t->cells[t->len++].d = v;
    return 0;
}

/* A cell whose double orjson reads later from the token's text. */
static int push_slow(Table *t, Span token) {
    if (grow((void **)&t->slow, &t->slow_cap, t->slow_len + token.len + 2, 1) < 0 ||
        grow((void **)&t->slow_at, &t->slow_at_cap, t->slow_count + 1, sizeof(Py_ssize_t)) < 0)
        return -1;
    char separator = t->slow_len == 0 ? '[' : ',';
    t->slow[t->slow_len++] = separator;
    memcpy(t->slow + t->slow_len, token.text, token.len);
    t->slow_len += token.len;
    t->slow_at[t->slow_count++] = t->len;
    return push_double(t, 0.0);
}

/* ---- numbers ---- */

/* A JSON number as read so far: its value is (-1)**negative * w * 10**q, unless it has more than 19
 * significant digits (overflow: w wrapped). `digits` counts every digit read, leading zeros included. */
typedef struct {
    uint64_t w;
    long q;
    int digits, negative, is_int, overflow;
} Number;

#if PY_LITTLE_ENDIAN
/* Whether the 8 bytes, the first at the lowest address, are all ASCII digits. */
static inline int eight_digits(uint64_t chunk) {
    const uint64_t highs = 0xF0F0F0F0F0F0F0F0ULL, threes = 0x3030303030303030ULL;
    return (chunk & highs) == threes && ((chunk + 0x0606060606060606ULL) & highs) == threes;
}

/* Their value: the digits made pairs (10 * d0 + d1 in every other byte), then the four pairs summed with
 * their powers of 100 by two multiplications whose upper halves hold the sums. */
static inline uint64_t eight_digits_value(uint64_t chunk) {
    const uint64_t pair_mask = 0x000000FF000000FFULL;
    chunk -= 0x3030303030303030ULL;
    chunk = chunk * 10 + (chunk >> 8);
    return (((chunk & pair_mask) * (100 + (1000000ULL << 32))) +
            (((chunk >> 16) & pair_mask) * (1 + (10000ULL << 32)))) >>
           32;
}
#endif

/* Appends the digits at p to n->w (n->overflow once it has more than 19 significant digits); p past them. */
static const char *read_digits(const char *p, const char *end, Number *n) {
    uint64_t w = n->w; /* in locals: stores through n could otherwise alias the text read through p */
    int digits = n->digits, overflow = n->overflow;
#if PY_LITTLE_ENDIAN
    while (end - p >= 8) {
        uint64_t chunk;
        memcpy(&chunk, p, 8);
        if (!eight_digits(chunk)) break;
        overflow |= w >= 100000000000ULL; /* 12 significant digits or more, and eight more */
        w = w * 100000000 + eight_digits_value(chunk);
        digits += 8;
        p += 8;
    }
#endif
    for (; p < end && is_digit(*p); p++) {
        overflow |= w >= 1000000000000000000ULL; /* 19 significant digits, and one more */
        w = w * 10 + (uint64_t)(*p - '0');
        digits++;
    }
    n->w = w;
    n->digits = digits;
    n->overflow = overflow;
    return p;
}

/* The JSON number at p: its end, or NULL when there is none, or when it is longer than MAX_TOKEN, or an
 * integer of more than MAX_INT_DIGITS digits. */
static const char *read_number(const char *p, const char *end, Number *n) {
    const char *start = p;
    *n = (Number){.negative = p < end && *p == '-', .is_int = 1};
    p += n->negative;
    if (p >= end || !is_digit(*p)) return NULL;
    p = *p == '0' ? p + 1 : read_digits(p, end, n); /* JSON writes no other leading zero */
    int int_digits = n->digits;
    if (p < end && *p == '.') {
        const char *fraction = ++p;
        p = read_digits(p, end, n);
        if (p == fraction) return NULL;
        n->q = -(long)(p - fraction);
        n->is_int = 0;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        int minus = p < end && *p == '-';
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || !is_digit(*p)) return NULL;
        long e = 0;
        for (; p < end && is_digit(*p); p++)
            if (e < 100000) e = e * 10 + (*p - '0'); /* beyond that, no double but 0 or inf */
        n->q += minus ? -e : e;
        n->is_int = 0;
    }
    if ((n->is_int && int_digits > MAX_INT_DIGITS) || p - start > MAX_TOKEN) return NULL;
    return p;
}

/* The int of an integer read_number read. */
static int64_t number_int(const Number *n) { return n->negative ? -(int64_t)n->w : (int64_t)n->w; }

#if LDBL_MANT_DIG == 64 && (defined(__x86_64__) || defined(__i386__))
#define X87_EXTENDED 1
static const long double long_powers_of_ten[] = {
    1e0L,  1e1L,  1e2L,  1e3L,  1e4L,  1e5L,  1e6L,  1e7L,  1e8L,  1e9L,  1e10L, 1e11L, 1e12L, 1e13L,
    1e14L, 1e15L, 1e16L, 1e17L, 1e18L, 1e19L, 1e20L, 1e21L, 1e22L, 1e23L, 1e24L, 1e25L, 1e26L, 1e27L};

/* w * 10**q for w < 2**64 and |q| <= 27 in x87 extended precision: w and 10**|q| (5**27 < 2**64) are exact
 * there, so the one multiplication or division rounds the exact value x once, to 64 bits. Rounding that to a
 * double rounds x itself unless the 64-bit result is exactly halfway between two doubles (rounding to 64
 * bits never crosses such a point, which it can represent): then 0, and the number is read elsewhere. */
static int extended_double(uint64_t w, long q, double *out) {
    if (q < -27 || q > 27) return 0;
    long double x = q < 0 ? (long double)w / long_powers_of_ten[-q] : (long double)w * long_powers_of_ten[q];
    uint64_t significand; /* x87's 80-bit format: the 64-bit significand first, its integer bit explicit */
    memcpy(&significand, &x, sizeof significand);
    if ((significand & 0x7FF) == 0x400) return 0; /* the 11 bits a double drops: a tie */
    *out = (double)x; /* within the normal doubles: w >= 1 and |q| <= 27 */
    return 1;
}
#endif

/* The double of a number read_number read when one correctly rounded operation gives it, as float() rounds
 * it: w * 10**q with w <= 2**53 and |q| <= 22 (w and 10**|q| are exact doubles), or in x87 extended
 * precision on x86. 0 for any other number (more than 19 significant digits included). */
static int exact_double(const Number *n, double *out) {
    double x;
    if (n->overflow) return 0;
    if (n->w == 0) {
        x = 0.0;
#if FLT_EVAL_METHOD == 0 /* not x87 without SSE2, where a double operation rounds twice */
    } else if (n->w <= MAX_EXACT_MANTISSA && n->q >= -22 && n->q <= 22) {
        x = n->q < 0 ? (double)n->w / powers_of_ten[-n->q] : (double)n->w * powers_of_ten[n->q];
#endif
#ifdef X87_EXTENDED
    } else if (extended_double(n->w, n->q, &x)) {
#endif
    } else {
        return 0;
    }
    *out = n->negative ? -x : x;
    return 1;
}

/* float() of a token (one without whitespace or underscores: float() removes those first, then calls
 * this); 0 when float() would raise. */
static int token_to_double(Span token, double *out) {
    char text[MAX_TOKEN + 1];
    if (token.len > MAX_TOKEN) return 0;
    memcpy(text, token.text, token.len);
    text[token.len] = '\0';
    char *parsed;
    double x = PyOS_string_to_double(text, &parsed, NULL);
    if (parsed != text + token.len) {
        PyErr_Clear();
        return 0;
    }
    *out = x;
    return 1;
}

/* A JSON float read_number read from `token`: exact here, or left to orjson. */
static int push_json_float(Table *t, const Number *n, Span token) {
    double x;
    return exact_double(n, &x) ? push_double(t, x) : push_slow(t, token);
}

/* Fills the cells of the numbers left to orjson: read by one orjson.loads, or one by one as json reads
 * each (orjson refuses a number beyond a double, which json reads as inf). */
static int read_slow_numbers(Table *t) {
    if (t->slow_count == 0) return 0;
    PyObject *values = NULL;
    if (orjson_loads != NULL) {
        t->slow[t->slow_len] = ']'; /* grow() left room for it */
        PyObject *view = PyMemoryView_FromMemory(t->slow, t->slow_len + 1, PyBUF_READ);
        if (view == NULL) return -1;
        values = PyObject_CallOneArg(orjson_loads, view);
        Py_DECREF(view);
        if (values == NULL) PyErr_Clear();
    }
    if (values != NULL && PyList_Check(values) && PyList_GET_SIZE(values) == t->slow_count) {
        Py_ssize_t k = 0;
        for (; k < t->slow_count; k++) {
            PyObject *item = PyList_GET_ITEM(values, k);
            if (!PyFloat_CheckExact(item)) break;
            t->cells[t->slow_at[k]].d = PyFloat_AS_DOUBLE(item);
        }
        Py_DECREF(values);
        if (k == t->slow_count) return 0;
    } else {
        Py_XDECREF(values);
    }
    const char *p = t->slow + 1, *end = t->slow + t->slow_len;
    for (Py_ssize_t k = 0; k < t->slow_count; k++) {
        const char *q = memchr(p, ',', end - p);
        if (q == NULL) q = end;
        double x = 0.0;
        token_to_double((Span){p, q - p}, &x); /* a JSON number of at most MAX_TOKEN characters */
        t->cells[t->slow_at[k]].d = x;
        p = q + 1;
    }
    return 0;
}

/* array.array(typecode) holding column `c` of the table's rows of `width` cells. */
static PyObject *column_array(const Table *t, Py_ssize_t width, Py_ssize_t c, char typecode, Cell *scratch) {
    Py_ssize_t rows = t->len / width;
    for (Py_ssize_t r = 0; r < rows; r++) scratch[r] = t->cells[r * width + c];
    PyObject *column = PyObject_CallFunction(array_type, "C", typecode);
    if (column == NULL) return NULL;
    PyObject *view = PyMemoryView_FromMemory((char *)scratch, rows * (Py_ssize_t)sizeof(Cell), PyBUF_READ);
    PyObject *done = view == NULL ? NULL : PyObject_CallMethod(column, "frombytes", "O", view);
    Py_XDECREF(view);
    if (done == NULL) {
        Py_DECREF(column);
        return NULL;
    }
    Py_DECREF(done);
    return column;
}

/* The table's columns as a list of arrays, typecodes[c] ('q' or 'd') for column c. */
static PyObject *columns_of(Table *t, Py_ssize_t width, const char *typecodes) {
    if (read_slow_numbers(t) < 0) return NULL;
    Cell *scratch = PyMem_Malloc((t->len / width + 1) * sizeof(Cell));
    PyObject *columns = scratch == NULL ? PyErr_NoMemory() : PyList_New(width);
    if (columns == NULL) {
        PyMem_Free(scratch);
        return NULL;
    }
    for (Py_ssize_t c = 0; c < width; c++) {
        PyObject *column = column_array(t, width, c, typecodes[c], scratch);
        if (column == NULL) {
            Py_DECREF(columns);
            columns = NULL;
            break;
        }
        PyList_SET_ITEM(columns, c, column);
    }
    PyMem_Free(scratch);
    return columns;
}

static const char *as_utf8(PyObject *line, Py_ssize_t *len) {
    if (!PyUnicode_Check(line)) return NULL;
    const char *text = PyUnicode_AsUTF8AndSize(line, len);
    if (text == NULL) PyErr_Clear(); /* a lone surrogate: the Python path reads it */
    return text;
}

/* ---- metrics.jsonl ---- */

typedef struct {
    Span keys[MAX_FIELDS];
    char typecodes[MAX_FIELDS]; /* each value's column, "kind" (which has none) left out */
    Py_ssize_t n;
    Py_ssize_t kind_at, step_at, t_at;
} JsonShape;

static const char *skip_json_space(const char *p, const char *end) {
    while (p < end && is_json_space(*p)) p++;
    return p;
}

/* A JSON string without escapes or control characters at p (its opening quote): its text, and p past it. */
static const char *json_plain_string(const char *p, const char *end, Span *out) {
    if (p >= end || *p != '"') return NULL;
    const char *q = ++p;
    while (q < end && *q != '"') {
        if (*q == '\\' || (unsigned char)*q < 0x20) return NULL;
        q++;
    }
    if (q >= end) return NULL;
    out->text = p;
    out->len = q - p;
    return q + 1;
}

/* Whether a value of this typecode fits the column: with learn set, the column takes it. */
static int fits(JsonShape *shape, Py_ssize_t column, char typecode, int learn) {
    if (learn) shape->typecodes[column] = typecode;
    return shape->typecodes[column] == typecode;
}

/* Appends a string value of field i, column `column`: "nan", "inf" or "-inf" in a column of floats (not
 * the step nor the time); 1, 0 when it is not such a value, -1 on an error. */
static int push_json_text(JsonShape *shape, Table *t, Py_ssize_t i, Py_ssize_t column, Span value, int learn) {
    if (i == shape->step_at || i == shape->t_at || !fits(shape, column, 'd', learn)) return 0;
    if (span_is(value, "nan")) return push_double(t, nan_value) < 0 ? -1 : 1;
    if (span_is(value, "inf")) return push_double(t, inf_value) < 0 ? -1 : 1;
    if (span_is(value, "-inf")) return push_double(t, -inf_value) < 0 ? -1 : 1;
    return 0;
}

/* Appends a number of field i, column `column`, an int where the column has ints (the step always) and a
 * float where it has floats; 1, 0 when it does not fit, -1 on an error. */
static int push_json_number(JsonShape *shape, Table *t, Py_ssize_t i, Py_ssize_t column, const Number *number,
                            Span token, int learn) {
    int is_int = number->is_int;
    if (!fits(shape, column, is_int ? 'q' : 'd', learn) || (i == shape->step_at && !is_int)) return 0;
    int pushed = is_int ? push_int(t, number_int(number)) : push_json_float(t, number, token);
    return pushed < 0 ? -1 : 1;
}

/* Appends the values of one line of the shape (but for "kind", which must be "step") to the table;
 * 0 when it is not such a line (the table then as it was, or -1 on an error). With learn set, the shape is
 * taken from this line. */
static int read_json_line(const char *p, const char *end, JsonShape *shape, Table *t, int learn) {
    Py_ssize_t i = 0, column = 0;
    Mark mark = mark_of(t);
    p = skip_json_space(p, end);
    if (p >= end || *p != '{') return 0;
    p = skip_json_space(p + 1, end);
    for (;; i++) {
        Span key, value;
        if (i >= MAX_FIELDS) goto fail;
        if (learn) {
            if ((p = json_plain_string(p, end, &key)) == NULL) goto fail;
            for (Py_ssize_t k = 0; k < i; k++)
                if (shape->keys[k].len == key.len && memcmp(shape->keys[k].text, key.text, key.len) == 0)
                    goto fail; /* a key twice: json keeps the last value */
            shape->keys[i] = key;
            if (span_is(key, "kind")) shape->kind_at = i;
            if (span_is(key, "step")) shape->step_at = i;
            if (span_is(key, "t")) shape->t_at = i;
        } else {
            /* The learnt key's text, quoted: it holds no quote, escape or control character itself. */
            if (i >= shape->n) goto fail;
            key = shape->keys[i];
            if (end - p < key.len + 2 || p[0] != '"' || p[key.len + 1] != '"' ||
                memcmp(p + 1, key.text, key.len) != 0)
                goto fail;
            p += key.len + 2;
        }
        p = skip_json_space(p, end);
        if (p >= end || *p != ':') goto fail;
        p = skip_json_space(p + 1, end);
        int pushed;
        if (p < end && *p == '"') {
            if ((p = json_plain_string(p, end, &value)) == NULL) goto fail;
            pushed = i == shape->kind_at ? span_is(value, "step") : push_json_text(shape, t, i, column, value, learn);
        } else {
            Number number;
            const char *start = p;
            if (i == shape->kind_at || (p = read_number(p, end, &number)) == NULL) goto fail;
            pushed = push_json_number(shape, t, i, column, &number, (Span){start, p - start}, learn);
        }
        if (pushed < 0) return -1;
        if (pushed == 0) goto fail;
        if (i != shape->kind_at) column++;
        p = skip_json_space(p, end);
        if (p < end && *p == ',') {
            p = skip_json_space(p + 1, end);
            continue;
        }
        if (p < end && *p == '}') break;
        goto fail;
    }
    p = skip_json_space(p + 1, end);
    if (p != end) goto fail;
    if (learn) {
        shape->n = i + 1;
        if (shape->kind_at < 0 || shape->step_at < 0 || shape->t_at < 0) goto fail;
        return 1;
    }
    if (i + 1 == shape->n) return 1;
fail:
    rewind_to(t, mark);
    return 0;
}

static PyObject *jsonl_steps(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *lines;
    Py_ssize_t start;
    if (!PyArg_ParseTuple(args, "O!n", &PyList_Type, &lines, &start)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(lines), len;
    if (start < 0 || start >= n) Py_RETURN_NONE;
    JsonShape shape = {.n = 0, .kind_at = -1, .step_at = -1, .t_at = -1};
    Table t = {0};
    PyObject *keys = NULL, *columns = NULL;
    Py_ssize_t at = start;
    int read = 1;
    for (; at < n; at++) {
        const char *text = as_utf8(PyList_GET_ITEM(lines, at), &len);
        read = text == NULL ? 0 : read_json_line(text, text + len, &shape, &t, at == start);
        if (read <= 0) break;
    }
    if (read < 0 || at == start) goto done;
    keys = PyTuple_New(shape.n - 1);
    if (keys == NULL) goto done;
    for (Py_ssize_t k = 0, c = 0; k < shape.n; k++) {
        if (k == shape.kind_at) continue;
        PyObject *key = PyUnicode_DecodeUTF8(shape.keys[k].text, shape.keys[k].len, "strict");
        if (key == NULL) goto done;
        PyTuple_SET_ITEM(keys, c++, key);
    }
    columns = columns_of(&t, shape.n - 1, shape.typecodes);
done:
    table_free(&t);
    if (columns == NULL) {
        Py_XDECREF(keys);
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    return Py_BuildValue("nNN", at, keys, columns);
}

/* ---- LOG lines ---- */

/* `-?\d{1,18}` at p, as an int. */
static const char *log_int(const char *p, const char *end, int64_t *out) {
    int negative = p < end && *p == '-';
    p += negative;
    const char *digits = p;
    int64_t v = 0;
    while (p < end && is_digit(*p) && p - digits < MAX_INT_DIGITS + 1) v = v * 10 + (*p++ - '0');
    Py_ssize_t count = p - digits;
    if (count < 1 || count > MAX_INT_DIGITS) return NULL;
    *out = negative ? -v : v;
    return p;
}

/* `LOG\s[^()]*\(\s*(-?\d{1,18})\s*,\s*(-?\d{1,18})\s*\)` at the start of the line; p past it. */
static const char *log_head(const char *p, const char *end, int64_t *epoch, int64_t *step) {
    if (end - p < 4 || memcmp(p, "LOG", 3) != 0 || !is_log_space(p[3])) return NULL;
    p += 4;
    while (p < end && *p != '(' && *p != ')') p++;
    if (p >= end || *p != '(') return NULL;
    p++;
    while (p < end && is_log_space(*p)) p++;
    if ((p = log_int(p, end, epoch)) == NULL) return NULL;
    while (p < end && is_log_space(*p)) p++;
    if (p >= end || *p != ',') return NULL;
    p++;
    while (p < end && is_log_space(*p)) p++;
    if ((p = log_int(p, end, step)) == NULL) return NULL;
    while (p < end && is_log_space(*p)) p++;
    if (p >= end || *p != ')') return NULL;
    return p + 1;
}

static const char *next_token(const char *p, const char *end, Span *token) {
    while (p < end && is_log_space(*p)) p++;
    if (p >= end) return NULL;
    token->text = p;
    while (p < end && !is_log_space(*p)) p++;
    token->len = p - token->text;
    return p;
}

static int plain_byte(unsigned char c) { return (c >= 0x20 && c <= 0x7e) || c == '\t'; }

/* Printable ASCII and tabs only: Python's str.split() and the regexes' \s then split as the above does.
 * Eight bytes at a time: a word passes when none of its bytes is below 0x20 or above 0x7e. */
static int plain_ascii(const char *p, Py_ssize_t len) {
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    Py_ssize_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t word;
        memcpy(&word, p + i, 8);
        uint64_t below = (word - ones * 0x20) & ~word & highs;          /* some byte < 0x20 */
        uint64_t above = ((word + ones * (127 - 0x7e)) | word) & highs; /* some byte > 0x7e */
        if (below | above) {
            for (Py_ssize_t k = i; k < i + 8; k++)
                if (!plain_byte((unsigned char)p[k])) return 0;
        }
    }
    for (; i < len; i++)
        if (!plain_byte((unsigned char)p[i])) return 0;
    return 1;
}

/* Appends float() of a LOG value: 0 when float() would not read it. A JSON number is read here or by orjson
 * (which reads JSON floats as float() does, but makes ints of integers: those are read here or by
 * PyOS_string_to_double); any other text float() reads (".5", "1e5", "nan", "-Infinity") by the latter. */
static int push_log_value(Table *t, Span token) {
    Number number;
    double x;
    const char *end = token.text + token.len;
    if (read_number(token.text, end, &number) == end) {
        if (!number.is_int) return push_json_float(t, &number, token) < 0 ? -1 : 1;
        if (exact_double(&number, &x)) return push_double(t, x) < 0 ? -1 : 1;
    } else if (memchr(token.text, '_', token.len) != NULL) {
        return 0; /* float() reads "1_0"; leave it to it */
    }
    if (!token_to_double(token, &x)) return 0;
    return push_double(t, x) < 0 ? -1 : 1;
}

typedef struct {
    Span names[MAX_FIELDS];
    Py_ssize_t n;
} LogShape;

/* Appends a row of a LOG line with the shape's fields to the table: its epoch, its step and its values;
 * 0 when it is not such a line (the table then as it was), -1 on an error. With learn set, the shape is
 * taken from this line. */
static int read_log_line(const char *p, Py_ssize_t len, LogShape *shape, Table *t, int learn) {
    const char *end = p + len;
    int64_t epoch, step;
    Py_ssize_t i = 0;
    Mark mark = mark_of(t);
    if (len < 4 || memcmp(p, "LOG", 3) != 0 || !plain_ascii(p, len)) return 0;
    if ((p = log_head(p, end, &epoch, &step)) == NULL) return 0;
    if (push_int(t, epoch) < 0 || push_int(t, step) < 0) return -1;
    Span name, colon, value;
    for (; (p = next_token(p, end, &name)) != NULL; i++) {
        if (i >= MAX_FIELDS || (p = next_token(p, end, &colon)) == NULL ||
            (p = next_token(p, end, &value)) == NULL || !span_is(colon, ":"))
            goto fail;
        if (learn) {
            shape->names[i] = name;
        } else if (i >= shape->n || name.len != shape->names[i].len ||
                   memcmp(name.text, shape->names[i].text, name.len) != 0) {
            goto fail;
        }
        int got = push_log_value(t, value);
        if (got < 0) return -1;
        if (got == 0) goto fail;
    }
    if (learn) shape->n = i;
    if (i == 0 || i != shape->n) goto fail;
    return 1;
fail:
    rewind_to(t, mark);
    return 0;
}

static PyObject *log_steps(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *lines;
    Py_ssize_t start;
    if (!PyArg_ParseTuple(args, "O!n", &PyList_Type, &lines, &start)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(lines), len;
    if (start < 0 || start >= n) Py_RETURN_NONE;
    LogShape shape = {.n = 0};
    Table t = {0};
    PyObject *names = NULL, *columns = NULL;
    Py_ssize_t at = start;
    int read = 1;
    for (; at < n; at++) {
        const char *text = as_utf8(PyList_GET_ITEM(lines, at), &len);
        read = text == NULL ? 0 : read_log_line(text, len, &shape, &t, at == start);
        if (read <= 0) break;
    }
    if (read < 0 || at == start) goto done;
    names = PyTuple_New(shape.n);
    if (names == NULL) goto done;
    for (Py_ssize_t k = 0; k < shape.n; k++) {
        PyObject *name = PyUnicode_FromStringAndSize(shape.names[k].text, shape.names[k].len);
        if (name == NULL) goto done;
        PyTuple_SET_ITEM(names, k, name);
    }
    char typecodes[MAX_FIELDS + 2];
    memset(typecodes, 'd', sizeof typecodes);
    typecodes[0] = typecodes[1] = 'q'; /* epoch, step */
    columns = columns_of(&t, shape.n + 2, typecodes);
done:
    table_free(&t);
    if (columns == NULL) {
        Py_XDECREF(names);
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    /* (end, names, epochs, steps, value columns) */
    PyObject *values = PyList_GetSlice(columns, 2, shape.n + 2), *found = NULL;
    if (values == NULL) {
        Py_DECREF(names);
    } else {
        found = Py_BuildValue("nNOON", at, names, PyList_GET_ITEM(columns, 0), PyList_GET_ITEM(columns, 1), values);
    }
    Py_DECREF(columns);
    return found;
}

static PyMethodDef methods[] = {
    {"jsonl_steps", jsonl_steps, METH_VARARGS,
     "jsonl_steps(lines, start) -> (end, keys, columns) | None\n\n"
     "lines[start:end]: metrics.jsonl step lines with the keys of lines[start] in its order, each value a "
     "number (or \"nan\", \"inf\", \"-inf\") of the kind it has in lines[start]; keys and columns leave out "
     "\"kind\". Each column is an array.array: 'q' for integers, 'd' for floats."},
    {"log_steps", log_steps, METH_VARARGS,
     "log_steps(lines, start) -> (end, names, epochs, steps, columns) | None\n\n"
     "lines[start:end]: `LOG <time> - (<epoch>, <step>) name : value ...` lines with the names of "
     "lines[start], in its order: epochs and steps as array('q'), the values' columns as array('d')."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_linescan", .m_size = -1, .m_methods = methods};

PyMODINIT_FUNC PyInit__linescan(void) {
    PyObject *array = PyImport_ImportModule("array");
    if (array == NULL) return NULL;
    array_type = PyObject_GetAttrString(array, "array");
    Py_DECREF(array);
    if (array_type == NULL) return NULL;
    /* The doubles float("nan") and float("inf") give, bit for bit. */
    nan_value = PyOS_string_to_double("nan", NULL, NULL);
    inf_value = PyOS_string_to_double("inf", NULL, NULL);
    if (PyErr_Occurred()) return NULL;
    PyObject *orjson = PyImport_ImportModule("orjson");
    if (orjson == NULL) {
        PyErr_Clear(); /* every number exact_double leaves is read one by one */
    } else {
        orjson_loads = PyObject_GetAttrString(orjson, "loads");
        Py_DECREF(orjson);
        if (orjson_loads == NULL) PyErr_Clear();
    }
    return PyModule_Create(&module);
}
