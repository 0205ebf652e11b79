/*
 * sandboxfs native shim: thin wrappers over Linux syscalls that the Python
 * standard library does not expose.
 *
 * Policy-free by design: each function makes one syscall, forces O_CLOEXEC
 * where a descriptor is created, and returns -errno on failure.  All policy
 * (which flags, which paths) lives in Python, in sandboxfs/core/chokepoint.py.
 *
 * The struct layouts below are our own, flat and packed-free, so that cffi
 * can describe them; the .c file copies to and from the kernel's layouts.
 */
#ifndef SANDBOXFS_SFS_H
#define SANDBOXFS_SFS_H

#include <stdint.h>

/* openat2(2) resolve flags (linux/openat2.h). */
#define SFS_RESOLVE_NO_XDEV 0x01
#define SFS_RESOLVE_NO_MAGICLINKS 0x02
#define SFS_RESOLVE_NO_SYMLINKS 0x04
#define SFS_RESOLVE_BENEATH 0x08
#define SFS_RESOLVE_IN_ROOT 0x10

/* renameat2(2) flags (linux/fs.h). */
#define SFS_RENAME_NOREPLACE 0x1
#define SFS_RENAME_EXCHANGE 0x2

/* fallocate(2) modes (linux/falloc.h). */
#define SFS_FALLOC_FL_KEEP_SIZE 0x01

/* statx(2) masks we ask for (linux/stat.h). */
#define SFS_STATX_BASIC_STATS 0x7ff
#define SFS_STATX_BTIME 0x800

/* Landlock (linux/landlock.h). */
#define SFS_LANDLOCK_CREATE_RULESET_VERSION 0x1
#define SFS_LANDLOCK_RULE_PATH_BENEATH 1
#define SFS_LANDLOCK_RULE_NET_PORT 2

/* Filesystem magic numbers (linux/magic.h) the resolver cares about. */
#define SFS_PROC_SUPER_MAGIC 0x9fa0

struct sfs_statx {
    uint32_t mask;
    uint32_t mode;
    uint32_t nlink;
    uint32_t uid;
    uint32_t gid;
    uint64_t ino;
    uint64_t size;
    uint64_t blocks;
    uint64_t attributes;
    int64_t atime_sec;
    uint32_t atime_nsec;
    int64_t btime_sec;
    uint32_t btime_nsec;
    int64_t ctime_sec;
    uint32_t ctime_nsec;
    int64_t mtime_sec;
    uint32_t mtime_nsec;
    uint32_t dev_major;
    uint32_t dev_minor;
};

/* openat2(dirfd, path, {flags | O_CLOEXEC, mode, resolve}): a new fd or -errno. */
int sfs_openat2(int dirfd, const char *path, uint64_t flags, uint64_t mode, uint64_t resolve);

/* renameat2(olddirfd, oldpath, newdirfd, newpath, flags): 0 or -errno. */
int sfs_renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath,
                  unsigned int flags);

/* linkat(fd, "", newdirfd, newpath, AT_EMPTY_PATH): gives an O_TMPFILE a name. 0 or -errno. */
int sfs_link_fd(int fd, int newdirfd, const char *newpath);

/* statx(dirfd, path, flags, mask) flattened into *out: 0 or -errno. */
int sfs_statx(int dirfd, const char *path, int flags, unsigned int mask, struct sfs_statx *out);

/* fallocate(fd, mode, offset, len): 0 or -errno. */
int sfs_fallocate(int fd, int mode, int64_t offset, int64_t len);

/* fstatfs(fd).f_type: the filesystem magic (>= 0) or -errno. */
int64_t sfs_fstatfs_type(int fd);

/* landlock_create_ruleset(NULL, 0, VERSION): the Landlock ABI version or -errno. */
int sfs_landlock_abi_version(void);

/* landlock_create_ruleset with the given handled rights: a ruleset fd or -errno. */
int sfs_landlock_create_ruleset(uint64_t handled_access_fs, uint64_t handled_access_net,
                                uint64_t scoped);

/* landlock_add_rule(PATH_BENEATH, {allowed_access, parent_fd}): 0 or -errno. */
int sfs_landlock_add_path_rule(int ruleset_fd, uint64_t allowed_access, int parent_fd);

/* landlock_add_rule(NET_PORT, {allowed_access, port}): 0 or -errno. */
int sfs_landlock_add_net_rule(int ruleset_fd, uint64_t allowed_access, uint64_t port);

/* prctl(PR_SET_NO_NEW_PRIVS, 1): required before an unprivileged restrict_self. 0 or -errno. */
int sfs_set_no_new_privs(void);

/* landlock_restrict_self(ruleset_fd, 0): confines the calling thread and its future
 * children. 0 or -errno. */
int sfs_landlock_restrict_self(int ruleset_fd);

/* mallopt(M_MMAP_THRESHOLD, bytes): allocations of at least `bytes` are mapped on
 * their own and returned to the kernel when freed (a fixed threshold also stops glibc
 * from raising it after each big free). 0, or -EINVAL if the C library refused. */
int sfs_set_mmap_threshold(int bytes);

/* Every entry of the directory open at `dirfd` except "." and "..", read from its
 * start (the descriptor's offset is rewound before and after), sorted by the bytes
 * of their names (strcmp order), as one buffer: first one kind letter per entry,
 * then each name followed by a NUL.  The kind is 'f' (regular file), 'd'
 * (directory), 'l' (symlink) or 'o' (anything else), from the type the directory
 * records, or from fstatat(AT_SYMLINK_NOFOLLOW) of that one leaf name where the
 * filesystem records none; an entry removed meanwhile is left out.  Nothing is
 * opened or followed.  On success *count is the number of entries, *out holds a
 * malloc'ed buffer (free it with sfs_free) and the result is its length (0, with
 * *out NULL, for an empty directory); on failure -errno, and *out is NULL. */
int64_t sfs_read_dir(int dirfd, char **out, int64_t *count);

/* free(3) of a buffer this shim allocated. */
void sfs_free(void *buffer);

#endif
