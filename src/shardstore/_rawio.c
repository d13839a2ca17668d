/* Native reads of uncompressed chunk files into a strided result, many chunks per call, and
 * the mirror image: writes of chunk files from a strided source (write_boxes, further down).
 *
 * Why by hand: reading a chunk from a local file is a handful of system calls (open, fstat,
 * pread, close) and a strided copy. From Python each of them drops and retakes the GIL, and
 * with two threads every retake is a hand-off between cores that costs more than the call,
 * so a second thread made such reads slower, not faster.
 * No library reads many small files into strided NumPy destinations without the GIL, so this
 * module does exactly that, for one call's whole batch of chunks, with the GIL released once.
 *
 * A chunk file here is ``header`` (compared byte for byte) followed by the chunk's elements
 * uncompressed, in C order, of ``itemsize`` bytes each (byte-swapped when ``swap``). Only the
 * bytes between the first and the last element a job needs are read. Anything else (a file of
 * another size, another header, an I/O error) is reported back, not raised: the caller's
 * Python path then reads that chunk and words any error. Nothing of ``out`` is written for a
 * chunk that is not reported OK.
 *
 * With ``inflate``, the payload after the header is instead one gzip or zlib stream (N5 gzip
 * blocks), inflated by libdeflate into a buffer of the chunk's size and copied out from there.
 * libdeflate comes from the process (the copy imagecodecs ships, found by Python: see
 * ``set_libdeflate``), so building this module needs no libdeflate headers; its API is a few
 * plain C functions, declared below. Only streams that fill the chunk exactly and end at the
 * file's end are taken, and their CRC is checked; anything else is reported as not read.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#include <pthread.h>
#include <signal.h>

#if defined(__SSE2__)
#include <emmintrin.h> /* streaming stores (copy_run) */
#endif

#define MAXDIM 32
#define NOTHING_TO_READ INT_MIN /* open_ahead of a job with an empty box */
#define AHEAD 4 /* files opened (and their reads started) ahead of the one being copied */

enum { ST_OK = 0, ST_MISSING = 1, ST_FALLBACK = 2 };

/* the decoders (zstd, blosc, libdeflate: its _ex forms also report the input bytes consumed,
 * so a stream followed by more data is told apart), loaded by Python at run time */
#include "_rawio_decode.h"

typedef struct {
    PyObject *path; /* bytes (file system encoding), owned; NULL for a span of one file */
    Py_ssize_t offset, length; /* read_spans: the chunk's stored bytes in that file */
    Py_ssize_t start[MAXDIM], step[MAXDIM], count[MAXDIM], out_start[MAXDIM];
    /* the caller's buffer of the whole chunk to decode into and copy the box from (it keeps
     * the chunk: a chunk cache entry), held while the call runs; ``keep.buf`` NULL: none */
    Py_buffer keep;
} job_t;

