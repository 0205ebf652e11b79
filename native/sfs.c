/* sandboxfs native shim: see sfs.h.  One syscall per function, no policy. */
#define _GNU_SOURCE
#include "sfs.h"

#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Syscall numbers are the same on every architecture for these (generic table). */
#ifndef SYS_openat2
#define SYS_openat2 437
#endif
#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#endif
#ifndef SYS_landlock_add_rule
#define SYS_landlock_add_rule 445
#endif
#ifndef SYS_landlock_restrict_self
#define SYS_landlock_restrict_self 446
#endif

/* The kernel's struct open_how (linux/openat2.h). */
struct sfs_open_how {
    uint64_t flags;
    uint64_t mode;
    uint64_t resolve;
};

/* The kernel's struct landlock_ruleset_attr, newest layout (ABI 6). */
struct sfs_landlock_ruleset_attr {
    uint64_t handled_access_fs;
    uint64_t handled_access_net;
    uint64_t scoped;
};

/* The kernel's struct landlock_path_beneath_attr: packed. */
struct sfs_landlock_path_beneath_attr {
    uint64_t allowed_access;
    int32_t parent_fd;
} __attribute__((packed));

/* The kernel's struct landlock_net_port_attr. */
struct sfs_landlock_net_port_attr {
    uint64_t allowed_access;
    uint64_t port;
};

static int neg_errno(long rc)
{
    return rc < 0 ? -errno : (int)rc;
}

int sfs_openat2(int dirfd, const char *path, uint64_t flags, uint64_t mode, uint64_t resolve)
{
    struct sfs_open_how how;
    memset(&how, 0, sizeof how);
    how.flags = flags | O_CLOEXEC;
    how.mode = mode;
    how.resolve = resolve;
    return neg_errno(syscall(SYS_openat2, dirfd, path, &how, sizeof how));
}

int sfs_renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath,
                  unsigned int flags)
{
    return neg_errno(syscall(SYS_renameat2, olddirfd, oldpath, newdirfd, newpath, flags));
}

int sfs_link_fd(int fd, int newdirfd, const char *newpath)
{
    return neg_errno(linkat(fd, "", newdirfd, newpath, AT_EMPTY_PATH));
}

int sfs_statx(int dirfd, const char *path, int flags, unsigned int mask, struct sfs_statx *out)
{
    struct statx stx;
    memset(&stx, 0, sizeof stx);
    if (statx(dirfd, path, flags, mask, &stx) < 0)
        return -errno;
    out->mask = stx.stx_mask;
    out->mode = stx.stx_mode;
    out->nlink = stx.stx_nlink;
    out->uid = stx.stx_uid;
    out->gid = stx.stx_gid;
    out->ino = stx.stx_ino;
    out->size = stx.stx_size;
    out->blocks = stx.stx_blocks;
    out->attributes = stx.stx_attributes;
    out->atime_sec = stx.stx_atime.tv_sec;
    out->atime_nsec = stx.stx_atime.tv_nsec;
    out->btime_sec = stx.stx_btime.tv_sec;
    out->btime_nsec = stx.stx_btime.tv_nsec;
    out->ctime_sec = stx.stx_ctime.tv_sec;
    out->ctime_nsec = stx.stx_ctime.tv_nsec;
    out->mtime_sec = stx.stx_mtime.tv_sec;
    out->mtime_nsec = stx.stx_mtime.tv_nsec;
    out->dev_major = stx.stx_dev_major;
    out->dev_minor = stx.stx_dev_minor;
    return 0;
}

int sfs_fallocate(int fd, int mode, int64_t offset, int64_t len)
{
    return neg_errno(fallocate(fd, mode, (off_t)offset, (off_t)len));
}

int64_t sfs_fstatfs_type(int fd)
{
    struct statfs sfs;
    if (fstatfs(fd, &sfs) < 0)
        return -errno;
    return (int64_t)(uint64_t)sfs.f_type;
}

int sfs_landlock_abi_version(void)
{
    return neg_errno(
        syscall(SYS_landlock_create_ruleset, NULL, 0, SFS_LANDLOCK_CREATE_RULESET_VERSION));
}

int sfs_landlock_create_ruleset(uint64_t handled_access_fs, uint64_t handled_access_net,
                                uint64_t scoped)
{
    struct sfs_landlock_ruleset_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.handled_access_fs = handled_access_fs;
    attr.handled_access_net = handled_access_net;
    attr.scoped = scoped;
    /* Older kernels accept the larger struct as long as the fields they do not
     * know are zero, so the caller masks rights by ABI version. */
    long fd = syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0);
    if (fd < 0)
        return -errno;
    /* Landlock ruleset fds are created O_CLOEXEC by the kernel. */
    return (int)fd;
}

int sfs_landlock_add_path_rule(int ruleset_fd, uint64_t allowed_access, int parent_fd)
{
    struct sfs_landlock_path_beneath_attr rule;
    memset(&rule, 0, sizeof rule);
    rule.allowed_access = allowed_access;
    rule.parent_fd = parent_fd;
    return neg_errno(
        syscall(SYS_landlock_add_rule, ruleset_fd, SFS_LANDLOCK_RULE_PATH_BENEATH, &rule, 0));
}

int sfs_landlock_add_net_rule(int ruleset_fd, uint64_t allowed_access, uint64_t port)
{
    struct sfs_landlock_net_port_attr rule;
    memset(&rule, 0, sizeof rule);
    rule.allowed_access = allowed_access;
    rule.port = port;
    return neg_errno(
        syscall(SYS_landlock_add_rule, ruleset_fd, SFS_LANDLOCK_RULE_NET_PORT, &rule, 0));
}

