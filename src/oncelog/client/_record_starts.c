/*
 * Where each record of a Kafka record batch (magic 2) starts: the one loop over records
 * that oncelog.client.records cannot do a column at a time, because a record's position
 * depends on the lengths of all the records before it.
 *
 * Measured reason for C (bench/README.md, scenario 8s): in Python this loop took
 * ~0.14 us of the ~0.5 us a 1 KB record costs the Spark source, the largest single step.
 * oncelog.client.records keeps the same loop in Python and uses it when this module was
 * not built (a machine without a C compiler); the tests run both.
 *
 * record_starts(buffer, start, stop, count) -> bytes
 *   The positions of the `count` records' length varints in buffer[start:stop], as native
 *   int64s. Raises ValueError, its message to follow "records of the batch at offset N",
 *   when the records run past `stop`, do not fill it exactly, or a length is negative or
 *   longer than a 10-byte varint.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

static PyObject *
record_starts(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t start, stop, count;
    if (!PyArg_ParseTuple(args, "y*nnn", &view, &start, &stop, &count))
        return NULL;
    if (start < 0 || stop > view.len || start > stop || count < 0 || count > stop - start) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "do not fit in the buffer (record count or span)");
        return NULL;
    }
    PyObject *result = PyBytes_FromStringAndSize(NULL, count * (Py_ssize_t)sizeof(int64_t));
    if (result == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    int64_t *out = (int64_t *)PyBytes_AS_STRING(result);
    const unsigned char *data = (const unsigned char *)view.buf;
    const char *failure = NULL;
    Py_ssize_t position = start;

    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < count; i++) {
        if (position >= stop) {
            failure = "run past its end";
            break;
        }
        out[i] = position;
        uint64_t raw = 0;
        int shift = 0;
        for (;;) {
            if (position >= stop) {
                failure = "run past its end";
                break;
            }
            unsigned char byte = data[position++];
            raw |= (uint64_t)(byte & 0x7F) << shift;
            if (byte < 0x80)
                break;
            shift += 7;
            if (shift > 63) {
                failure = "have a length longer than a 10-byte varint";
                break;
            }
        }
        if (failure != NULL)
            break;
        int64_t length = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);  /* zigzag */
        if (length < 0) {
            failure = "have a negative length";
            break;
        }
        if (length > stop - position) {
            failure = "run past its end";
            break;
        }
        position += (Py_ssize_t)length;
    }
    if (failure == NULL && position != stop)
        failure = "do not fill it";
    Py_END_ALLOW_THREADS

    PyBuffer_Release(&view);
    if (failure != NULL) {
        Py_DECREF(result);
        PyErr_SetString(PyExc_ValueError, failure);
        return NULL;
    }
    return result;
}

static PyMethodDef methods[] = {
    {"record_starts", record_starts, METH_VARARGS,
     "record_starts(buffer, start, stop, count) -> bytes of native int64 record positions"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "oncelog.client._record_starts",
    "Where each record of a Kafka record batch starts (the loop of oncelog.client.records, in C).",
    -1, methods,
};

PyMODINIT_FUNC
PyInit__record_starts(void)
{
    return PyModule_Create(&module);
}