static int read_full(int fd, char *buf, size_t n, off_t offset) {
    while (n > 0) {
        ssize_t got = pread(fd, buf, n, offset);
        if (got < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (got == 0) return -1; /* the file shrank meanwhile */
        buf += got;
        n -= (size_t)got;
        offset += got;
    }
    return 0;
}

static void copy_item(char *dst, const char *src, Py_ssize_t itemsize, int swap) {
    if (!swap) {
        memcpy(dst, src, (size_t)itemsize);
        return;
    }
    for (Py_ssize_t k = 0; k < itemsize; k++) dst[k] = src[itemsize - 1 - k];
}

typedef struct {
    int ndim;
    Py_ssize_t chunk_shape[MAXDIM];
    Py_ssize_t chunk_strides[MAXDIM]; /* in elements, C order */
    Py_ssize_t out_stride[MAXDIM];    /* bytes per step of each chunk dimension in out (0: dropped) */
    Py_ssize_t itemsize;
    int swap;
    const char *header;
    Py_ssize_t header_len;
    Py_ssize_t file_size; /* raw: every full chunk file's size; inflate: the largest taken */
    Py_ssize_t chunk_nbytes;
    int inflate;
    int stream; /* runs of 64 bytes and more bypass the CPU caches (copy_run) */
    char *out;
} plan_t;

/* What one call of read_boxes owns for inflating: the decompressor and the file buffer. */
typedef struct {
    void *d;
    char *in;
    size_t cap;
} inflater_t;

/* The element range [first, last) of the chunk a job reads; false when it reads nothing. */
static int job_span(const plan_t *pl, const job_t *job, Py_ssize_t *first, Py_ssize_t *last) {
    *first = *last = 0;
    for (int d = 0; d < pl->ndim; d++) {
        if (job->count[d] == 0) return 0;
        *first += job->start[d] * pl->chunk_strides[d];
        *last += (job->start[d] + (job->count[d] - 1) * job->step[d]) * pl->chunk_strides[d];
    }
    *last += 1;
    return 1;
}

/* Open a job's file and ask the kernel to start reading its bytes (-errno when it cannot be
 * opened): the next few jobs' reads then overlap on a cold disk instead of queueing one by one. */
static int open_ahead(const plan_t *pl, const job_t *job) {
    Py_ssize_t first, last;
    if (!job_span(pl, job, &first, &last)) return NOTHING_TO_READ;
    int fd = open(PyBytes_AS_STRING(job->path), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -errno;
#ifdef POSIX_FADV_WILLNEED
    if (pl->inflate || job->keep.buf) {
        posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED); /* the whole stream, or the whole chunk kept */
    } else {
        /* posix_fadvise takes (offset, length): the bytes run_job reads, header included
         * when the box starts at the first element (then it is one read from 0) */
        off_t start = first == 0 ? 0 : (off_t)(pl->header_len + first * pl->itemsize);
        off_t end = (off_t)(pl->header_len + last * pl->itemsize);
        posix_fadvise(fd, start, end - start, POSIX_FADV_WILLNEED);
    }
#endif
    return fd;
}

/* Read a whole compressed chunk file and inflate its payload into ``scratch`` (the chunk's
 * elements): ST_OK only for a stream that decodes to exactly the chunk's bytes, CRC checked,
 * and ends where the file does (several members, padding, damage: the Python path). */
static int inflate_file(const plan_t *pl, inflater_t *inf, int fd, Py_ssize_t size, char *scratch) {
    if (size <= pl->header_len || size > pl->file_size) return ST_FALLBACK;
    if ((size_t)size > inf->cap) {
        char *grown = PyMem_RawRealloc(inf->in, (size_t)size);
        if (!grown) return ST_FALLBACK;
        inf->in = grown;
        inf->cap = (size_t)size;
    }
    if (read_full(fd, inf->in, (size_t)size, 0) != 0 || memcmp(inf->in, pl->header, (size_t)pl->header_len) != 0)
        return ST_FALLBACK;
    const unsigned char *z = (const unsigned char *)inf->in + pl->header_len;
    size_t zlen = (size_t)(size - pl->header_len), used = 0, got = 0;
    size_t nbytes = (size_t)pl->chunk_nbytes;
    ld_decompress_ex_t fn = (zlen >= 2 && z[0] == 0x1f && z[1] == 0x8b) ? ld_gzip : ld_zlib;
    if (fn(inf->d, z, zlen, scratch, nbytes, &used, &got) != 0 || got != nbytes || used != zlen) return ST_FALLBACK;
    return ST_OK;
}

/* memcpy, or with ``stream`` the 64-byte lines of the run that ``dst`` covers whole written
 * with streaming (non-temporal) stores: a result larger than a good part of the CPU's last
 * cache only evicts other data on its way to memory, and each line stored normally is first
 * read from memory. Measured (16 MiB of 64^3 uint8 chunks into a 256^3 result, one thread):
 * 0.9 ms streamed against 2.3 ms by memcpy; at 4 MiB memcpy is faster (0.16 / 0.22 ms). */
static void copy_run(char *dst, const char *src, size_t n, int stream) {
#if defined(__SSE2__)
    if (stream && n >= 64) {
        size_t head = (size_t)(-(uintptr_t)dst & 63);
        memcpy(dst, src, head);
        dst += head, src += head, n -= head;
        for (; n >= 64; n -= 64, dst += 64, src += 64) {
            __m128i a = _mm_loadu_si128((const __m128i *)src), b = _mm_loadu_si128((const __m128i *)(src + 16));
            __m128i c = _mm_loadu_si128((const __m128i *)(src + 32)), d = _mm_loadu_si128((const __m128i *)(src + 48));
            _mm_stream_si128((__m128i *)dst, a);
            _mm_stream_si128((__m128i *)(dst + 16), b);
            _mm_stream_si128((__m128i *)(dst + 32), c);
            _mm_stream_si128((__m128i *)(dst + 48), d);
        }
    }
#else
    (void)stream;
#endif
    memcpy(dst, src, n);
}

/* Streamed lines are weakly ordered: made visible before a call that streamed returns. */
static void stream_fence(int stream) {
#if defined(__SSE2__)
    if (stream) _mm_sfence();
#else
    (void)stream;
#endif
}

/* Copy a job's box out of ``payload`` (the chunk's elements from element ``first`` on) into
 * ``out``: an odometer over every dimension but the last, then the innermost run. */
static void scatter_box(const plan_t *pl, const job_t *job, const char *payload, Py_ssize_t first) {
    int nd = pl->ndim;
    /* copy: an odometer over the outer dimensions, then one run of the inner ones */
    Py_ssize_t idx[MAXDIM] = {0};
    Py_ssize_t isz = pl->itemsize, inner = nd - 1;
    Py_ssize_t n_inner = job->count[inner];
    Py_ssize_t src_step = job->step[inner] * isz, dst_step = pl->out_stride[inner];
    int contiguous = !pl->swap && job->step[inner] == 1 && dst_step == isz;
    if (contiguous) {
        /* dimensions the box spans whole, laid out alike in the chunk and in out, join the
         * run (a whole chunk into an output of its layout: one memcpy instead of a row each) */
        while (inner > 0) {
            Py_ssize_t d = inner - 1;
            if (job->count[d] != 1 && (job->step[d] != 1 || job->count[inner] != pl->chunk_shape[inner] ||
                                       job->step[inner] != 1 || pl->chunk_strides[d] != n_inner ||
                                       pl->out_stride[d] != n_inner * isz))
                break;
            n_inner *= job->count[d];
            inner = d;
        }
    }
    /* the first row's addresses, and the bytes one step of each dimension moves them (the
     * odometer below moves the two pointers instead of recomputing them from every index per
     * row: rows of 64-element chunks are short, and that arithmetic cost as much as the copy) */
    Py_ssize_t src_off = -first * isz, dst_off = 0, src_by[MAXDIM], dst_by[MAXDIM];
    for (int d = 0; d < nd; d++) {
        src_off += job->start[d] * pl->chunk_strides[d] * isz;
        dst_off += job->out_start[d] * pl->out_stride[d];
        src_by[d] = job->step[d] * pl->chunk_strides[d] * isz;
        dst_by[d] = pl->out_stride[d];
    }
    const char *src = payload + src_off; /* (offsets summed first: no pointer leaves the buffers) */
    char *dst = pl->out + dst_off;
    for (;;) {
        if (contiguous) {
            copy_run(dst, src, (size_t)(n_inner * isz), pl->stream);
        } else {
            for (Py_ssize_t i = 0; i < n_inner; i++) copy_item(dst + i * dst_step, src + i * src_step, isz, pl->swap);
        }
        int d = inner - 1;
        for (; d >= 0; d--) {
            if (++idx[d] < job->count[d]) {
                src += src_by[d];
                dst += dst_by[d];
                break;
            }
            idx[d] = 0; /* back to this dimension's first row; the next one up moves on */
            src -= (job->count[d] - 1) * src_by[d];
            dst -= (job->count[d] - 1) * dst_by[d];
        }
        if (d < 0) break;
    }
}


/* A kept chunk from stored to native byte order, in place. */
static void swap_items(char *p, Py_ssize_t nbytes, Py_ssize_t isz) {
    for (char *e = p + nbytes; p < e; p += isz)
        for (Py_ssize_t a = 0, b = isz - 1; a < b; a++, b--) {
            char t = p[a];
            p[a] = p[b];
            p[b] = t;
        }
}

/* Copy a job's box out of its kept whole chunk, which is first put in native byte order. */
static void scatter_kept(const plan_t *pl, const job_t *job, char *keep) {
    if (!pl->swap) {
        scatter_box(pl, job, keep, 0);
        return;
    }
    swap_items(keep, pl->chunk_nbytes, pl->itemsize);
    plan_t native = *pl;
    native.swap = 0;
    scatter_box(&native, job, keep, 0);
}

static int run_job(const plan_t *pl, inflater_t *inf, const job_t *job, int fd, char *scratch, char *hbuf) {
    Py_ssize_t first, last;
    char *keep = job->keep.buf;
    if (fd == NOTHING_TO_READ || !job_span(pl, job, &first, &last)) return ST_OK; /* nothing to copy */
    if (fd < 0) return (fd == -ENOENT || fd == -ENOTDIR) ? ST_MISSING : ST_FALLBACK;
    int status = ST_OK;
    const char *payload = scratch; /* element ``first`` */
    if (keep) {
        scratch = keep; /* the whole chunk, read or inflated into the caller's buffer */
        payload = keep;
        first = 0;
        last = pl->chunk_nbytes / pl->itemsize;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        status = ST_FALLBACK;
    } else if (!S_ISREG(st.st_mode)) {
        status = ST_MISSING; /* as the Python reader: a directory is no chunk */
    } else if (pl->inflate) {
        status = inflate_file(pl, inf, fd, (Py_ssize_t)st.st_size, scratch);
        first = 0; /* the payload is the whole chunk */
    } else if (st.st_size != pl->file_size) {
        status = ST_FALLBACK; /* an edge block, a varlength block, a damaged file */
    } else if (keep) {
        if ((pl->header_len > 0 && (read_full(fd, hbuf, (size_t)pl->header_len, 0) != 0 ||
                                    memcmp(hbuf, pl->header, (size_t)pl->header_len) != 0)) ||
            read_full(fd, keep, (size_t)pl->chunk_nbytes, (off_t)pl->header_len) != 0)
            status = ST_FALLBACK;
    } else if (first == 0) {
        /* the box starts at the first element: header and payload in one read */
        if (read_full(fd, scratch, (size_t)(pl->header_len + last * pl->itemsize), 0) != 0 ||
            memcmp(scratch, pl->header, (size_t)pl->header_len) != 0)
            status = ST_FALLBACK;
        payload = scratch + pl->header_len;
    } else if (pl->header_len > 0 && (read_full(fd, hbuf, (size_t)pl->header_len, 0) != 0 ||
                                      memcmp(hbuf, pl->header, (size_t)pl->header_len) != 0)) {
        status = ST_FALLBACK;
    } else if (read_full(fd, scratch, (size_t)((last - first) * pl->itemsize),
                         (off_t)(pl->header_len + first * pl->itemsize)) != 0) {
        status = ST_FALLBACK;
    }
    close(fd);
    if (status != ST_OK) return status;
    if (keep)
        scatter_kept(pl, job, keep);
    else
        scatter_box(pl, job, payload, first);
    return ST_OK;
}

static int as_ssize(PyObject *seq, Py_ssize_t i, Py_ssize_t *v) {
    PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
    *v = PyLong_AsSsize_t(item);
    return (*v == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* The chunk and output geometry shared by every job of a call (read_boxes, read_spans):
 * 0, or -1 with an exception set. ``out_dim``: the dimension of out each chunk dimension fills. */
static int plan_out(plan_t *pl, const Py_buffer *view, PyObject *shape, PyObject *dims, Py_ssize_t itemsize, int swap,
                    Py_ssize_t *out_dim) {
    int nd = (int)PySequence_Fast_GET_SIZE(shape);
    if (nd < 1 || nd > MAXDIM || PySequence_Fast_GET_SIZE(dims) != nd) {
        PyErr_SetString(PyExc_ValueError, "chunk_shape and out_dims must have the same length, 1 to 32");
        return -1;
    }
    if (itemsize < 1 || itemsize != view->itemsize) {
        PyErr_SetString(PyExc_ValueError, "itemsize must match the item size of out");
        return -1;
    }
    memset(pl, 0, sizeof(*pl));
    pl->ndim = nd;
    pl->itemsize = itemsize;
    pl->swap = swap && itemsize > 1;
    pl->out = view->buf;
    Py_ssize_t elements = 1;
    int used[MAXDIM] = {0};
    for (int d = 0; d < nd; d++) {
        Py_ssize_t od;
        if (as_ssize(shape, d, &pl->chunk_shape[d]) || as_ssize(dims, d, &od)) return -1;
        out_dim[d] = od;
        if (pl->chunk_shape[d] < 1 || od < -1 || od >= view->ndim || (od >= 0 && used[od]++)) {
            PyErr_SetString(PyExc_ValueError, "bad chunk_shape or out_dims");
            return -1;
        }
        /* (room for a header and a compressor's expansion on top of the chunk, too) */
        if (elements > PY_SSIZE_T_MAX / 4 / pl->chunk_shape[d] / itemsize) {
            PyErr_SetString(PyExc_OverflowError, "chunk too large");
            return -1;
        }
        elements *= pl->chunk_shape[d];
        pl->out_stride[d] = od >= 0 ? view->strides[od] : 0;
    }
    Py_ssize_t s = 1;
    for (int d = nd - 1; d >= 0; d--) {
        pl->chunk_strides[d] = s;
        s *= pl->chunk_shape[d];
    }
    pl->chunk_nbytes = elements * itemsize;
    return 0;
}

/* What every kernel call starts from: ``out``'s view, the sequences of the chunk shape, out_dims
 * and jobs, and the plan they make (``begin_call``: 0, or -1 with an exception set; whatever
 * it took is released by ``end_call``, which is safe on a zeroed ``call_t``). */
typedef struct {
    Py_buffer view;
    int have_view;
    PyObject *shape, *dims, *jobs;
    Py_ssize_t out_dim[MAXDIM];
} call_t;

static int begin_call(call_t *c, plan_t *pl, PyObject *out_obj, PyObject *shape_obj, PyObject *dims_obj,
                      PyObject *jobs_obj, Py_ssize_t itemsize, int swap) {
    if (PyObject_GetBuffer(out_obj, &c->view, PyBUF_RECORDS) != 0) return -1;
    c->have_view = 1;
    if (!(c->shape = PySequence_Fast(shape_obj, "chunk_shape must be a sequence"))) return -1;
    if (!(c->dims = PySequence_Fast(dims_obj, "out_dims must be a sequence"))) return -1;
    if (!(c->jobs = PySequence_Fast(jobs_obj, "jobs must be a sequence"))) return -1;
    return plan_out(pl, &c->view, c->shape, c->dims, itemsize, swap, c->out_dim);
}

static void end_call(call_t *c) {
    Py_XDECREF(c->shape);
    Py_XDECREF(c->dims);
    Py_XDECREF(c->jobs);
    if (c->have_view) PyBuffer_Release(&c->view);
}

/* One chunk dimension's ``(start, step, count, out_start)`` from ``seq`` (a fast sequence)
 * at ``at``: 0, or -1 with an exception set. */
static int box_piece(PyObject *seq, Py_ssize_t at, job_t *j, int d) {
    return (as_ssize(seq, at, &j->start[d]) || as_ssize(seq, at + 1, &j->step[d]) ||
            as_ssize(seq, at + 2, &j->count[d]) || as_ssize(seq, at + 3, &j->out_start[d])) ? -1 : 0;
}

/* A job's box, ``(start, step, count, out_start)`` per chunk dimension: one such 4-sequence
 * per dimension (what the indexer makes once per dimension), or all of them flattened: 0, or
 * -1 with an exception set (also when the box reaches outside the chunk or out). */
static int parse_box(const plan_t *pl, const Py_buffer *view, const Py_ssize_t *out_dim, PyObject *box, job_t *j) {
    int nd = pl->ndim;
    PyObject *b = PySequence_Fast(box, "a job's box must be a sequence");
    if (!b) return -1;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(b);
    int nested = len == nd;
    int bad = !nested && len != 4 * nd;
    for (int d = 0; d < nd && !bad; d++) {
        int failed;
        if (nested) {
            PyObject *piece = PySequence_Fast(PySequence_Fast_GET_ITEM(b, d), "a box's piece must be a sequence");
            failed = !piece;
            if (piece) {
                if (PySequence_Fast_GET_SIZE(piece) == 4) {
                    failed = box_piece(piece, 0, j, d);
                } else {
                    PyErr_SetString(PyExc_ValueError, "a box's piece must be (start, step, count, out_start)");
                    failed = 1;
                }
                Py_DECREF(piece);
            }
        } else {
            failed = box_piece(b, 4 * d, j, d);
        }
        if (failed) {
            Py_DECREF(b);
            return -1;
        }
        Py_ssize_t od = out_dim[d], n = j->count[d];
        /* every element read must lie in the chunk, every element written in out */
        bad = j->start[d] < 0 || j->step[d] < 1 || n < 0 ||
              (n > 0 && (j->start[d] + (n - 1) * j->step[d] >= pl->chunk_shape[d])) ||
              (od < 0 ? (n > 1 || j->out_start[d] != 0)
                      : (j->out_start[d] < 0 || j->out_start[d] + n > view->shape[od]));
    }
    Py_DECREF(b);
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "a job's box lies outside the chunk or out");
        return -1;
    }
    return 0;
}

/* ``b``: a contiguous buffer of a whole chunk (``flags``: PyBUF_WRITABLE for one to fill): 0, or
 * -1 with an exception set and nothing held. */
static int chunk_buffer(const plan_t *pl, PyObject *obj, int flags, Py_buffer *b) {
    if (PyObject_GetBuffer(obj, b, flags | PyBUF_ANY_CONTIGUOUS) != 0) return -1;
    if (b->len != pl->chunk_nbytes) {
        PyBuffer_Release(b);
        b->buf = NULL;
        PyErr_SetString(PyExc_ValueError, "a chunk's buffer is not of the chunk's size");
        return -1;
    }
    return 0;
}

/* A job's optional buffer to keep the whole chunk in (``keep``: None or a writable contiguous
 * buffer of the chunk's size; it ends up in native byte order): 0, or -1 with an exception set. */
static int parse_keep(const plan_t *pl, PyObject *keep, job_t *j) {
    return (!keep || keep == Py_None) ? 0 : chunk_buffer(pl, keep, PyBUF_WRITABLE, &j->keep);
}

PyDoc_STRVAR(read_boxes_doc,
"read_boxes(out, chunk_shape, out_dims, header, itemsize, swap, jobs, inflate=False, work=None, stream=False) -> bytes\n\n"
"Read boxes of uncompressed chunk files into ``out`` with the GIL released.\n\n"
"``chunk_shape``: the full chunk shape (C order of the stored elements). ``out_dims``: for each\n"
"chunk dimension, the dimension of ``out`` it fills, or -1 (an integer index: count 1).\n"
"``header``: the bytes every full chunk file starts with; the payload follows. ``jobs``: a\n"
"list of ``(path, box)`` with ``box`` = (start, step, count, out_start) for each chunk\n"
"dimension (one 4-sequence per dimension, or all flattened). Returns one status byte per job: 0 done, 1 no such file, 2 not read\n"
"(another size or header, an I/O error): read that chunk another way. ``inflate``: the payload\n"
"is a gzip or zlib stream (needs ``set_libdeflate``). ``work``: a writable buffer of at least the\n"
"header and chunk's size to read files into (the caller's reused one: no allocation per call).\n"
"``stream``: copy into ``out`` with streaming stores (see ``place_boxes``). A job may name a third\n"
"item, ``keep``: None, or a writable contiguous buffer of the chunk's size that the whole chunk\n"
"is read or inflated into, in native byte order, and its box copied from (filled when the\n"
"job's status is 0).");

static PyObject *read_boxes(PyObject *self, PyObject *args) {
    PyObject *out_obj, *shape_obj, *dims_obj, *jobs_obj;
    Py_buffer header;
    Py_ssize_t itemsize;
    int swap, inflate = 0, stream = 0;
    Py_buffer work = {0};
    if (!PyArg_ParseTuple(args, "OOOy*npO|pw*p", &out_obj, &shape_obj, &dims_obj, &header, &itemsize, &swap, &jobs_obj,
                          &inflate, &work, &stream))
        return NULL;
    if (inflate && !ld_gzip) {
        PyBuffer_Release(&header);
        if (work.buf) PyBuffer_Release(&work);
        PyErr_SetString(PyExc_RuntimeError, "inflate needs set_libdeflate first");
        return NULL;
    }
    inflater_t inf = {NULL, NULL, 0};
    plan_t pl;
    job_t *jobs = NULL;
    Py_ssize_t njobs = 0, parsed = 0;
    char *scratch = NULL, *hbuf = NULL, *own = NULL; /* own: the scratch this call allocated */
    PyObject *result = NULL;
    call_t c = {.have_view = 0};

    if (begin_call(&c, &pl, out_obj, shape_obj, dims_obj, jobs_obj, itemsize, swap) != 0) goto done;
    pl.header = header.buf;
    pl.header_len = header.len;
    pl.inflate = inflate;
    pl.stream = stream;
    /* raw: the exact size; inflate: a bound past any sane stream for the chunk (deflate's
     * stored blocks add 5 bytes per 64 KiB), so a huge file is never read into memory here */
    pl.file_size = header.len + pl.chunk_nbytes + (inflate ? pl.chunk_nbytes / 8 + 4096 : 0);

    njobs = PySequence_Fast_GET_SIZE(c.jobs);
    jobs = PyMem_Calloc(njobs ? (size_t)njobs : 1, sizeof(job_t));
    if (!jobs) {
        PyErr_NoMemory();
        goto done;
    }
    for (; parsed < njobs; parsed++) {
        PyObject *job = PySequence_Fast_GET_ITEM(c.jobs, parsed), *box = NULL, *path = NULL, *keep = NULL;
        job_t *j = &jobs[parsed];
        if (!PyArg_ParseTuple(job, "O&O|O;a job is (path, box) or (path, box, keep)", PyUnicode_FSConverter, &path, &box,
                              &keep))
            goto done;
        j->path = path;
        if (parse_box(&pl, &c.view, c.out_dim, box, j) != 0 || parse_keep(&pl, keep, j) != 0) goto done;
    }
    if (!(result = PyBytes_FromStringAndSize(NULL, njobs))) goto done;
    char *status = PyBytes_AS_STRING(result);
    if (work.buf && work.len >= header.len + pl.chunk_nbytes)
        scratch = work.buf;
    else
        scratch = own = PyMem_RawMalloc((size_t)(header.len + pl.chunk_nbytes));
    hbuf = PyMem_RawMalloc(header.len ? (size_t)header.len : 1);
    if (inflate) inf.d = ld_alloc();
    if (!scratch || !hbuf || (inflate && !inf.d)) {
        Py_CLEAR(result);
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    int fds[AHEAD];
    for (Py_ssize_t i = 0; i < njobs && i < AHEAD; i++) fds[i] = open_ahead(&pl, &jobs[i]);
    for (Py_ssize_t i = 0; i < njobs; i++) {
        status[i] = (char)run_job(&pl, &inf, &jobs[i], fds[i % AHEAD], scratch, hbuf);
        if (i + AHEAD < njobs) fds[i % AHEAD] = open_ahead(&pl, &jobs[i + AHEAD]);
    }
    stream_fence(stream);
    Py_END_ALLOW_THREADS

done:
    if (jobs) {
        for (Py_ssize_t i = 0; i < njobs; i++) {
            Py_XDECREF(jobs[i].path);
            if (jobs[i].keep.buf) PyBuffer_Release(&jobs[i].keep);
        }
        PyMem_Free(jobs);
    }
    PyMem_RawFree(own);
    PyMem_RawFree(hbuf);
    PyMem_RawFree(inf.in);
    if (work.buf) PyBuffer_Release(&work);
    if (inf.d) ld_free(inf.d);
    end_call(&c);
    PyBuffer_Release(&header);
    return result;
}

/* -- copies from memory ---------------------------------------------------------------------
 *
 * The boxes of decoded chunks (the chunk cache's, or one just decoded) placed into a result in
 * one call with the GIL released: with streaming stores (copy_run) into a large result, which
 * NumPy's copies do not use, and shared with a helper thread of this module's.
 *
 * Why a thread of its own: a 100^3 read of 64^3 chunks the cache holds is ~20,000 rows of a
 * few dozen bytes, mostly cache misses in the chunks, and one core copies them at ~2 GB/s
 * (0.44 ms a read). Two threads copy them in about half the time (0.23 ms measured), but
 * handing half to a Python pool thread costs its wake-up, the GIL passed back and forth and a
 * future waited on, which took more than the half saved. The helper takes boxes from the same
 * counter as the caller, without the GIL: when it wakes late, the caller has taken more.
 */

typedef struct {
    const plan_t *pl;
    const job_t *jobs;
    const Py_buffer *chunks;
    Py_ssize_t njobs, next; /* ``next``: the next job to take (atomic) */
    int stream;
} place_share_t;

static void place_taken(place_share_t *s) {
    for (;;) {
        Py_ssize_t i = __atomic_fetch_add(&s->next, 1, __ATOMIC_RELAXED);
        if (i >= s->njobs) break;
        scatter_box(s->pl, &s->jobs[i], s->chunks[i].buf, 0);
    }
    stream_fence(s->stream); /* (each thread's own streamed lines, before the caller returns) */
}

/* One helper thread per process, started on first use and kept: creating a thread per call
 * cost ~27 us in the caller and ~80 us before it ran (2-core VM), most of what it saved on a
 * 100^3 read. The caller posts its share, copies, and then either takes the post back (the
 * helper has not woken: nothing to wait for) or waits for the helper's last box, spinning
 * first (a box of a cached chunk takes tens of microseconds). One call at a time gets the
 * helper; another call meanwhile copies alone. A forked child starts a helper of its own. */
#define HELPER_SPINS 5000 /* pauses (~90 us on this VM) before the caller sleeps on helper_done */
static pthread_mutex_t helper_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t helper_start_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t helper_wake = PTHREAD_COND_INITIALIZER;
static pthread_cond_t helper_done = PTHREAD_COND_INITIALIZER;
static place_share_t *helper_post; /* posted, not yet taken by the helper (under the lock) */
static int helper_busy;            /* a caller owns the helper (under the lock) */
static int helper_running;         /* the helper took the post and copies (atomic) */
static int helper_started;         /* the helper thread exists in this process (atomic) */

static void *helper_main(void *arg) {
    (void)arg;
#if defined(__linux__)
    pthread_setname_np(pthread_self(), "shardstore-copy"); /* (as the Python pools name theirs) */
#endif
    pthread_mutex_lock(&helper_lock);
    for (;;) {
        while (!helper_post) pthread_cond_wait(&helper_wake, &helper_lock);
        place_share_t *s = helper_post;
        helper_post = NULL;
        __atomic_store_n(&helper_running, 1, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&helper_lock);
        place_taken(s);
        pthread_mutex_lock(&helper_lock);
        __atomic_store_n(&helper_running, 0, __ATOMIC_RELEASE);
        pthread_cond_signal(&helper_done);
    }
    return NULL;
}

/* In a forked child (pthread_atfork): the parent's helper thread is not there, and its locks
 * may have been copied held. */
static void helper_after_fork(void) {
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER, start_lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t wake = PTHREAD_COND_INITIALIZER, done = PTHREAD_COND_INITIALIZER;
    helper_lock = lock;
    helper_start_lock = start_lock;
    helper_wake = wake;
    helper_done = done;
    helper_post = NULL;
    helper_busy = helper_running = helper_started = 0;
}

/* Post ``s`` to the helper (started if need be): 1 if posted, 0 if it is busy or cannot start. */
static int helper_begin(place_share_t *s) {
    if (!__atomic_load_n(&helper_started, __ATOMIC_ACQUIRE)) {
        pthread_mutex_lock(&helper_start_lock);
        if (!helper_started) {
            pthread_t tid;
            pthread_attr_t attr;
            sigset_t all, before; /* (the helper takes no signals: they stay with Python's threads) */
            sigfillset(&all);
            if (pthread_attr_init(&attr) == 0) {
                int masked = pthread_sigmask(SIG_SETMASK, &all, &before) == 0;
                if (pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED) == 0 &&
                    pthread_create(&tid, &attr, helper_main, NULL) == 0)
                    __atomic_store_n(&helper_started, 1, __ATOMIC_RELEASE);
                if (masked) pthread_sigmask(SIG_SETMASK, &before, NULL);
                pthread_attr_destroy(&attr);
            }
        }
        pthread_mutex_unlock(&helper_start_lock);
        if (!helper_started) return 0;
    }
    pthread_mutex_lock(&helper_lock);
    int posted = !helper_busy;
    if (posted) {
        helper_busy = 1;
        helper_post = s;
        pthread_cond_signal(&helper_wake);
    }
    pthread_mutex_unlock(&helper_lock);
    return posted;
}

/* The caller is done taking boxes: take the post back if the helper has not woken, else wait
 * for its last box. */
static void helper_end(place_share_t *s) {
    pthread_mutex_lock(&helper_lock);
    int taken = helper_post != s;
    helper_post = NULL;
    pthread_mutex_unlock(&helper_lock);
    for (int spins = 0; taken && spins < HELPER_SPINS && __atomic_load_n(&helper_running, __ATOMIC_ACQUIRE); spins++) {
#if defined(__SSE2__)
        _mm_pause();
#endif
    }
    pthread_mutex_lock(&helper_lock);
    while (taken && __atomic_load_n(&helper_running, __ATOMIC_ACQUIRE))
        pthread_cond_wait(&helper_done, &helper_lock); /* (a large box) */
    helper_busy = 0;
    pthread_mutex_unlock(&helper_lock);
}

PyDoc_STRVAR(place_boxes_doc,
"place_boxes(out, chunk_shape, out_dims, itemsize, jobs, stream, helper=False) -> None\n\n"
"Copy boxes of chunks held in memory into ``out`` with the GIL released. ``jobs``: a list of\n"
"``(chunk, box)``: ``chunk`` a contiguous buffer of the whole chunk (``chunk_shape``, C order),\n"
"``box`` as for ``read_boxes``; the boxes must not overlap in ``out``. ``stream``: write the\n"
"runs with streaming stores (a result much larger than the CPU's caches). ``helper``: the\n"
"process's copy helper thread takes boxes too, when no other call has it (started on first use).");

static PyObject *place_boxes(PyObject *self, PyObject *args) {
    PyObject *out_obj, *shape_obj, *dims_obj, *jobs_obj;
    Py_ssize_t itemsize;
    int stream, helper = 0;
    if (!PyArg_ParseTuple(args, "OOOnOp|p", &out_obj, &shape_obj, &dims_obj, &itemsize, &jobs_obj, &stream, &helper))
        return NULL;
    plan_t pl;
    job_t *jobs = NULL;
    Py_buffer *chunks = NULL;
    Py_ssize_t njobs = 0, held = 0;
    PyObject *result = NULL;
    call_t c = {.have_view = 0};

    if (begin_call(&c, &pl, out_obj, shape_obj, dims_obj, jobs_obj, itemsize, 0) != 0) goto done;
    pl.stream = stream;
    njobs = PySequence_Fast_GET_SIZE(c.jobs);
    jobs = PyMem_Calloc(njobs ? (size_t)njobs : 1, sizeof(job_t));
    chunks = PyMem_Calloc(njobs ? (size_t)njobs : 1, sizeof(Py_buffer));
    if (!jobs || !chunks) {
        PyErr_NoMemory();
        goto done;
    }
    for (; held < njobs; held++) {
        PyObject *job = PySequence_Fast_GET_ITEM(c.jobs, held), *chunk, *box;
        if (!PyArg_ParseTuple(job, "OO;a job is (chunk, box)", &chunk, &box) ||
            chunk_buffer(&pl, chunk, PyBUF_SIMPLE, &chunks[held]) != 0)
            goto done;
        if (parse_box(&pl, &c.view, c.out_dim, box, &jobs[held]) != 0) {
            held++;
            goto done;
        }
    }
    Py_BEGIN_ALLOW_THREADS
    place_share_t share = {.pl = &pl, .jobs = jobs, .chunks = chunks, .njobs = njobs, .next = 0, .stream = stream};
    int posted = helper && njobs > 1 && helper_begin(&share);
    place_taken(&share);
    if (posted) helper_end(&share);
    Py_END_ALLOW_THREADS
    result = Py_None;
    Py_INCREF(result);

done:
    for (Py_ssize_t i = 0; i < held; i++) PyBuffer_Release(&chunks[i]);
    PyMem_Free(chunks);
    PyMem_Free(jobs);
    end_call(&c);
    return result;
}

/* -- writes ---------------------------------------------------------------------------------
 *
 * The mirror of read_boxes, hand-written for the same reason (see the comment at the top):
 * writing a raw block from Python is a strided copy plus open, write, close and rename, each
 * dropping and retaking the GIL, so threads writing blocks mostly hand the GIL around. Here a
 * whole batch of blocks is gathered, checked and written with the GIL released once.
 *
 * A job gathers the chunk-shaped box of ``src`` at an origin into one buffer (header, then
 * the elements in C order, byte-swapped when ``swap``) and writes it atomically: to a fresh
 * temp file beside the target, renamed over it, so a reader sees the old block or the new one
 * and a failed write leaves the old one in place. A payload of zero bytes only is not written
 * (ST_FILL: the caller deletes the key, as for any chunk equal to a zero fill value). Failures
 * are reported, not raised: a missing directory (ST_NODIR: the caller makes it and retries),
 * anything else (ST_WFALLBACK: the caller's Python path writes that block and words the error).
 */
enum { ST_WOK = 0, ST_WFALLBACK = 2, ST_FILL = 3, ST_NODIR = 4 };

typedef struct {
    PyObject *tmp, *path; /* bytes (file system encoding), owned */
    Py_ssize_t offset;    /* bytes from src's first element to the box's first element */
} wjob_t;

typedef struct {
    int ndim; /* after merging dimensions that are contiguous with the next one */
    Py_ssize_t shape[MAXDIM], stride[MAXDIM]; /* the box as runs of src: elements, bytes */
    Py_ssize_t itemsize;
    int swap;
    const char *src;
    Py_ssize_t header_len, payload_len;
} wplan_t;

#if defined(__GNUC__) || defined(__clang__)
#define BSWAP16 __builtin_bswap16
#define BSWAP32 __builtin_bswap32
#define BSWAP64 __builtin_bswap64
#else
static uint16_t BSWAP16(uint16_t v) { return (uint16_t)((v >> 8) | (v << 8)); }
static uint32_t BSWAP32(uint32_t v) { return ((uint32_t)BSWAP16((uint16_t)v) << 16) | BSWAP16((uint16_t)(v >> 16)); }
static uint64_t BSWAP64(uint64_t v) { return ((uint64_t)BSWAP32((uint32_t)v) << 32) | BSWAP32((uint32_t)(v >> 32)); }
#endif

/* n items ``stride`` bytes apart (any sign, or 0: a broadcast value) to contiguous ``dst``;
 * memcpy of a fixed size compiles to one load and store, without alignment assumptions. */
static void gather_run(char *dst, const char *src, Py_ssize_t n, Py_ssize_t stride, Py_ssize_t isz, int swap) {
    Py_ssize_t i;
    if (!swap || isz == 1) {
        if (stride == isz) {
            memcpy(dst, src, (size_t)(n * isz));
        } else if (isz == 1) {
            for (i = 0; i < n; i++) dst[i] = src[i * stride];
        } else {
            for (i = 0; i < n; i++) memcpy(dst + i * isz, src + i * stride, (size_t)isz);
        }
        return;
    }
    switch (isz) {
    case 2:
        for (i = 0; i < n; i++) {
            uint16_t v;
            memcpy(&v, src + i * stride, 2);
            v = BSWAP16(v);
            memcpy(dst + 2 * i, &v, 2);
        }
        break;
    case 4:
        for (i = 0; i < n; i++) {
            uint32_t v;
            memcpy(&v, src + i * stride, 4);
            v = BSWAP32(v);
            memcpy(dst + 4 * i, &v, 4);
        }
        break;
    case 8:
        for (i = 0; i < n; i++) {
            uint64_t v;
            memcpy(&v, src + i * stride, 8);
            v = BSWAP64(v);
            memcpy(dst + 8 * i, &v, 8);
        }
        break;
    default:
        for (i = 0; i < n; i++) copy_item(dst + i * isz, src + i * stride, isz, 1);
    }
}

/* The box at ``first`` into ``dst`` in C order: an odometer over every dimension but the last. */
static void gather(const wplan_t *pl, const char *first, char *dst) {
    Py_ssize_t idx[MAXDIM] = {0};
    int inner = pl->ndim - 1;
    Py_ssize_t run = pl->shape[inner] * pl->itemsize;
    const char *src = first;
    for (;;) {
        gather_run(dst, src, pl->shape[inner], pl->stride[inner], pl->itemsize, pl->swap);
        dst += run;
        int d = inner - 1;
        for (; d >= 0; d--) {
            src += pl->stride[d];
            if (++idx[d] < pl->shape[d]) break;
            src -= pl->stride[d] * pl->shape[d];
            idx[d] = 0;
        }
        if (d < 0) return;
    }
}

static int zero_bytes(const char *p, size_t n) {
    /* the first byte is zero and every byte equals the next one */
    return n == 0 || (p[0] == 0 && memcmp(p, p + 1, n - 1) == 0);
}

/* Whether the box at ``first`` holds zero bytes only, read where it lies in src: a block of
 * data answers at its first nonzero byte, and a block about to be written is gathered once,
 * after its temp file opened (a missing directory costs no copy). */
static int box_is_zero(const wplan_t *pl, const char *first) {
    Py_ssize_t idx[MAXDIM] = {0};
    int inner = pl->ndim - 1;
    Py_ssize_t n = pl->shape[inner], stride = pl->stride[inner], isz = pl->itemsize;
    const char *src = first;
    for (;;) {
        if (stride == isz || stride == 0) {
            if (!zero_bytes(src, (size_t)(stride ? n * isz : isz))) return 0;
        } else {
            for (Py_ssize_t i = 0; i < n; i++)
                if (!zero_bytes(src + i * stride, (size_t)isz)) return 0;
        }
        int d = inner - 1;
        for (; d >= 0; d--) {
            src += pl->stride[d];
            if (++idx[d] < pl->shape[d]) break;
            src -= pl->stride[d] * pl->shape[d];
            idx[d] = 0;
        }
        if (d < 0) return 1;
    }
}

static int write_full(int fd, const char *buf, size_t n) {
    while (n > 0) {
        ssize_t put = write(fd, buf, n);
        if (put < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (put == 0) return -1; /* (a regular file never takes nothing; do not spin) */
        buf += put;
        n -= (size_t)put;
    }
    return 0;
}

static int run_wjob(const wplan_t *pl, const wjob_t *job, char *buf) {
    const char *first = pl->src + job->offset;
    if (box_is_zero(pl, first)) return ST_FILL;
    const char *tmp = PyBytes_AS_STRING(job->tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) return errno == ENOENT ? ST_NODIR : ST_WFALLBACK;
    gather(pl, first, buf + pl->header_len);
    int ok = write_full(fd, buf, (size_t)(pl->header_len + pl->payload_len)) == 0;
    if (close(fd) != 0) ok = 0; /* (a deferred write error: the file may be incomplete) */
    if (ok && rename(tmp, PyBytes_AS_STRING(job->path)) == 0) return ST_WOK;
    unlink(tmp);
    return ST_WFALLBACK;
}

PyDoc_STRVAR(write_boxes_doc,
"write_boxes(src, chunk_shape, header, itemsize, swap, jobs) -> bytes\n\n"
"Write chunk-shaped boxes of ``src`` as uncompressed chunk files with the GIL released.\n\n"
"``src``: any array-like of native byte order, any strides. ``chunk_shape``: the box shape\n"
"(one entry per dimension of ``src``). Each file is ``header`` followed by the box's elements\n"
"in C order, of ``itemsize`` bytes each (byte-swapped when ``swap``). ``jobs``: a list of\n"
"``(temp_path, path, origin)``, ``origin`` the box's first element in ``src``; the file is\n"
"written to ``temp_path`` (created exclusively) and renamed to ``path``. Returns one status\n"
"byte per job: 0 written, 3 all zero bytes (nothing written), 4 no such directory for\n"
"``temp_path``, 2 not written (any other error): write that chunk another way.");

static PyObject *write_boxes(PyObject *self, PyObject *args) {
    PyObject *src_obj, *shape_obj, *jobs_obj;
    Py_buffer header, view;
    Py_ssize_t itemsize;
    int swap;
    if (!PyArg_ParseTuple(args, "OOy*npO", &src_obj, &shape_obj, &header, &itemsize, &swap, &jobs_obj)) return NULL;
    wplan_t pl;
    wjob_t *jobs = NULL;
    Py_ssize_t njobs = 0;
    char *buf = NULL;
    PyObject *shape = NULL, *jl = NULL, *result = NULL;
    int have_view = 0;
    Py_ssize_t chunk_shape[MAXDIM];

    /* read-only sources are fine (a broadcast scalar is one) */
    if (PyObject_GetBuffer(src_obj, &view, PyBUF_RECORDS_RO) != 0) goto done;
    have_view = 1;
    if (!(shape = PySequence_Fast(shape_obj, "chunk_shape must be a sequence"))) goto done;
    if (!(jl = PySequence_Fast(jobs_obj, "jobs must be a sequence"))) goto done;
    int nd = (int)PySequence_Fast_GET_SIZE(shape);
    if (nd < 1 || nd > MAXDIM || nd != view.ndim) {
        PyErr_SetString(PyExc_ValueError, "chunk_shape must have one entry per dimension of src, 1 to 32");
        goto done;
    }
    if (itemsize < 1 || itemsize != view.itemsize) {
        PyErr_SetString(PyExc_ValueError, "itemsize must match the item size of src");
        goto done;
    }
    Py_ssize_t elements = 1;
    for (int d = 0; d < nd; d++) {
        if (as_ssize(shape, d, &chunk_shape[d])) goto done;
        if (chunk_shape[d] < 1) {
            PyErr_SetString(PyExc_ValueError, "bad chunk_shape");
            goto done;
        }
        if (elements > (PY_SSIZE_T_MAX - header.len) / chunk_shape[d] / itemsize) {
            PyErr_SetString(PyExc_OverflowError, "chunk too large");
            goto done;
        }
        elements *= chunk_shape[d];
    }
    pl.itemsize = itemsize;
    pl.swap = swap && itemsize > 1;
    pl.src = view.buf;
    pl.header_len = header.len;
    pl.payload_len = elements * itemsize;
    /* a dimension whose run continues the next one's (a box spanning whole rows of a
     * contiguous source) merges with it: fewer, longer runs to copy */
    pl.ndim = 1;
    pl.shape[0] = chunk_shape[nd - 1];
    pl.stride[0] = view.strides[nd - 1];
    for (int d = nd - 2; d >= 0; d--) {
        if (view.strides[d] == pl.stride[0] * pl.shape[0]) {
            pl.shape[0] *= chunk_shape[d];
        } else {
            memmove(pl.shape + 1, pl.shape, (size_t)pl.ndim * sizeof(Py_ssize_t));
            memmove(pl.stride + 1, pl.stride, (size_t)pl.ndim * sizeof(Py_ssize_t));
            pl.shape[0] = chunk_shape[d];
            pl.stride[0] = view.strides[d];
            pl.ndim++;
        }
    }

    njobs = PySequence_Fast_GET_SIZE(jl);
    jobs = PyMem_Calloc(njobs ? (size_t)njobs : 1, sizeof(wjob_t));
    if (!jobs) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < njobs; i++) {
        PyObject *job = PySequence_Fast_GET_ITEM(jl, i), *origin_obj = NULL, *tmp = NULL, *path = NULL;
        wjob_t *j = &jobs[i];
        if (!PyArg_ParseTuple(job, "O&O&O;a job is (temp_path, path, origin)", PyUnicode_FSConverter, &tmp,
                              PyUnicode_FSConverter, &path, &origin_obj))
            goto done;
        j->tmp = tmp;
        j->path = path;
        PyObject *o = PySequence_Fast(origin_obj, "a job's origin must be a sequence");
        if (!o) goto done;
        int bad = PySequence_Fast_GET_SIZE(o) != nd;
        j->offset = 0;
        for (int d = 0; d < nd && !bad; d++) {
            Py_ssize_t start;
            if (as_ssize(o, d, &start)) {
                Py_DECREF(o);
                goto done;
            }
            /* every element gathered must lie in src */
            bad = start < 0 || start > view.shape[d] - chunk_shape[d];
            j->offset += start * view.strides[d];
        }
        Py_DECREF(o);
        if (bad) {
            PyErr_SetString(PyExc_ValueError, "a job's box lies outside src");
            goto done;
        }
    }
    if (!(result = PyBytes_FromStringAndSize(NULL, njobs))) goto done;
    char *status = PyBytes_AS_STRING(result);
    buf = PyMem_RawMalloc((size_t)(header.len + pl.payload_len) + 1);
    if (!buf) {
        Py_CLEAR(result);
        PyErr_NoMemory();
        goto done;
    }
    memcpy(buf, header.buf, (size_t)header.len); /* the same header for every job */
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < njobs; i++) status[i] = (char)run_wjob(&pl, &jobs[i], buf);
    Py_END_ALLOW_THREADS

done:
    if (jobs) {
        for (Py_ssize_t i = 0; i < njobs; i++) {
            Py_XDECREF(jobs[i].tmp);
            Py_XDECREF(jobs[i].path);
        }
        PyMem_Free(jobs);
    }
    PyMem_RawFree(buf);
    Py_XDECREF(shape);
    Py_XDECREF(jl);
    if (have_view) PyBuffer_Release(&view);
    PyBuffer_Release(&header);
    return result;
}

