/* Decoders of whole chunks for the native readers of ``_rawio.c`` (included there once).
 *
 * The libraries are the ones the Python path decodes with: the shared objects imagecodecs
 * ships (libzstd, libblosc, libdeflate), found and loaded by Python with ctypes, whose function
 * addresses are handed over by ``set_decoders`` / ``set_libdeflate``. So building this module
 * needs none of their headers: the few functions used are declared here as their own headers
 * declare them, and the two paths decode the same bytes with the same code.
 *
 * Every decoder writes into a buffer of exactly the chunk's size and succeeds only when the
 * stored bytes decode to exactly that many bytes; anything else (damage, another size, a
 * decoder not loaded) is reported as "not decoded", and the caller's Python path decodes that
 * chunk again and words the error. Nothing here ever reads past ``len`` input bytes or writes
 * past ``cap`` output bytes.
 */
#ifndef SHARDSTORE_RAWIO_DECODE_H
#define SHARDSTORE_RAWIO_DECODE_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

/* the stored form of one chunk; the values are the ``codec`` argument of read_spans */
enum { CODEC_RAW = 0, CODEC_ZSTD = 1, CODEC_BLOSC = 2, CODEC_GZIP = 3, CODEC_ZLIB = 4, CODEC_DEFLATE_AUTO = 5, CODEC_COUNT = 6 };

/* zstd.h */
typedef size_t (*zstd_decompress_t)(void *dst, size_t cap, const void *src, size_t len);
typedef unsigned (*zstd_is_error_t)(size_t code);
/* blosc.h (c-blosc 1.x): validate checks the header against the buffer's length (so that
 * decompress_ctx, which takes no input length, stays inside it) and gives the decoded size */
typedef int (*blosc_validate_t)(const void *src, size_t len, size_t *nbytes);
typedef int (*blosc_decompress_ctx_t)(const void *src, void *dst, size_t cap, int nthreads);
/* libdeflate.h */
typedef void *(*ld_alloc_t)(void);
typedef void (*ld_free_t)(void *);
typedef int (*ld_decompress_ex_t)(void *, const void *, size_t, void *, size_t, size_t *, size_t *);

static zstd_decompress_t zstd_decompress;
static zstd_is_error_t zstd_is_error;
static blosc_validate_t blosc_validate;
static blosc_decompress_ctx_t blosc_decompress_ctx;
static ld_alloc_t ld_alloc;
static ld_free_t ld_free;
static ld_decompress_ex_t ld_gzip, ld_zlib;

/* Where the elements of a chunk stored uncompressed inside its codec's frame begin, or NULL:
 * a blosc frame with the MEMCPYED flag (0x02: c-blosc found compression did not pay, common
 * for noisy EM data with lz4) holds the ``cap`` bytes verbatim after its 16-byte header, so
 * they are copied out directly instead of decoded into a buffer first. */
static const unsigned char *stored_verbatim(int codec, const unsigned char *src, size_t len, size_t cap) {
    if (codec != CODEC_BLOSC || len != cap + 16 || cap > UINT32_MAX || !(src[2] & 0x02)) return NULL;
    uint32_t nbytes = (uint32_t)src[4] | (uint32_t)src[5] << 8 | (uint32_t)src[6] << 16 | (uint32_t)src[7] << 24;
    uint32_t cbytes = (uint32_t)src[12] | (uint32_t)src[13] << 8 | (uint32_t)src[14] << 16 | (uint32_t)src[15] << 24;
    return (nbytes == cap && cbytes == len) ? src + 16 : NULL;
}

/* Whether chunks stored as ``codec`` can be decoded here (its library was handed over). */
static int codec_loaded(int codec) {
    switch (codec) {
    case CODEC_RAW: return 1;
    case CODEC_ZSTD: return zstd_decompress != NULL && zstd_is_error != NULL;
    case CODEC_BLOSC: return blosc_validate != NULL && blosc_decompress_ctx != NULL;
    case CODEC_GZIP: case CODEC_ZLIB: case CODEC_DEFLATE_AUTO: return ld_gzip != NULL;
    default: return 0;
    }
}

/* The most stored bytes a chunk of ``nbytes`` may take in ``codec`` (bigger: not decoded
 * here, so a corrupt index entry never becomes a huge read): raw is exact; compressors
 * expand incompressible data by a few bytes per block (deflate's stored blocks 5 per 64 KiB,
 * blosc its 16-byte header and a 4-byte size per block, zstd 3 per 128 KiB block). */
static size_t stored_bound(int codec, size_t nbytes) {
    return codec == CODEC_RAW ? nbytes : nbytes + nbytes / 8 + 4096;
}

/* Whether stored bytes that declare their decoded size declare ``cap`` (blosc's header, a gzip
 * member's ISIZE): checked before the caller allocates a chunk-sized buffer, so that a hostile
 * chunk size in the metadata costs no allocation for a small stream that cannot fill it. */
static int declares_size(int codec, const unsigned char *src, size_t len, size_t cap) {
    size_t declared = 0;
    switch (codec) {
    case CODEC_BLOSC:
        return cap > 0 && cap <= INT_MAX && blosc_validate(src, len, &declared) == 0 && declared == cap;
    case CODEC_GZIP: case CODEC_DEFLATE_AUTO:
        if (len >= 18 && src[0] == 0x1f && src[1] == 0x8b) {
            uint32_t isize = (uint32_t)src[len - 4] | (uint32_t)src[len - 3] << 8 | (uint32_t)src[len - 2] << 16 |
                             (uint32_t)src[len - 1] << 24;
            return isize == (uint32_t)cap;
        }
        return codec == CODEC_DEFLATE_AUTO; /* zlib streams declare nothing */
    default:
        return 1;
    }
}

/* Decode ``len`` stored bytes at ``src`` into ``dst`` (``cap`` bytes, the chunk): 0 when they
 * decode to exactly ``cap`` bytes, -1 otherwise. ``ld``: this call's libdeflate decompressor.
 * Raw chunks are not decoded: the caller copies out of ``src`` itself. */
static int decode_chunk(int codec, void *ld, const unsigned char *src, size_t len, char *dst, size_t cap) {
    size_t used = 0, got = 0;
    switch (codec) {
    case CODEC_ZSTD: {
        size_t n = zstd_decompress(dst, cap, src, len);
        return (!zstd_is_error(n) && n == cap) ? 0 : -1;
    }
    case CODEC_BLOSC: {
        size_t declared = 0;
        if (cap == 0 || cap > INT_MAX || blosc_validate(src, len, &declared) != 0 || declared != cap) return -1;
        return blosc_decompress_ctx(src, dst, cap, 1) == (int)cap ? 0 : -1;
    }
    case CODEC_GZIP: case CODEC_ZLIB: case CODEC_DEFLATE_AUTO: {
        int gz = len >= 2 && src[0] == 0x1f && src[1] == 0x8b;
        if ((codec == CODEC_GZIP && !gz) || (codec == CODEC_ZLIB && gz)) return -1;
        /* one stream that fills the chunk and ends where the stored bytes do (several gzip
         * members, trailing bytes: the Python path); libdeflate checks the CRC / Adler-32 */
        ld_decompress_ex_t fn = gz ? ld_gzip : ld_zlib;
        return (fn(ld, src, len, dst, cap, &used, &got) == 0 && got == cap && used == len) ? 0 : -1;
    }
    default:
        return -1;
    }
}

#endif
