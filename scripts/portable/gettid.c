/* Linked into every program and plugin built for glibc 2.28 (scripts/build-portable).
 * Rust's standard library refers to gettid() weakly and falls back to the raw system call
 * where the C library lacks it (glibc added it in 2.30); the linker that targets 2.28 still
 * refuses the weak reference, so this defines it, hidden, as that same system call. */
#define _GNU_SOURCE
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

__attribute__((visibility("hidden"))) pid_t gettid(void) { return (pid_t)syscall(SYS_gettid); }