/* -- chunks inside one file (shards) -------------------------------------------------------
 *
 * read_spans: the chunks are byte ranges of one file (the inner chunks of a shard, located by
 * the caller from the shard index), each stored raw or compressed (``_rawio_decode.h``). One
 * open, then per chunk a pread of its bytes, a decode into a buffer of the chunk's size, and
 * the copy of its box into ``out``, all with the GIL released. As in read_boxes, what cannot
 * be read or decoded exactly is reported, not raised, and nothing of ``out`` is written for it.
 */

/* One chunk of read_spans: ST_OK or ST_FALLBACK. ``buf``: the stored bytes (grown as needed). */
/* The buffers of one read_spans call: the stored bytes of a chunk (``buf``, ``cap`` bytes) and
 * the decoded chunk (``scratch``), in the caller's ``work`` buffer when it is large enough
 * (reused by the thread's next call: no allocation and no page faults per call), else owned. */
typedef struct {
    char *buf, *scratch, *own, *own_scratch;
    size_t cap;
    /* the later spans' reads were started (posix_fadvise): done once, at the first span not
     * in the page cache; before it each span is read only if cached (RWF_NOWAIT), since the
     * advice on cached pages costs about as much as copying them */
    int advised;
    const job_t *jobs;
    Py_ssize_t njobs;
} span_work_t;

