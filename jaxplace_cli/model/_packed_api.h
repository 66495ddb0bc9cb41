/* What model/_packed.c offers other extensions (capture/_native.c), in its `_C_API` capsule. */
#ifndef JAXPLACE_PACKED_API_H
#define JAXPLACE_PACKED_API_H

#define JAXPLACE_PACKED_API_VERSION 1

typedef struct {
    int version;             /* JAXPLACE_PACKED_API_VERSION: a capsule of another build is not used */
    PyTypeObject *sink_type; /* the Sink type: a table that packs the rows appended to it */
    int (*sink_add)(PyObject *sink, PyObject *row); /* sink.append(row), stealing row: 0 or -1 */
} JaxplacePackedAPI;

#endif
