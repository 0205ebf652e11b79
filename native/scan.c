/* sandboxfs native scan helpers: see scan.h.  No policy, no Python objects. */
#define _GNU_SOURCE
#include "scan.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_openat2
#define SYS_openat2 437
#endif

/* The kernel's struct open_how (linux/openat2.h). */
struct scan_open_how {
    uint64_t flags;
    uint64_t mode;
    uint64_t resolve;
};

/* Flags that would make an open do more than read an existing object. */
#define SCAN_REFUSED_FLAGS \
    ((uint64_t)(O_ACCMODE | O_CREAT | O_EXCL | O_TRUNC | O_APPEND | O_PATH | O_TMPFILE | O_DIRECTORY))

/* A rough rank of how common each byte is in text and code (higher: more common);
 * sfs_find looks for the rarest byte of the needle first. */
static unsigned char byte_rank(unsigned char c)
{
    static const char common[] = " etaoinsrhldcum\nfpgwybvk";
    const char *at = memchr(common, c, sizeof common - 1);
    if (at != NULL)
        return (unsigned char)(255 - (at - common));
    if (c >= 'a' && c <= 'z')
        return 200;
    if (c == '\t' || c == '.' || c == ',' || c == '(' || c == ')' || c == '=' || c == '"' ||
        c == '\'' || c == '_' || c == '-' || c == ':' || c == ';' || c == '/' || c == '#')
        return 190;
    if (c >= '0' && c <= '9')
        return 180;
    if (c >= 'A' && c <= 'Z')
        return 150;
    if (c >= 0x80)
        return 100;
    if (c < 0x20)
        return 20;
    return 120;
}

int64_t sfs_find(const char *hay, int64_t hay_len, const char *needle, int64_t needle_len)
{
    if (needle_len <= 0)
        return hay_len >= 0 ? 0 : -1;
    if (hay_len < needle_len)
        return -1;
    /* The rarest byte of the needle, at offset `rare`: memchr finds candidates fast. */
    int64_t rare = 0;
    for (int64_t i = 1; i < needle_len; i++)
        if (byte_rank((unsigned char)needle[i]) < byte_rank((unsigned char)needle[rare]))
            rare = i;
    const unsigned char want = (unsigned char)needle[rare];
    const int64_t last = hay_len - needle_len; /* the last possible start */
    int64_t start = 0;
    int64_t misses = 0;
    while (start <= last) {
        const char *hit = memchr(hay + start + rare, want, (size_t)(last - start + 1));
        if (hit == NULL)
            return -1;
        int64_t at = (hit - hay) - rare;
        if (memcmp(hay + at, needle, (size_t)needle_len) == 0)
            return at;
        start = at + 1;
        /* Too many false candidates (the rare byte is common here): glibc's memmem is
         * linear in the worst case, so the whole search stays linear. */
        if (++misses > 64 && misses * 16 > start) {
            const char *found = memmem(hay + start, (size_t)(hay_len - start), needle,
                                       (size_t)needle_len);
            return found == NULL ? -1 : (int64_t)(found - hay);
        }
    }
    return -1;
}

int64_t sfs_count_byte(const char *buf, int64_t len, int byte)
{
    /* Four 16-byte lanes of byte counters (SSE2/NEON wide on every compiler target). */
    typedef unsigned char v16 __attribute__((vector_size(16)));
    enum { STRIDE = 4 * sizeof(v16) };
    const unsigned char c = (unsigned char)byte;
    v16 match;
    for (size_t k = 0; k < sizeof match; k++)
        match[k] = c;
    int64_t total = 0;
    int64_t i = 0;
    while (len - i >= STRIDE) {
        v16 lanes[4] = {{0}, {0}, {0}, {0}};
        /* 255 rounds at most: a byte counter cannot overflow. */
        for (int rounds = 0; rounds < 255 && len - i >= STRIDE; rounds++, i += STRIDE) {
            for (int k = 0; k < 4; k++) {
                v16 chunk;
                memcpy(&chunk, buf + i + k * sizeof(v16), sizeof chunk);
                lanes[k] -= (v16)(chunk == match); /* a match is -1 (all ones) in its lane */
            }
        }
        for (int k = 0; k < 4; k++)
            for (size_t j = 0; j < sizeof(v16); j++)
                total += lanes[k][j];
    }
    for (; i < len; i++)
        total += (unsigned char)buf[i] == c;
    return total;
}