/* Start the kernel reading the spans after ``from`` that do not follow on from the one before
 * (on a cold disk the reads of scattered chunks overlap). A long run of adjacent spans (a whole
 * read) is left to the kernel's own readahead of sequential reads: pages that the advice brings
 * in are cached as single pages, and every later read of them from the page cache is about
 * twice as slow as of the large folios sequential readahead makes. A few spans (a piece of a
 * box read) are all advised: readahead does not reach the next chunk before the first is read,
 * and each waited in turn (measured: 3 x 2 adjacent 256 KiB chunks, 4.5-5.3 ms read one after
 * the other, 2.6-3.1 ms with the second advised). */
#define ADVISE_EVERY_SPAN 4
static void advise_spans(int fd, span_work_t *w, Py_ssize_t from) {
    w->advised = 1;
#ifdef POSIX_FADV_WILLNEED
    int every = w->njobs - from <= ADVISE_EVERY_SPAN;
    for (Py_ssize_t i = from + 1; i < w->njobs; i++) {
        const job_t *j = &w->jobs[i], *prev = &w->jobs[i - 1];
        if (j->offset >= 0 && j->length > 0 && (every || j->offset != prev->offset + prev->length))
            posix_fadvise(fd, (off_t)j->offset, (off_t)j->length, POSIX_FADV_WILLNEED);
    }
#else
    (void)fd;
    (void)from;
#endif
}

