/* The min and max of each bucket of a series' new points, in one pass over their doubles: what Series._fold
 * otherwise does with zip(), min() and max() over Python numbers, several passes per point.
 *
 * For a list, only finite floats and ints of at most 2**53 in magnitude: their doubles are exact, so comparing
 * those gives what min() and max() give, the first of equal values (0.0 and -0.0, 1 and 1.0) included. For the
 * typed arrays the compiled line reader makes, finite doubles (array('d')) or any int64s (array('q')).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <string.h>

#define EXACT_INT (1LL << 53)

/* The double of an exact float or int; 0 when it has none (or not an exact one, or not a finite one). */
static int exact_double(PyObject *value, double *out) {
    if (PyFloat_CheckExact(value)) {
        *out = PyFloat_AS_DOUBLE(value);
        return isfinite(*out);
    }
    if (PyLong_CheckExact(value)) {
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (overflow || v > EXACT_INT || v < -EXACT_INT) return 0;
        *out = (double)v;
        return 1;
    }
    return 0;
}

static PyObject *result(PyObject *mins, PyObject *maxes, PyObject *lowest, PyObject *highest) {
    if (mins == NULL || maxes == NULL || lowest == NULL || highest == NULL) {
        Py_XDECREF(mins);
        Py_XDECREF(maxes);
        Py_XDECREF(lowest);
        Py_XDECREF(highest);
        return NULL;
    }
    return Py_BuildValue("NNNN", mins, maxes, lowest, highest);
}

/* The index of the min and of the max of each bucket, and of them all, comparing as `less` does: the first
 * of equal values, as min() and max() keep it. */
#define FIND_EXTREMES(xs, n, width, lows, highs, lowest, highest)   \
    do {                                                            \
        for (Py_ssize_t b = 0; b < (n) / (width); b++) {            \
            Py_ssize_t at = b * (width), lo = at, hi = at;          \
            for (Py_ssize_t i = at + 1; i < at + (width); i++) {    \
                if ((xs)[i] < (xs)[lo]) {                           \
                    lo = i;                                         \
                } else if ((xs)[i] > (xs)[hi]) {                    \
                    hi = i;                                         \
                }                                                   \
            }                                                       \
            (lows)[b] = lo;                                         \
            (highs)[b] = hi;                                        \
            if ((xs)[lo] < (xs)[lowest]) (lowest) = lo;             \
            if ((xs)[hi] > (xs)[highest]) (highest) = hi;           \
        }                                                           \
    } while (0)

/* The values of a list at the indexes found: its own objects. */
static PyObject *list_extremes(PyObject *values, Py_ssize_t width) {
    Py_ssize_t n = PyList_GET_SIZE(values), buckets = n / width, lowest = 0, highest = 0;
    double *xs = PyMem_Malloc(n * sizeof(double));
    Py_ssize_t *lows = PyMem_Malloc(buckets * 2 * sizeof(Py_ssize_t) + 1), *highs = lows + buckets;
    if (xs == NULL || lows == NULL) {
        PyMem_Free(xs);
        PyMem_Free(lows);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!exact_double(PyList_GET_ITEM(values, i), &xs[i])) {
            PyMem_Free(xs);
            PyMem_Free(lows);
            if (PyErr_Occurred()) return NULL;
            Py_RETURN_NONE;
        }
    }
    FIND_EXTREMES(xs, n, width, lows, highs, lowest, highest);
    PyMem_Free(xs);
    PyObject *mins = PyList_New(buckets), *maxes = PyList_New(buckets);
    for (Py_ssize_t b = 0; mins != NULL && maxes != NULL && b < buckets; b++) {
        PyObject *low = PyList_GET_ITEM(values, lows[b]), *high = PyList_GET_ITEM(values, highs[b]);
        Py_INCREF(low);
        Py_INCREF(high);
        PyList_SET_ITEM(mins, b, low);
        PyList_SET_ITEM(maxes, b, high);
    }
    PyMem_Free(lows);
    PyObject *low = PyList_GET_ITEM(values, lowest), *high = PyList_GET_ITEM(values, highest);
    Py_INCREF(low);
    Py_INCREF(high);
    return result(mins, maxes, low, high);
}

/* The values of an array('d') or array('q') at the indexes found, as the array's items are: the doubles
 * compared as they are (finite ones only), the int64s exactly. */