int sfs_set_no_new_privs(void)
{
    return neg_errno(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0));
}

int sfs_landlock_restrict_self(int ruleset_fd)
{
    return neg_errno(syscall(SYS_landlock_restrict_self, ruleset_fd, 0));
}

int sfs_set_mmap_threshold(int bytes)
{
    return mallopt(M_MMAP_THRESHOLD, bytes) == 1 ? 0 : -EINVAL;
}

/* One entry of sfs_read_dir while it is being collected. */
struct sfs_dir_entry {
    const char *name;
    size_t length;
    uint64_t prefix; /* the name's first 8 bytes, big-endian, NUL-padded */
    char kind;
};

/* strcmp order: the prefixes decide unless they are equal, and equal prefixes of
 * distinct names (no name holds a NUL) mean both are 8 bytes or longer. */
static int compare_entries(const void *a, const void *b)
{
    const struct sfs_dir_entry *x = a, *y = b;
    if (x->prefix != y->prefix)
        return x->prefix < y->prefix ? -1 : 1;
    if (x->length < 8 || y->length < 8)
        return 0;
    return strcmp(x->name + 8, y->name + 8);
}

static uint64_t name_prefix(const char *name, size_t length)
{
    uint64_t prefix = 0;
    for (size_t i = 0; i < 8; i++)
        prefix = (prefix << 8) | (i < length ? (unsigned char)name[i] : 0);
    return prefix;
}

static char kind_of_mode(mode_t mode)
{
    if (S_ISREG(mode))
        return 'f';
    if (S_ISDIR(mode))
        return 'd';
    if (S_ISLNK(mode))
        return 'l';
    return 'o';
}

/* The kernel's struct linux_dirent64. */
struct sfs_dirent64 {
    uint64_t d_ino;
    int64_t d_off;
    unsigned short d_reclen;
    unsigned char d_type;
    char d_name[];
};

/* Invariant: the buffer holds *count kind letters, then *count names, each one
 * leaf name (non-empty, no '/', not "." or "..", as the kernel returned it) ended
 * by a NUL, in strcmp order, the i-th letter the kind of the i-th name; no
 * descriptor is created and no name is opened. */
int64_t sfs_read_dir(int dirfd, char **out, int64_t *count_out)
{
    size_t raw_size = 0, raw_capacity = 64 * 1024;
    char *raw = malloc(raw_capacity);
    struct sfs_dir_entry *entries = NULL;
    size_t count = 0, total = 0;
    int64_t result;
    *out = NULL;
    *count_out = 0;
    if (raw == NULL)
        return -ENOMEM;
    if (lseek(dirfd, 0, SEEK_SET) < 0) {
        result = -errno;
        goto done;
    }
    for (;;) { /* the whole directory's records, in as many getdents64 calls as it takes */
        if (raw_capacity - raw_size < 32 * 1024) {
            char *bigger = realloc(raw, raw_capacity * 2);
            if (bigger == NULL) {
                result = -ENOMEM;
                goto done;
            }
            raw = bigger;
            raw_capacity *= 2;
        }
        long n = syscall(SYS_getdents64, dirfd, raw + raw_size, raw_capacity - raw_size);
        if (n < 0) {
            result = -errno;
            goto done;
        }
        if (n == 0)
            break;
        raw_size += (size_t)n;
    }
    size_t capacity = 0;
    for (size_t at = 0; at < raw_size;) {
        struct sfs_dirent64 *d = (struct sfs_dirent64 *)(raw + at);
        at += d->d_reclen;
        const char *name = d->d_name;
        if (name[0] == '\0' || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
            continue;
        char kind;
        switch (d->d_type) {
        case DT_REG: kind = 'f'; break;
        case DT_DIR: kind = 'd'; break;
        case DT_LNK: kind = 'l'; break;
        case DT_UNKNOWN: {
            struct stat st;
            if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                if (errno == ENOENT)
                    continue; /* removed meanwhile */
                result = -errno;
                goto done;
            }
            kind = kind_of_mode(st.st_mode);
            break;
        }
        default: kind = 'o'; break;
        }
        if (count == capacity) {
            size_t more = capacity ? capacity * 2 : 256;
            struct sfs_dir_entry *grown = realloc(entries, more * sizeof *entries);
            if (grown == NULL) {
                result = -ENOMEM;
                goto done;
            }
            entries = grown;
            capacity = more;
        }
        size_t length = strlen(name);
        entries[count++] = (struct sfs_dir_entry){name, length, name_prefix(name, length), kind};
        total += length + 2; /* its kind letter, its name and its NUL */
    }
    if (count == 0) {
        result = 0;
        goto done;
    }
    qsort(entries, count, sizeof *entries, compare_entries);
    char *buffer = malloc(total);
    if (buffer == NULL) {
        result = -ENOMEM;
        goto done;
    }
    char *cursor = buffer + count;
    for (size_t i = 0; i < count; i++) {
        buffer[i] = entries[i].kind;
        memcpy(cursor, entries[i].name, entries[i].length + 1);
        cursor += entries[i].length + 1;
    }
    *out = buffer;
    *count_out = (int64_t)count;
    result = (int64_t)total;
done:
    if (lseek(dirfd, 0, SEEK_SET) < 0 && result >= 0) {
        free(*out);
        *out = NULL;
        *count_out = 0;
        result = -errno;
    }
    free(entries);
    free(raw);
    return result;
}

void sfs_free(void *buffer)
{
    free(buffer);
}