/* Read a span: first only from the page cache; on a miss, advise the rest, then wait for it. */
static int read_span(int fd, span_work_t *w, const job_t *job, char *buf, size_t n, off_t at) {
#if defined(RWF_NOWAIT) && defined(__linux__)
    if (!w->advised) {
        struct iovec v = {buf, n};
        ssize_t got = preadv2(fd, &v, 1, at, RWF_NOWAIT);
        if (got == (ssize_t)n) return 0;
        if (got > 0) { /* the cached head is kept */
            buf += got;
            n -= (size_t)got;
            at += got;
        }
        advise_spans(fd, w, job - w->jobs);
    }
#else
    if (!w->advised) advise_spans(fd, w, job - w->jobs);
#endif
    return read_full(fd, buf, n, at);
}

static int run_span(const plan_t *pl, int codec, void *ld, int fd, Py_ssize_t end, const job_t *job, span_work_t *w) {
    Py_ssize_t first, last;
    if (!job_span(pl, job, &first, &last)) return ST_OK; /* nothing to copy */
    size_t nbytes = (size_t)pl->chunk_nbytes;
    char *keep = job->keep.buf;
    if (job->offset < 0 || job->length < 0 || (size_t)job->length > stored_bound(codec, nbytes) ||
        job->offset > end - job->length)
        return ST_FALLBACK;
    off_t at = (off_t)job->offset;
    size_t len = (size_t)job->length;
    if (codec == CODEC_RAW) {
        if (len != nbytes) return ST_FALLBACK;
        if (keep) { /* the whole chunk, read straight into the caller's buffer */
            if (read_span(fd, w, job, keep, nbytes, at) != 0) return ST_FALLBACK;
            scatter_kept(pl, job, keep);
            return ST_OK;
        }
        /* only the elements from the box's first to its last */
        at += (off_t)(first * pl->itemsize);
        len = (size_t)((last - first) * pl->itemsize);
    } else {
        first = 0; /* the decoded chunk is whole */
    }
    if (len > w->cap) {
        char *grown = PyMem_RawRealloc(w->own, len); /* (the caller's buffer is never resized) */
        if (!grown) return ST_FALLBACK;
        w->own = w->buf = grown;
        w->cap = len;
    }
    if (len && read_span(fd, w, job, w->buf, len, at) != 0) return ST_FALLBACK;
    if (codec == CODEC_RAW) {
        scatter_box(pl, job, w->buf, first);
        return ST_OK;
    }
    const unsigned char *verbatim = stored_verbatim(codec, (const unsigned char *)w->buf, len, nbytes);
    if (verbatim) {
        if (!keep) {
            scatter_box(pl, job, (const char *)verbatim, 0);
            return ST_OK;
        }
        memcpy(keep, verbatim, nbytes);
        scatter_kept(pl, job, keep);
        return ST_OK;
    }
    if (!declares_size(codec, (const unsigned char *)w->buf, len, nbytes)) return ST_FALLBACK;
    char *into = keep;
    if (!into && !(into = w->scratch ? w->scratch : (w->scratch = w->own_scratch = PyMem_RawMalloc(nbytes ? nbytes : 1))))
        return ST_FALLBACK;
    if (decode_chunk(codec, ld, (const unsigned char *)w->buf, len, into, nbytes) != 0) return ST_FALLBACK;
    if (keep)
        scatter_kept(pl, job, keep);
    else
        scatter_box(pl, job, into, 0);
    return ST_OK;
}

