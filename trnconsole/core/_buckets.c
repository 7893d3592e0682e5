/* The min and max of each bucket of a series' new points, in one pass over their doubles: what Series._fold
 * otherwise does with zip(), min() and max() over Python numbers, several passes per point.
 *
 * Only for finite floats and ints of at most 2**53 in magnitude: their doubles are exact, so comparing those
 * gives what min() and max() give, the first of equal values (0.0 and -0.0, 1 and 1.0) included.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>

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

/* extremes(values, width) -> (mins, maxes, lowest, highest) | None */
static PyObject *extremes(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *values;
    Py_ssize_t width;
    if (!PyArg_ParseTuple(args, "O!n", &PyList_Type, &values, &width)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(values);
    if (width < 1 || n == 0 || n % width != 0) Py_RETURN_NONE;
    double *xs = PyMem_Malloc(n * sizeof(double));
    if (xs == NULL) return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!exact_double(PyList_GET_ITEM(values, i), &xs[i])) {
            PyMem_Free(xs);
            if (PyErr_Occurred()) return NULL;
            Py_RETURN_NONE;
        }
    }
    Py_ssize_t buckets = n / width, lowest = 0, highest = 0;
    PyObject *mins = PyList_New(buckets), *maxes = PyList_New(buckets);
    if (mins == NULL || maxes == NULL) {
        Py_XDECREF(mins);
        Py_XDECREF(maxes);
        PyMem_Free(xs);
        return NULL;
    }
    for (Py_ssize_t b = 0; b < buckets; b++) {
        Py_ssize_t at = b * width, lo = at, hi = at;
        for (Py_ssize_t i = at + 1; i < at + width; i++) {
            if (xs[i] < xs[lo]) {
                lo = i;
            } else if (xs[i] > xs[hi]) {
                hi = i;
            }
        }
        PyObject *low = PyList_GET_ITEM(values, lo), *high = PyList_GET_ITEM(values, hi);
        Py_INCREF(low);
        Py_INCREF(high);
        PyList_SET_ITEM(mins, b, low);
        PyList_SET_ITEM(maxes, b, high);
        if (xs[lo] < xs[lowest]) lowest = lo;
        if (xs[hi] > xs[highest]) highest = hi;
    }
    PyMem_Free(xs);
    return Py_BuildValue("NNOO", mins, maxes, PyList_GET_ITEM(values, lowest), PyList_GET_ITEM(values, highest));
}

static PyMethodDef methods[] = {
    {"extremes", extremes, METH_VARARGS,
     "extremes(values, width) -> (mins, maxes, lowest, highest) | None\n\n"
     "The min and max of each `width` consecutive values, and of them all, as min() and max() give them; "
     "None unless the values are finite floats and ints of at most 2**53, a whole number of buckets."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_buckets", .m_size = -1, .m_methods = methods};

PyMODINIT_FUNC PyInit__buckets(void) { return PyModule_Create(&module); }