/* Whether `name` (`len` bytes, no NUL) names one entry of a directory. */
static int is_leaf(const char *name, size_t len)
{
    if (len == 0 || (len == 1 && name[0] == '.') || (len == 2 && name[0] == '.' && name[1] == '.'))
        return 0;
    return memchr(name, '/', len) == NULL;
}

/* openat2 of one leaf with the forced flags, retried on EAGAIN: an fd or -errno. */
static int open_leaf(int dirfd, const char *name, uint64_t flags, uint64_t resolve,
                     int32_t retries)
{
    struct scan_open_how how;
    memset(&how, 0, sizeof how);
    how.flags = flags | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY;
    how.resolve = resolve;
    for (int32_t attempt = 0;; attempt++) {
        long fd = syscall(SYS_openat2, dirfd, name, &how, sizeof how);
        if (fd >= 0)
            return (int)fd;
        if ((errno != EAGAIN && errno != EINTR) || attempt + 1 >= retries)
            return -errno;
    }
}

/* One read(2) of up to `want` bytes at `to` (retried only on EINTR): how many, or
 * -errno.  A short read is the end of the file, as for Python's FileIO.read. */
static int64_t read_once(int fd, char *to, int64_t want)
{
    for (;;) {
        ssize_t n = read(fd, to, (size_t)want);
        if (n >= 0)
            return n;
        if (errno != EINTR)
            return -errno;
    }
}

int64_t sfs_read_leaves(int dirfd, const char *names, int64_t names_len, uint64_t flags,
                        uint64_t resolve, int32_t retries, int64_t block, int64_t probe,
                        const char *needle, int64_t needle_len, char *arena, int64_t arena_len,
                        uint8_t *kinds, int64_t *spans, int32_t *errors, int64_t out_len)
{
    if ((flags & SCAN_REFUSED_FLAGS) != (uint64_t)O_RDONLY || names_len < 0 || block < 1 ||
        probe < 0 || needle_len < 0 || arena_len < 0 || out_len < 0)
        return -EINVAL;
    if (names_len > 0 && names[names_len - 1] != '\0')
        return -EINVAL;
    /* Every name is checked before anything is opened. */
    for (int64_t at = 0; at < names_len;) {
        size_t len = strlen(names + at);
        if (!is_leaf(names + at, len))
            return -EINVAL;
        at += (int64_t)len + 1;
    }
    int64_t used = 0; /* arena bytes kept for SFS_LEAF_SEARCH files */
    int64_t done = 0;
    for (int64_t at = 0; at < names_len && done < out_len;) {
        const char *name = names + at;
        uint8_t kind = SFS_LEAF_LATER;
        int32_t error = 0;
        int64_t offset = 0;
        int64_t length = 0;
        int fd = open_leaf(dirfd, name, flags, resolve, retries);
        if (fd < 0) {
            kind = SFS_LEAF_GONE;
            error = -fd;
            goto next;
        }
        struct stat st;
        if (fstat(fd, &st) < 0) {
            error = errno;
            close(fd);
            goto next;
        }
        if (!S_ISREG(st.st_mode)) {
            kind = SFS_LEAF_GONE;
            close(fd);
            goto next;
        }
        int64_t want = st.st_size < block ? (int64_t)st.st_size + 1 : block;
        if (want + 1 > arena_len) { /* the file, and the newline after it */
            close(fd); /* SFS_LEAF_LATER: longer than a read may be */
            goto next;
        }
        if (want + 1 > arena_len - used) {
            close(fd);
            break; /* the caller calls again with this name first */
        }
        int64_t got = read_once(fd, arena + used, want);
        close(fd);
        if (got < 0 || got == want) {
            /* SFS_LEAF_LATER: a read failed, or the file is longer than one read may be. */
            error = got < 0 ? (int32_t)-got : 0;
            goto next;
        }
        const char *bytes = arena + used;
        if (memchr(bytes, '\0', (size_t)(got < probe ? got : probe)) != NULL) {
            kind = SFS_LEAF_BINARY;
        } else if (needle_len > 0 && sfs_find(bytes, got, needle, needle_len) < 0) {
            kind = SFS_LEAF_TEXT;
        } else {
            kind = SFS_LEAF_SEARCH;
            offset = used;
            length = got;
            arena[used + got] = '\n'; /* lines never join across two files */
            used += got + 1;
        }
    next:
        kinds[done] = kind;
        errors[done] = error;
        spans[2 * done] = offset;
        spans[2 * done + 1] = length;
        at += (int64_t)strlen(name) + 1;
        done++;
    }
    return done;
}