PyDoc_STRVAR(read_spans_doc,
"read_spans(out, chunk_shape, out_dims, itemsize, swap, codec, file, tail, jobs, work=None, stream=False) -> bytes\n\n"
"Read, decode and copy boxes of chunks stored as byte ranges of one file into ``out`` with\n"
"the GIL released.\n\n"
"``file``: the file's path, or a descriptor of it the caller holds open (read with pread, left\n"
"open: the caller's open version of the file, e.g. the one it read the shard index from).\n"
"``chunk_shape``, ``out_dims``, ``itemsize``, ``swap``: as for ``read_boxes``. ``codec``: how\n"
"each chunk is stored: 0 raw (the elements in C order), 1 zstd, 2 blosc, 3 gzip, 4 zlib,\n"
"5 gzip or zlib by its magic, each decoding to the raw elements (needs ``set_decoders`` /\n"
"``set_libdeflate``; see ``decoders``). ``tail``: the bytes at the end of the file no chunk\n"
"may reach into (an index there). ``jobs``: a list of ``(offset, length, box)``, the chunk's\n"
"bytes in the file and its box as for ``read_boxes``. ``work``: a writable buffer to use for the\n"
"stored and decoded bytes instead of allocating (a thread's reused scratch: the decoded chunk\n"
"first, unless raw, then room for the largest span). Returns one status byte per job: 0 done,\n"
"2 not read (past the end, a size or decode mismatch, damage): read that chunk another way.\n"
"``stream``: copy into ``out`` with streaming stores (see ``place_boxes``). A job may name a fourth\n"
"item, ``keep``: as for ``read_boxes``, the buffer the whole chunk is decoded into.");

