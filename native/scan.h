/*
 * sandboxfs native scan helpers: batch work for grep_files where Python's
 * per-file and per-byte cost is the bottleneck.
 *
 * Policy-free like sfs.h: which open flags and which resolve flags to use is
 * the caller's business (sandboxfs/core/chokepoint.py).  The helpers take only
 * descriptors, single leaf names and buffers the caller owns; they never keep
 * a descriptor past the call and allocate nothing.  They do not touch Python
 * objects, so cffi runs them with the GIL released.
 */
#ifndef SANDBOXFS_SCAN_H
#define SANDBOXFS_SCAN_H

#include <stdint.h>

/* What sfs_read_leaves found for one name (kinds[i]). */
#define SFS_LEAF_GONE 0    /* not opened (errors[i] holds the errno), or not a regular file */
#define SFS_LEAF_TEXT 1    /* read whole; no NUL in the probe; the needle is not in it */
#define SFS_LEAF_BINARY 2  /* read; a NUL in its first probe bytes */
#define SFS_LEAF_SEARCH 3  /* read whole, no NUL in the probe, its bytes kept in the arena:
                            * the needle is in it, or there was no needle */
#define SFS_LEAF_LATER 4   /* not searched here (longer than a read may be, grew while it was
                            * read, or fstat/read failed): the caller searches it its own way */

/*
 * Open, check and read regular files by leaf name beneath one directory.
 *
 * `names` holds `names_len` bytes: leaf names, each ended by a NUL.  For each
 * name, in order, up to `out_len` of them: openat2(dirfd, name, {flags |
 * O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0, resolve}) (retried up to
 * `retries` times on EAGAIN), fstat, and only for a regular file one read(2)
 * of min(block, st_size + 1) bytes into the arena (a short read is the whole
 * file, as it is for Python's FileIO.read; a full one means the file is
 * longer: SFS_LEAF_LATER); the descriptor is closed before the next name.
 * Name i is classified in kinds[i] (SFS_LEAF_*), with the errno or 0 in
 * errors[i]; the bytes of an
 * SFS_LEAF_SEARCH file stay in the arena, at offset spans[2i], spans[2i + 1]
 * bytes long (both 0 for the other kinds), one file after the other, each
 * followed by a newline that is not part of it (so the files kept can be
 * searched as one text in which no line runs from one file into the next,
 * arena[0, spans[2 * last] + spans[2 * last + 1] + 1)).  `needle`
 * (`needle_len` > 0) is searched with sfs_find; with no needle every text file
 * is SFS_LEAF_SEARCH.
 *
 * Invariant: nothing but a leaf name (not empty, ".", "..", nor holding '/') is
 * ever opened, only beneath `dirfd`, never through a symlink (O_NOFOLLOW on
 * top of the caller's resolve flags), never for writing, never blocking on a
 * FIFO or device (O_NONBLOCK), and nothing that fstat does not show to be a
 * regular file is read; nothing is written outside arena[0, arena_len),
 * kinds[0, out_len), errors[0, out_len) and spans[0, 2 * out_len); every
 * descriptor it opens is closed before it returns.
 *
 * Returns how many names it classified: fewer than there are when out_len is
 * reached, or when the next file (and its newline) fits in the arena but not
 * after the files already kept (call again with the rest); -EINVAL (nothing
 * opened) if `flags` ask for anything but reading, or a name is not a leaf
 * name, or a length is negative.
 */
int64_t sfs_read_leaves(int dirfd, const char *names, int64_t names_len, uint64_t flags,
                        uint64_t resolve, int32_t retries, int64_t block, int64_t probe,
                        const char *needle, int64_t needle_len, char *arena, int64_t arena_len,
                        uint8_t *kinds, int64_t *spans, int32_t *errors, int64_t out_len);

/* The offset of the first occurrence of needle[0, needle_len) in hay[0, hay_len), as
 * bytes.find gives it (0 for an empty needle), or -1.  Linear time at worst. */
int64_t sfs_find(const char *hay, int64_t hay_len, const char *needle, int64_t needle_len);

/* How many bytes of buf[0, len) equal `byte` (0-255). */
int64_t sfs_count_byte(const char *buf, int64_t len, int byte);

#endif
