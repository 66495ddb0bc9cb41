/* What model/_packed.c offers other extensions (capture/_native.c), in its `_C_API` capsule. */
#ifndef JAXPLACE_PACKED_API_H
#define JAXPLACE_PACKED_API_H

#include <stdarg.h>

#define JAXPLACE_PACKED_API_VERSION 2

typedef struct {
    int version;             /* JAXPLACE_PACKED_API_VERSION: a capsule of another build is not used */
    PyTypeObject *sink_type; /* the Sink type: a table that packs the rows appended to it */
    int (*sink_add)(PyObject *sink, PyObject *row); /* sink.append(row), stealing row: 0 or -1 */
    /* The row Py_BuildValue(fmt, ...) would make, packed without making it: fmt is "(...)" of
       'L' (a long long), 'K' (an unsigned long long) and 'O' (an object, borrowed) only. 0; 1
       when the caller must append the tuple itself (a row is being packed, or a value no raw
       row holds); -1 on error. */
    int (*sink_vrow)(PyObject *sink, const char *fmt, va_list ap);
} JaxplacePackedAPI;

#endif