static PyObject *read_spans(PyObject *self, PyObject *args) {
    PyObject *out_obj, *shape_obj, *dims_obj, *file_obj, *path_obj = NULL, *jobs_obj;
    Py_ssize_t itemsize, tail;
    int swap, codec, given_fd = -1, stream = 0;
    Py_buffer work = {0};
    if (!PyArg_ParseTuple(args, "OOOnpiOnO|w*p", &out_obj, &shape_obj, &dims_obj, &itemsize, &swap, &codec,
                          &file_obj, &tail, &jobs_obj, &work, &stream))
        return NULL;
    if (PyLong_Check(file_obj)) {
        long v = PyLong_AsLong(file_obj);
        if (!PyErr_Occurred() && (v < 0 || v > INT_MAX))
            PyErr_SetString(PyExc_ValueError, "not a file descriptor");
        given_fd = (int)v;
    } else {
        PyUnicode_FSConverter(file_obj, &path_obj);
    }
    if (PyErr_Occurred()) {
        if (work.buf) PyBuffer_Release(&work);
        return NULL;
    }
    plan_t pl;
    job_t *jobs = NULL;
    Py_ssize_t njobs = 0;
    span_work_t w = {NULL, NULL, NULL, NULL, 0, 0, NULL, 0};
    void *ld = NULL;
    PyObject *result = NULL;
    call_t c = {.have_view = 0};

    if (codec < 0 || codec >= CODEC_COUNT || !codec_loaded(codec)) {
        PyErr_Format(PyExc_ValueError, "codec %d is unknown or its library was not handed over", codec);
        goto done;
    }
    if (begin_call(&c, &pl, out_obj, shape_obj, dims_obj, jobs_obj, itemsize, swap) != 0) goto done;
    pl.stream = stream;
    njobs = PySequence_Fast_GET_SIZE(c.jobs);
    jobs = PyMem_Calloc(njobs ? (size_t)njobs : 1, sizeof(job_t));
    if (!jobs) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < njobs; i++) {
        PyObject *box = NULL, *keep = NULL;
        job_t *j = &jobs[i];
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(c.jobs, i),
                              "nnO|O;a job is (offset, length, box) or (offset, length, box, keep)", &j->offset,
                              &j->length, &box, &keep) ||
            parse_box(&pl, &c.view, c.out_dim, box, j) != 0 || parse_keep(&pl, keep, j) != 0)
            goto done;
    }
    if (!(result = PyBytes_FromStringAndSize(NULL, njobs))) goto done;
    char *status = PyBytes_AS_STRING(result);
    w.jobs = jobs;
    w.njobs = njobs;
    /* the decoded chunk first, the stored bytes after it, each at a 64-byte boundary (the
     * kernel's copy into a misaligned buffer, and copies out of it, run markedly slower) */
    size_t skip = (size_t)(-(uintptr_t)work.buf & 63), decoded = codec == CODEC_RAW ? 0 : (size_t)pl.chunk_nbytes;
    size_t gap = (size_t)(-decoded & 63);
    if (work.buf && (size_t)work.len > skip + decoded + gap) {
        w.scratch = decoded ? (char *)work.buf + skip : NULL;
        w.buf = (char *)work.buf + skip + decoded + gap;
        w.cap = (size_t)work.len - skip - decoded - gap;
    }
    if (codec >= CODEC_GZIP) ld = ld_alloc();
    if (codec >= CODEC_GZIP && !ld) {
        Py_CLEAR(result);
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    /* a descriptor given is the caller's (never closed here); a path is opened for this call */
    int fd = given_fd >= 0 ? given_fd : open(PyBytes_AS_STRING(path_obj), O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
        if (given_fd < 0) close(fd);
        fd = -1;
    }
    if (fd >= 0) {
        Py_ssize_t end = tail < 0 ? -1 : (Py_ssize_t)st.st_size - tail; /* where chunk data must end */
        for (Py_ssize_t i = 0; i < njobs; i++)
            status[i] = (char)run_span(&pl, codec, ld, fd, end, &jobs[i], &w);
        if (given_fd < 0) close(fd);
    } else {
        memset(status, ST_FALLBACK, (size_t)njobs);
    }
    stream_fence(stream);
    Py_END_ALLOW_THREADS

done:
    if (jobs) {
        for (Py_ssize_t i = 0; i < njobs; i++)
            if (jobs[i].keep.buf) PyBuffer_Release(&jobs[i].keep);
        PyMem_Free(jobs);
    }
    PyMem_RawFree(w.own_scratch);
    PyMem_RawFree(w.own);
    if (work.buf) PyBuffer_Release(&work);
    if (ld) ld_free(ld);
    end_call(&c);
    Py_XDECREF(path_obj);
    return result;
}

