/*
 * sandboxfs native shim, seccomp part: installing a classic BPF program as a
 * seccomp filter, and the two facts of this build a filter must be written
 * against (the architecture's AUDIT_ARCH value and its syscall numbers).
 *
 * Policy-free like the rest of the shim: which syscalls a filter allows or
 * denies, and how, is decided in Python (sandboxfs/core/seccomp.py), which
 * assembles the program; this file only looks numbers up and makes the call.
 */
#ifndef SANDBOXFS_SECCOMP_H
#define SANDBOXFS_SECCOMP_H

#include <stdint.h>

/* One BPF instruction: the kernel's struct sock_filter (linux/filter.h), same layout. */
struct sfs_sock_filter {
    uint16_t code;
    uint8_t jt;
    uint8_t jf;
    uint32_t k;
};

/* seccomp(2) filter flags (linux/seccomp.h). */
#define SFS_SECCOMP_FILTER_FLAG_TSYNC 0x1

/* The AUDIT_ARCH_* value (linux/audit.h) of the architecture this shim was built
 * for, as seccomp_data.arch reports it; 0 if this build does not know it. */
uint32_t sfs_seccomp_arch(void);

/* The bit the x86_64 kernel sets in the numbers of its x32 syscalls, 0 elsewhere. */
uint32_t sfs_seccomp_x32_bit(void);

/* The number of the syscall called `name` on this architecture (>= 0); -2 if the
 * architecture has no such call; -1 if the name is not in native/syscalls.txt (the
 * table is generated from that list by build_native.py, from <sys/syscall.h>). */
int sfs_syscall_number(const char *name);

/* seccomp(SECCOMP_SET_MODE_FILTER, flags, {len, filter}): 0, or with TSYNC the id
 * of a thread that could not be synchronized (> 0), or -errno. */
int sfs_seccomp_install(const struct sfs_sock_filter *filter, uint16_t len, unsigned int flags);

/* seccomp(SECCOMP_GET_ACTION_AVAIL, 0, &action): 0 if the kernel can filter with
 * this return action, or -errno (ENOSYS, EINVAL: seccomp filters are unavailable). */
int sfs_seccomp_action_available(uint32_t action);

#endif
