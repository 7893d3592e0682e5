/* Runs of step lines of one shape, read into columns in one call: the runners' metrics.jsonl step lines
 * and the `LOG <time> - (<epoch>, <step>) name : value ...` lines of the Neuron samples.
 *
 * Each function reads lines[start:] while every line has the first one's shape and returns the columns of
 * those lines. It stops at the first line it cannot read exactly as the line-by-line parser in parsers.py
 * does, which then reads that line: anything unusual (escapes, non-ASCII text in a LOG line, integers of 19
 * digits or more, JSON's NaN literals, underscores in numbers) ends a run.
 *
 * The numbers of a run are copied into one JSON array and read by a single orjson.loads call, as the line
 * path reads metrics.jsonl; numbers orjson refuses (beyond a double) are read one by one as json and float()
 * read them, with PyOS_string_to_double, the function behind both.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_FIELDS 128
#define MAX_INT_DIGITS 18 /* an int the parsers read without a bigint */
#define MAX_TOKEN 63

static PyObject *orjson_loads; /* NULL without orjson */

typedef struct {
    const char *text;
    Py_ssize_t len;
} Span;

/* The numbers of the lines read so far, as the text of a JSON array: "[1.5,2,\"nan\",". */
typedef struct {
    char *data;
    Py_ssize_t len, cap;
} Buffer;