PyDoc_STRVAR(set_decoders_doc,
"set_decoders(zstd_decompress, zstd_is_error, blosc_cbuffer_validate, blosc_decompress_ctx)\n\n"
"The addresses of libzstd's and c-blosc's functions (from ctypes; 0: that library is absent),\n"
"for ``read_spans``. The libraries must stay loaded for the life of the process.");

static PyObject *set_decoders(PyObject *self, PyObject *args) {
    unsigned long long zd, ze, bv, bd;
    if (!PyArg_ParseTuple(args, "KKKK", &zd, &ze, &bv, &bd)) return NULL;
    /* a pair is taken whole or not at all; the checked one (codec_loaded) last */
    if (zd && ze) {
        zstd_is_error = (zstd_is_error_t)(uintptr_t)ze;
        zstd_decompress = (zstd_decompress_t)(uintptr_t)zd;
    }
    if (bv && bd) {
        blosc_decompress_ctx = (blosc_decompress_ctx_t)(uintptr_t)bd;
        blosc_validate = (blosc_validate_t)(uintptr_t)bv;
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(decoders_doc,
"decoders() -> tuple[int, ...]\n\n"
"The ``codec`` numbers ``read_spans`` can decode now (0 raw always; the others once their\n"
"library was handed over).");

static PyObject *decoders(PyObject *self, PyObject *noargs) {
    PyObject *t = PyList_New(0);
    if (!t) return NULL;
    for (int c = 0; c < CODEC_COUNT; c++) {
        if (!codec_loaded(c)) continue;
        PyObject *n = PyLong_FromLong(c);
        if (!n || PyList_Append(t, n) != 0) {
            Py_XDECREF(n);
            Py_DECREF(t);
            return NULL;
        }
        Py_DECREF(n);
    }
    PyObject *out = PyList_AsTuple(t);
    Py_DECREF(t);
    return out;
}

PyDoc_STRVAR(set_libdeflate_doc,
"set_libdeflate(alloc_decompressor, free_decompressor, gzip_decompress_ex, zlib_decompress_ex)\n\n"
"The addresses of libdeflate's functions (from ctypes), for ``read_boxes(..., inflate=True)``.\n"
"The library must stay loaded for the life of the process.");

static PyObject *set_libdeflate(PyObject *self, PyObject *args) {
    unsigned long long a, f, g, z;
    if (!PyArg_ParseTuple(args, "KKKK", &a, &f, &g, &z)) return NULL;
    if (!a || !f || !g || !z) {
        PyErr_SetString(PyExc_ValueError, "null function address");
        return NULL;
    }
    ld_alloc = (ld_alloc_t)(uintptr_t)a;
    ld_free = (ld_free_t)(uintptr_t)f;
    ld_zlib = (ld_decompress_ex_t)(uintptr_t)z;
    ld_gzip = (ld_decompress_ex_t)(uintptr_t)g; /* last: read_boxes checks this one */
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"decoders", decoders, METH_NOARGS, decoders_doc},
    {"place_boxes", place_boxes, METH_VARARGS, place_boxes_doc},
    {"read_boxes", read_boxes, METH_VARARGS, read_boxes_doc},
    {"read_spans", read_spans, METH_VARARGS, read_spans_doc},
    {"set_decoders", set_decoders, METH_VARARGS, set_decoders_doc},
    {"set_libdeflate", set_libdeflate, METH_VARARGS, set_libdeflate_doc},
    {"write_boxes", write_boxes, METH_VARARGS, write_boxes_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "shardstore._rawio",
    "Native batch reads and writes of chunks (see read_boxes, read_spans, write_boxes, place_boxes).", -1, methods,
};

PyMODINIT_FUNC PyInit__rawio(void) {
    static int at_fork;
    if (!at_fork && pthread_atfork(NULL, NULL, helper_after_fork) != 0) return PyErr_NoMemory();
    at_fork = 1;
    return PyModule_Create(&module);
}
