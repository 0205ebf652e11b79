/* sandboxfs native shim, seccomp part: see seccomp.h.  No policy here. */
#define _GNU_SOURCE
#include "seccomp.h"

#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The layouts we hand the kernel must be its own. */
_Static_assert(sizeof(struct sfs_sock_filter) == sizeof(struct sock_filter),
               "struct sfs_sock_filter is struct sock_filter");
_Static_assert(offsetof(struct sfs_sock_filter, k) == offsetof(struct sock_filter, k),
               "struct sfs_sock_filter is struct sock_filter");
_Static_assert(SFS_SECCOMP_FILTER_FLAG_TSYNC == SECCOMP_FILTER_FLAG_TSYNC, "TSYNC flag");

uint32_t sfs_seccomp_arch(void)
{
#if defined(__x86_64__) && defined(__ILP32__)
    return 0; /* x32 user space: not supported */
#elif defined(__x86_64__)
    return AUDIT_ARCH_X86_64;
#elif defined(__aarch64__) && !defined(__AARCH64EB__)
    return AUDIT_ARCH_AARCH64;
#elif defined(__riscv) && __riscv_xlen == 64
    return AUDIT_ARCH_RISCV64;
#elif defined(__powerpc64__) && defined(__LITTLE_ENDIAN__)
    return AUDIT_ARCH_PPC64LE;
#elif defined(__s390x__)
    return AUDIT_ARCH_S390X;
#else
    return 0;
#endif
}

uint32_t sfs_seccomp_x32_bit(void)
{
#if defined(__x86_64__)
    return 0x40000000u; /* __X32_SYSCALL_BIT */
#else
    return 0;
#endif
}

int sfs_seccomp_install(const struct sfs_sock_filter *filter, uint16_t len, unsigned int flags)
{
    struct sock_fprog prog;
    memset(&prog, 0, sizeof prog);
    prog.len = len;
    prog.filter = (struct sock_filter *)filter;
    long rc = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &prog);
    return rc < 0 ? -errno : (int)rc;
}

int sfs_seccomp_action_available(uint32_t action)
{
    long rc = syscall(SYS_seccomp, SECCOMP_GET_ACTION_AVAIL, 0, &action);
    return rc < 0 ? -errno : (int)rc;
}