static int put(Buffer *b, const char *text, Py_ssize_t n) {
    if (b->len + n + 2 > b->cap) {
        Py_ssize_t cap = (b->len + n + 2) * 2;
        char *data = PyMem_Realloc(b->data, cap);
        if (data == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        b->data = data;
        b->cap = cap;
    }
    memcpy(b->data + b->len, text, n);
    b->len += n;
    return 0;
}

static int put_number(Buffer *b, Span token, int quoted) {
    if (quoted && put(b, "\"", 1) < 0) return -1;
    if (put(b, token.text, token.len) < 0) return -1;
    return put(b, quoted ? "\"," : ",", quoted ? 2 : 1);
}

static inline int is_digit(char c) { return c >= '0' && c <= '9'; }
static inline int is_json_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static inline int is_log_space(char c) { return c == ' ' || c == '\t'; }

static int span_is(Span s, const char *text) {
    Py_ssize_t n = (Py_ssize_t)strlen(text);
    return s.len == n && memcmp(s.text, text, n) == 0;
}

/* The end of a JSON number at p (NULL when there is none); *is_int when it has no fraction or exponent. */
static const char *json_number_end(const char *p, const char *end, int *is_int) {
    const char *start = p;
    if (p < end && *p == '-') p++;
    if (p >= end || !is_digit(*p)) return NULL;
    if (*p == '0') {
        p++;
    } else {
        while (p < end && is_digit(*p)) p++;
    }
    Py_ssize_t digits = p - start - (*start == '-');
    *is_int = 1;
    if (p < end && *p == '.') {
        p++;
        if (p >= end || !is_digit(*p)) return NULL;
        while (p < end && is_digit(*p)) p++;
        *is_int = 0;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || !is_digit(*p)) return NULL;
        while (p < end && is_digit(*p)) p++;
        *is_int = 0;
    }
    if ((*is_int && digits > MAX_INT_DIGITS) || p - start > MAX_TOKEN) return NULL;
    return p;
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

/* The buffer's numbers, nrows x width in rows, as `width` column lists. Strings (non-finite floats, and LOG
 * values other than JSON floats) are read by token_to_double. */
static PyObject *columns_of(Buffer *b, Py_ssize_t nrows, Py_ssize_t width) {
    PyObject *values = NULL;
    if (nrows > 0 && orjson_loads != NULL) {
        b->data[0] = '[';
        b->data[b->len - 1] = ']';
        PyObject *view = PyMemoryView_FromMemory(b->data, b->len, PyBUF_READ);
        if (view == NULL) return NULL;
        values = PyObject_CallOneArg(orjson_loads, view);
        Py_DECREF(view);
        if (values == NULL) PyErr_Clear(); /* a number beyond a double: one by one below */
        b->data[b->len - 1] = ',';
    }
    if (values == NULL) {
        values = PyList_New(nrows * width);
        if (values == NULL) return NULL;
        const char *p = b->data + 1, *end = b->data + b->len;
        for (Py_ssize_t i = 0; i < nrows * width; i++) {
            const char *q = memchr(p, ',', end - p);
            Span token = {p, q - p};
            PyObject *item;
            int is_int;
            if (token.text[0] == '"') {
                item = PyUnicode_FromStringAndSize(token.text + 1, token.len - 2);
            } else if (json_number_end(token.text, q, &is_int) == q && is_int) {
                char digits[MAX_TOKEN + 1];
                memcpy(digits, token.text, token.len);
                digits[token.len] = '\0';
                item = PyLong_FromString(digits, NULL, 10);
            } else {
                double x = 0.0;
                token_to_double(token, &x); /* a JSON number of at most MAX_TOKEN characters */
                item = PyFloat_FromDouble(x);
            }
            if (item == NULL) {
                Py_DECREF(values);
                return NULL;
            }
            PyList_SET_ITEM(values, i, item);
            p = q + 1;
        }
    }
    PyObject *columns = PyList_New(width);
    if (columns == NULL || !PyList_Check(values) || PyList_GET_SIZE(values) != nrows * width) goto error;
    for (Py_ssize_t c = 0; c < width; c++) {
        PyObject *column = PyList_New(nrows);
        if (column == NULL) goto error;
        PyList_SET_ITEM(columns, c, column);
        for (Py_ssize_t r = 0; r < nrows; r++) {
            PyObject *item = PyList_GET_ITEM(values, r * width + c);
            double x;
            if (PyUnicode_Check(item)) {
                Py_ssize_t n;
                const char *text = PyUnicode_AsUTF8AndSize(item, &n);
                if (text == NULL || !token_to_double((Span){text, n}, &x)) goto error;
                item = PyFloat_FromDouble(x);
            } else {
                Py_INCREF(item);
            }
            if (item == NULL) goto error;
            PyList_SET_ITEM(column, r, item);
        }
    }
    Py_DECREF(values);
    return columns;
error:
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "_linescan: numbers read back wrongly");
    Py_XDECREF(columns);
    Py_DECREF(values);
    return NULL;
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

/* Appends the values of one line of the shape (but for "kind", which must be "step") to the buffer;
 * 0 when it is not such a line (the buffer then as it was, or -1 on an error). With learn set, the shape is
 * taken from this line. */
static int read_json_line(const char *p, const char *end, JsonShape *shape, Buffer *b, int learn) {
    Py_ssize_t i = 0, mark = b->len;
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
        if (p < end && *p == '"') {
            if ((p = json_plain_string(p, end, &value)) == NULL) goto fail;
            if (i == shape->kind_at) {
                if (!span_is(value, "step")) goto fail;
            } else if (i == shape->step_at || i == shape->t_at ||
                       !(span_is(value, "nan") || span_is(value, "inf") || span_is(value, "-inf"))) {
                goto fail;
            } else if (put_number(b, value, 1) < 0) {
                return -1;
            }
        } else {
            int is_int;
            const char *start = p;
            if (i == shape->kind_at || (p = json_number_end(p, end, &is_int)) == NULL) goto fail;
            if (i == shape->step_at && !is_int) goto fail;
            if (put_number(b, (Span){start, p - start}, 0) < 0) return -1;
        }
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
    b->len = mark;
    return 0;
}

static PyObject *jsonl_steps(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *lines;
    Py_ssize_t start;
    if (!PyArg_ParseTuple(args, "O!n", &PyList_Type, &lines, &start)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(lines), len;
    if (start < 0 || start >= n) Py_RETURN_NONE;
    JsonShape shape = {.n = 0, .kind_at = -1, .step_at = -1, .t_at = -1};
    Buffer b = {NULL, 0, 0};
    PyObject *keys = NULL, *columns = NULL;
    if (put(&b, "[", 1) < 0) return NULL;
    Py_ssize_t at = start;
    int read = 1;
    for (; at < n; at++) {
        const char *text = as_utf8(PyList_GET_ITEM(lines, at), &len);
        read = text == NULL ? 0 : read_json_line(text, text + len, &shape, &b, at == start);
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
    columns = columns_of(&b, at - start, shape.n - 1);
done:
    PyMem_Free(b.data);
    if (columns == NULL) {
        Py_XDECREF(keys);
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    return Py_BuildValue("nNN", at, keys, columns);
}

/* ---- LOG lines ---- */

/* `-?\d{1,18}` at p, as an int. */
static const char *log_int(const char *p, const char *end, long long *out) {
    int negative = p < end && *p == '-';
    p += negative;
    const char *digits = p;
    long long v = 0;
    while (p < end && is_digit(*p) && p - digits < MAX_INT_DIGITS + 1) v = v * 10 + (*p++ - '0');
    Py_ssize_t count = p - digits;
    if (count < 1 || count > MAX_INT_DIGITS) return NULL;
    *out = negative ? -v : v;
    return p;
}

/* `LOG\s[^()]*\(\s*(-?\d{1,18})\s*,\s*(-?\d{1,18})\s*\)` at the start of the line; p past it. */
static const char *log_head(const char *p, const char *end, long long *epoch, long long *step) {
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
        uint64_t below = (word - ones * 0x20) & ~word & highs; /* some byte < 0x20 */
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

/* Appends a LOG value: a JSON number with a fraction or exponent as it is, any other text float() reads as a
 * string (read by token_to_double later: an integer such as "-0" is a float for float(), -0.0, not the int
 * JSON makes of it); 0 when float() would not read it. */
static int put_log_value(Buffer *b, Span token) {
    int is_int;
    if (memchr(token.text, '_', token.len) != NULL) return 0; /* float() reads "1_0"; leave it to it */
    if (json_number_end(token.text, token.text + token.len, &is_int) == token.text + token.len && !is_int)
        return put_number(b, token, 0) < 0 ? -1 : 1;
    double x;
    if (!token_to_double(token, &x)) return 0;
    return put_number(b, token, 1) < 0 ? -1 : 1;
}

typedef struct {
    Span names[MAX_FIELDS];
    Py_ssize_t n;
} LogShape;

/* Appends the values of a LOG line with the shape's fields to the buffer, its epoch and step to theirs;
 * 0 when it is not such a line (the buffers then as they were), -1 on an error. With learn set, the shape is
 * taken from this line. */
static int read_log_line(const char *p, Py_ssize_t len, LogShape *shape, Buffer *b, PyObject *epochs,
                         PyObject *steps, int learn) {
    const char *end = p + len;
    long long epoch, step;
    Py_ssize_t i = 0, mark = b->len;
    if (len < 4 || memcmp(p, "LOG", 3) != 0 || !plain_ascii(p, len)) return 0;
    if ((p = log_head(p, end, &epoch, &step)) == NULL) return 0;
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
        int got = put_log_value(b, value);
        if (got < 0) return -1;
        if (got == 0) goto fail;
    }
    if (learn) shape->n = i;
    if (i == 0 || i != shape->n) goto fail;
    PyObject *e = PyLong_FromLongLong(epoch), *s = PyLong_FromLongLong(step);
    int failed = e == NULL || s == NULL || PyList_Append(epochs, e) < 0 || PyList_Append(steps, s) < 0;
    Py_XDECREF(e);
    Py_XDECREF(s);
    return failed ? -1 : 1;
fail:
    b->len = mark;
    return 0;
}

static PyObject *log_steps(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *lines;
    Py_ssize_t start;
    if (!PyArg_ParseTuple(args, "O!n", &PyList_Type, &lines, &start)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(lines), len;
    if (start < 0 || start >= n) Py_RETURN_NONE;
    LogShape shape = {.n = 0};
    Buffer b = {NULL, 0, 0};
    PyObject *names = NULL, *columns = NULL;
    PyObject *epochs = PyList_New(0), *steps = PyList_New(0);
    if (epochs == NULL || steps == NULL || put(&b, "[", 1) < 0) goto done;
    Py_ssize_t at = start;
    int read = 1;
    for (; at < n; at++) {
        const char *text = as_utf8(PyList_GET_ITEM(lines, at), &len);
        read = text == NULL ? 0 : read_log_line(text, len, &shape, &b, epochs, steps, at == start);
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
    columns = columns_of(&b, at - start, shape.n);
done:
    PyMem_Free(b.data);
    if (columns == NULL) {
        Py_XDECREF(names);
        Py_XDECREF(epochs);
        Py_XDECREF(steps);
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    return Py_BuildValue("nNNNN", at, names, epochs, steps, columns);
}

static PyMethodDef methods[] = {
    {"jsonl_steps", jsonl_steps, METH_VARARGS,
     "jsonl_steps(lines, start) -> (end, keys, columns) | None\n\n"
     "lines[start:end]: metrics.jsonl step lines with the keys of lines[start] in its order, each value a "
     "number (or \"nan\", \"inf\", \"-inf\"); keys and columns leave out \"kind\"."},
    {"log_steps", log_steps, METH_VARARGS,
     "log_steps(lines, start) -> (end, names, epochs, steps, columns) | None\n\n"
     "lines[start:end]: `LOG <time> - (<epoch>, <step>) name : value ...` lines with the names of "
     "lines[start], in its order; the values are floats."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_linescan", .m_size = -1, .m_methods = methods};

PyMODINIT_FUNC PyInit__linescan(void) {
    PyObject *orjson = PyImport_ImportModule("orjson");
    if (orjson == NULL) {
        PyErr_Clear(); /* every number is read one by one */
    } else {
        orjson_loads = PyObject_GetAttrString(orjson, "loads");
        Py_DECREF(orjson);
        if (orjson_loads == NULL) PyErr_Clear();
    }
    return PyModule_Create(&module);
}