#define ARRAY_EXTREMES(type, box)                                                             \
    do {                                                                                      \
        const type *xs = (const type *)view.buf;                                              \
        Py_ssize_t n = view.len / (Py_ssize_t)sizeof(type), buckets = n / width;              \
        Py_ssize_t lowest = 0, highest = 0;                                                   \
        Py_ssize_t *lows = PyMem_Malloc(buckets * 2 * sizeof(Py_ssize_t) + 1);                \
        if (lows == NULL) {                                                                   \
            PyBuffer_Release(&view);                                                          \
            return PyErr_NoMemory();                                                          \
        }                                                                                     \
        Py_ssize_t *highs = lows + buckets;                                                   \
        FIND_EXTREMES(xs, n, width, lows, highs, lowest, highest);                            \
        PyObject *mins = PyList_New(buckets), *maxes = PyList_New(buckets);                   \
        for (Py_ssize_t b = 0; mins != NULL && maxes != NULL && b < buckets; b++) {           \
            PyObject *low = box(xs[lows[b]]), *high = box(xs[highs[b]]);                      \
            if (low == NULL || high == NULL) {                                                \
                Py_XDECREF(low);                                                              \
                Py_XDECREF(high);                                                             \
                Py_CLEAR(mins);                                                               \
                break;                                                                        \
            }                                                                                 \
            PyList_SET_ITEM(mins, b, low);                                                    \
            PyList_SET_ITEM(maxes, b, high);                                                  \
        }                                                                                     \
        PyObject *found = result(mins, maxes, box(xs[lowest]), box(xs[highest]));             \
        PyMem_Free(lows);                                                                     \
        PyBuffer_Release(&view);                                                              \
        return found;                                                                         \
    } while (0)

static PyObject *array_extremes(PyObject *values, Py_ssize_t width) {
    Py_buffer view;
    if (PyObject_GetBuffer(values, &view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    int doubles = view.format != NULL && strcmp(view.format, "d") == 0 && view.itemsize == sizeof(double);
    int int64s = view.format != NULL && strcmp(view.format, "q") == 0 && view.itemsize == sizeof(long long);
    Py_ssize_t n = view.itemsize > 0 ? view.len / view.itemsize : 0;
    if ((!doubles && !int64s) || n == 0 || n % width != 0) {
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    if (doubles) {
        const double *xs = (const double *)view.buf;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (!isfinite(xs[i])) {
                PyBuffer_Release(&view);
                Py_RETURN_NONE;
            }
        }
        ARRAY_EXTREMES(double, PyFloat_FromDouble);
    }
    ARRAY_EXTREMES(long long, PyLong_FromLongLong);
}

/* extremes(values, width) -> (mins, maxes, lowest, highest) | None */
static PyObject *extremes(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *values;
    Py_ssize_t width;
    if (!PyArg_ParseTuple(args, "On", &values, &width)) return NULL;
    if (width < 1) Py_RETURN_NONE;
    if (!PyList_CheckExact(values)) return array_extremes(values, width);
    Py_ssize_t n = PyList_GET_SIZE(values);
    if (n == 0 || n % width != 0) Py_RETURN_NONE;
    return list_extremes(values, width);
}

/* total(values) -> float | int | None: sum(values) of an array('d') or array('q'), without a Python object
 * per value; None where it cannot promise sum()'s result. sum() of floats adds them one by one, left to
 * right, from 0 until Python 3.12, which compensates the rounding errors: there a float total is left to
 * sum(). Ints are added exactly by both, here while the total stays within an int64. */
static PyObject *total(PyObject *Py_UNUSED(module), PyObject *values) {
    Py_buffer view;
    if (PyObject_GetBuffer(values, &view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    PyObject *found = NULL;
    Py_ssize_t n = view.itemsize > 0 ? view.len / view.itemsize : 0;
    if (n == 0 || view.format == NULL) {
        /* sum() of nothing is the int 0: left to it */
    } else if (strcmp(view.format, "q") == 0 && view.itemsize == sizeof(long long)) {
        const long long *xs = (const long long *)view.buf;
        long long sum = 0;
        Py_ssize_t i = 0;
        for (; i < n && !__builtin_add_overflow(sum, xs[i], &sum); i++) {
        }
        if (i == n) found = PyLong_FromLongLong(sum);
    }
#if PY_VERSION_HEX < 0x030C0000
    else if (strcmp(view.format, "d") == 0 && view.itemsize == sizeof(double)) {
        const double *xs = (const double *)view.buf;
        double sum = 0.0;
        for (Py_ssize_t i = 0; i < n; i++) sum += xs[i];
        found = PyFloat_FromDouble(sum);
    }
#endif
    PyBuffer_Release(&view);
    if (found == NULL && !PyErr_Occurred()) Py_RETURN_NONE;
    return found;
}

static PyMethodDef methods[] = {
    {"extremes", extremes, METH_VARARGS,
     "extremes(values, width) -> (mins, maxes, lowest, highest) | None\n\n"
     "The min and max of each `width` consecutive values, and of them all, as min() and max() give them; "
     "None unless the values are a whole number of buckets, and either a list of finite floats and ints of at "
     "most 2**53 or an array('d') of finite floats or an array('q')."},
    {"total", total, METH_O,
     "total(values) -> float | int | None\n\n"
     "sum(values) of an array('q'), or of an array('d') where sum() adds floats one by one (before Python "
     "3.12); None where it would not be sum()'s result."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_buckets", .m_size = -1, .m_methods = methods};

PyMODINIT_FUNC PyInit__buckets(void) { return PyModule_Create(&module); }
