/*
 * cronstable-exec: the small process a job's command is started from.
 *
 *     cronstable-exec REPORT_FD IDS NOFILE COMMAND [ARG...]
 *
 * Linux charges a process, when it execs, the peak resident size of the memory
 * it had before the exec.  A command spawned straight from the daemon (vfork)
 * would report the daemon's peak as its own maxRss, one spawned by fork the
 * daemon's current size: tens to hundreds of MB for `echo`.  So the daemon
 * execs this program, which is tiny, and this program starts the command: the
 * command's rusage then counts nothing but the command and what it waited for.
 *
 * What happens:
 *  0. Every descriptor but 0, 1, 2 and REPORT_FD is closed.  The daemon's own are
 *     close-on-exec, and it spawns this program with posix_spawn, which (unlike
 *     subprocess's close_fds) closes nothing else: one a library left inheritable
 *     must not reach the job.  close_range where the kernel has it (Linux 5.9),
 *     else each entry of /proc/self/fd, else each number below the open-files limit
 *     (CRONSTABLE_EXEC_NO_CLOSE_RANGE builds without the first, for the tests).
 *  1. Every signal is blocked; SIGHUP, SIGINT, SIGQUIT, SIGTERM and SIGPIPE are
 *     ignored (this process must outlive the command to report on it; it is
 *     not in the command's process group, so the run's group signals never
 *     reach it), SIGCHLD is set to its default (wait4 needs it).
 *  2. The command G is forked in a session of its own.  G lowers its soft
 *     open-files limit to NOFILE (the daemon raises its own to the hard limit,
 *     which its jobs should not inherit), takes IDS
 *     (setgroups, setregid, setreuid, in that order), gets back the signal mask
 *     and dispositions this process was started with, and execs COMMAND,
 *     searched in PATH as Python's subprocess does: each entry in turn, the
 *     first error other than ENOENT/ENOTDIR wins, no /bin/sh retry on ENOEXEC.
 *  3. Lines written to REPORT_FD (a pipe to the daemon):
 *        "started PID [TICKS]"  G runs; PID is its pid, pgid and sid, TICKS when
 *                               it started in clock ticks since boot (field 22 of
 *                               /proc/PID/stat, Linux), so that the daemon can tell
 *                               it from a later process given the same pid without
 *                               reading the file itself (absent without /proc)
 *        "failed ERRNO STAGE"   G could not start; STAGE is "exec" (COMMAND
 *                               itself) or "setup" (setsid, the limit, ids, fork); then
 *                               this process exits 127
 *        "ended MAXRSS"         G has exited; MAXRSS is its ru_maxrss from
 *                               wait4 (KiB on Linux, bytes on macOS), G and
 *                               the descendants it reaped
 *  4. This process exits as G did: the same exit code, or the same signal
 *     (raised with core dumps off: G dumped its own core if it was to).
 *
 * IDS is "-" (keep this process's ids) or "UID:GID:G1,G2,..." (the list may be
 * empty).  NOFILE is "-" (keep the limit) or a number (never above the hard
 * limit).  Usage errors exit 126 with a line on stderr.
 *
 * Two builds of the same logic, chosen when cronstable is installed (setup.py):
 *  - CRONSTABLE_EXEC_RAW, Linux on x86_64 and aarch64: no C library, system
 *    calls made directly.  The C library's start-up (CPU feature probing with
 *    cpuid, which traps under a hypervisor) costs more than the rest of this
 *    program, on every job start.
 *  - otherwise POSIX through the C library (plus wait4: Linux, macOS, the BSDs).
 */

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#define NORETURN _Noreturn

/* ------------------------------------------------------------------ the system layer
   Every call returns what the system call does: >= 0, or -errno. */

#ifdef CRONSTABLE_EXEC_RAW

#if !defined(__linux__) || !(defined(__x86_64__) || defined(__aarch64__))
#error "the raw build is for Linux on x86_64 or aarch64"
#endif
#include <sys/syscall.h>

static long sys6(long n, long a, long b, long c, long d, long e) {
#if defined(__x86_64__)
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    long ret;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8)
                     : "rcx", "r11", "memory");
    return ret;
#else
    register long x8 __asm__("x8") = n;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    register long x2 __asm__("x2") = c;
    register long x3 __asm__("x3") = d;
    register long x4 __asm__("x4") = e;
    __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4) : "memory", "cc");
    return x0;
#endif
}
#define SYS(n, a, b, c, d, e) sys6((n), (long)(a), (long)(b), (long)(c), (long)(d), (long)(e))

/* the compiler may emit calls to these for plain loops and copies */
void *memset(void *to, int byte, size_t size);
void *memcpy(void *to, const void *from, size_t size);
void *memset(void *to, int byte, size_t size) {
    volatile unsigned char *at = to;
    while (size--) *at++ = (unsigned char)byte;
    return to;
}
void *memcpy(void *to, const void *from, size_t size) {
    volatile unsigned char *at = to;
    const unsigned char *source = from;
    while (size--) *at++ = *source++;
    return to;
}

static long x_write(int fd, const void *data, size_t size) { return SYS(SYS_write, fd, data, size, 0, 0); }
static long x_read(int fd, void *data, size_t size) { return SYS(SYS_read, fd, data, size, 0, 0); }
static long x_close(int fd) { return SYS(SYS_close, fd, 0, 0, 0, 0); }
static long x_cloexec(int fd) { return SYS(SYS_fcntl, fd, F_SETFD, FD_CLOEXEC, 0, 0); }
static long x_pipe_cloexec(int fds[2]) { return SYS(SYS_pipe2, fds, O_CLOEXEC, 0, 0, 0); }
static long x_fork(void) { return SYS(SYS_clone, SIGCHLD, 0, 0, 0, 0); }
static long x_execve(const char *path, char **argv, char **envp) {
    return SYS(SYS_execve, path, argv, envp, 0, 0);
}
static long x_wait4(long pid, int *status, struct rusage *usage) {
    return SYS(SYS_wait4, pid, status, 0, usage, 0);
}
static long x_setsid(void) { return SYS(SYS_setsid, 0, 0, 0, 0, 0); }
static long x_setgroups(size_t count, const gid_t *groups) {
    return SYS(SYS_setgroups, count, groups, 0, 0, 0);
}
static long x_setregid(gid_t gid) { return SYS(SYS_setregid, gid, gid, 0, 0, 0); }
static long x_setreuid(uid_t uid) { return SYS(SYS_setreuid, uid, uid, 0, 0, 0); }
static NORETURN void x_exit(int code) {
    for (;;) SYS(SYS_exit_group, code, 0, 0, 0, 0);
}
static long x_raise(int sig) { return SYS(SYS_kill, SYS(SYS_getpid, 0, 0, 0, 0, 0), sig, 0, 0, 0); }
#ifndef SYS_close_range
#define SYS_close_range 436 /* the same number on x86_64 and aarch64 */
#endif
__attribute__((unused)) static long x_close_range(unsigned int first, unsigned int last) {
    return SYS(SYS_close_range, first, last, 0, 0, 0);
}
#define X_PROC_FDS 1
static long x_open_dir(const char *path) {
    return SYS(SYS_openat, AT_FDCWD, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0, 0);
}
static long x_open_read(const char *path) {
    return SYS(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC, 0, 0);
}
static long x_entries(int fd, void *buffer, size_t size) {
    return SYS(SYS_getdents64, fd, buffer, size, 0, 0);
}
static long x_get_limit(int resource, struct rlimit *limit) {
    return SYS(SYS_prlimit64, 0, resource, 0, limit, 0);
}
static long x_set_limit(int resource, const struct rlimit *limit) {
    return SYS(SYS_prlimit64, 0, resource, limit, 0, 0);
}
static void x_no_core(void) {
    struct rlimit limit;
    if (SYS(SYS_prlimit64, 0, RLIMIT_CORE, 0, &limit, 0) == 0) {
        limit.rlim_cur = 0;
        SYS(SYS_prlimit64, 0, RLIMIT_CORE, &limit, 0, 0);
    }
    SYS(SYS_prctl, PR_SET_DUMPABLE, 0, 0, 0, 0); /* no core through a core_pattern pipe */
}

/* the kernel's signal mask and sigaction (the same on x86_64 and aarch64) */
typedef unsigned long x_mask;
typedef struct {
    unsigned long handler, flags, restorer, mask;
} x_action;
#define KERNEL_SIGSET_SIZE 8
static long x_block_all(x_mask *old) {
    x_mask all = ~0UL;
    return SYS(SYS_rt_sigprocmask, SIG_SETMASK, &all, old, KERNEL_SIGSET_SIZE, 0);
}
static long x_set_mask(const x_mask *mask) {
    return SYS(SYS_rt_sigprocmask, SIG_SETMASK, mask, 0, KERNEL_SIGSET_SIZE, 0);
}
static long x_unblock(int sig) {
    x_mask one = 1UL << (sig - 1);
    return SYS(SYS_rt_sigprocmask, SIG_UNBLOCK, &one, 0, KERNEL_SIGSET_SIZE, 0);
}
static long x_set_action(int sig, int ignore, x_action *old) {
    x_action action = {ignore ? 1UL : 0UL, 0, 0, 0}; /* SIG_IGN, SIG_DFL */
    return SYS(SYS_rt_sigaction, sig, &action, old, KERNEL_SIGSET_SIZE, 0);
}
static long x_restore_action(int sig, const x_action *action) {
    return SYS(SYS_rt_sigaction, sig, action, 0, KERNEL_SIGSET_SIZE, 0);
}

int main(int argc, char **argv, char **envp);
__attribute__((used)) static NORETURN void start(long *stack) {
    int argc = (int)stack[0];
    char **argv = (char **)(stack + 1);
    x_exit(main(argc, argv, argv + argc + 1));
}
#if defined(__x86_64__)
__asm__(".text\n.globl _start\n_start:\n"
        "  xor %rbp, %rbp\n  mov %rsp, %rdi\n  and $-16, %rsp\n  call start\n  hlt\n");
#else
__asm__(".text\n.globl _start\n_start:\n"
        "  mov x29, #0\n  mov x30, #0\n  mov x0, sp\n  and x1, x0, #-16\n  mov sp, x1\n"
        "  bl start\n  brk #0\n");
#endif

#else /* the C library */

#include <grp.h>
#include <string.h>
#include <unistd.h>

static long result(long value) { return value < 0 ? -errno : value; }
static long x_write(int fd, const void *data, size_t size) { return result(write(fd, data, size)); }
static long x_read(int fd, void *data, size_t size) { return result(read(fd, data, size)); }
static long x_close(int fd) { return result(close(fd)); }
static long x_cloexec(int fd) { return result(fcntl(fd, F_SETFD, FD_CLOEXEC)); }
static long x_pipe_cloexec(int fds[2]) {
    if (pipe(fds) < 0) return -errno;
    if (x_cloexec(fds[0]) < 0 || x_cloexec(fds[1]) < 0) return -errno;
    return 0;
}
static long x_fork(void) { return result(fork()); }
static long x_execve(const char *path, char **argv, char **envp) {
    return result(execve(path, argv, envp));
}
static long x_wait4(long pid, int *status, struct rusage *usage) {
    return result(wait4((pid_t)pid, status, 0, usage));
}
static long x_setsid(void) { return result(setsid()); }
static long x_setgroups(size_t count, const gid_t *groups) {
    return result(setgroups((int)count, groups));
}
static long x_setregid(gid_t gid) { return result(setregid(gid, gid)); }
static long x_setreuid(uid_t uid) { return result(setreuid(uid, uid)); }
static NORETURN void x_exit(int code) { _exit(code); }
static long x_raise(int sig) { return result(kill(getpid(), sig)); }
#if defined(__linux__)
#include <sys/syscall.h>
#endif
__attribute__((unused)) static long x_close_range(unsigned int first, unsigned int last) {
#if defined(__linux__) && defined(SYS_close_range)
    return result(syscall(SYS_close_range, first, last, 0));
#else
    (void)first;
    (void)last;
    return -ENOSYS;
#endif
}
#if defined(__linux__) && defined(SYS_getdents64)
#define X_PROC_FDS 1
static long x_open_dir(const char *path) {
    return result(open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
}
static long x_open_read(const char *path) { return result(open(path, O_RDONLY | O_CLOEXEC)); }
static long x_entries(int fd, void *buffer, size_t size) {
    return result(syscall(SYS_getdents64, fd, buffer, size));
}
#endif
static long x_get_limit(int resource, struct rlimit *limit) {
    return result(getrlimit(resource, limit));
}
static long x_set_limit(int resource, const struct rlimit *limit) {
    return result(setrlimit(resource, limit));
}
static void x_no_core(void) {
    struct rlimit limit;
    if (getrlimit(RLIMIT_CORE, &limit) == 0) {
        limit.rlim_cur = 0;
        setrlimit(RLIMIT_CORE, &limit);
    }
#ifdef __linux__
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0); /* no core through a core_pattern pipe */
#endif
}

typedef sigset_t x_mask;
typedef struct sigaction x_action;
static long x_block_all(x_mask *old) {
    sigset_t all;
    sigfillset(&all);
    return result(sigprocmask(SIG_SETMASK, &all, old));
}
static long x_set_mask(const x_mask *mask) { return result(sigprocmask(SIG_SETMASK, mask, NULL)); }
static long x_unblock(int sig) {
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    return result(sigprocmask(SIG_UNBLOCK, &one, NULL));
}
static long x_set_action(int sig, int ignore, x_action *old) {
    struct sigaction action;
    action.sa_handler = ignore ? SIG_IGN : SIG_DFL;
    action.sa_flags = 0;
    sigemptyset(&action.sa_mask);
    return result(sigaction(sig, &action, old));
}
static long x_restore_action(int sig, const x_action *action) {
    return result(sigaction(sig, action, NULL));
}

#endif

/* ------------------------------------------------------------------ the shim */

#define MAX_GROUPS 65536

/* the dispositions this process changes, and gives back to G */
static const int changed[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGPIPE, SIGCHLD};
#define N_CHANGED (sizeof changed / sizeof changed[0])
static x_action original[N_CHANGED];
static x_mask original_mask;

static int report_fd = -1;
static int set_nofile;
static unsigned long nofile;
static int switch_ids;
static uid_t uid;
static gid_t gid;
static size_t n_groups;
static gid_t groups[MAX_GROUPS];
static char candidate[PATH_MAX + 1];

static size_t length(const char *text) {
    size_t n = 0;
    while (text[n]) n++;
    return n;
}

static void put(char **at, const char *text) {
    while (*text) *(*at)++ = *text++;
}

static void put_number(char **at, long value) {
    char digits[24];
    int n = 0;
    unsigned long magnitude = value < 0 ? 0UL - (unsigned long)value : (unsigned long)value;
    do {
        digits[n++] = (char)('0' + magnitude % 10);
        magnitude /= 10;
    } while (magnitude);
    if (value < 0) *(*at)++ = '-';
    while (n) *(*at)++ = digits[--n];
}

/* one line to the daemon: WORD NUMBER [WORD2] [NUMBER2, when not negative] */
static void report_line(const char *word, long number, const char *word2, long number2) {
    char line[96];
    char *at = line;
    put(&at, word);
    *at++ = ' ';
    put_number(&at, number);
    if (word2) {
        *at++ = ' ';
        put(&at, word2);
    }
    if (number2 >= 0) {
        *at++ = ' ';
        put_number(&at, number2);
    }
    *at++ = '\n';
    const char *from = line;
    while (from < at) {
        long n = x_write(report_fd, from, (size_t)(at - from));
        if (n == -EINTR) continue;
        if (n <= 0) return; /* the daemon is gone (EPIPE): nobody to tell */
        from += n;
    }
}

static void report(const char *word, long number, const char *word2) {
    report_line(word, number, word2, -1);
}

static long parse_number(const char **text, unsigned long limit);

/* when PID started, in clock ticks since boot (/proc/PID/stat field 22); -1 if unknown.
   G is this process's child and not yet waited for: its entry is there, a zombie's too */
static long start_ticks(long pid) {
#ifdef X_PROC_FDS
    char path[40];
    char *at = path;
    put(&at, "/proc/");
    put_number(&at, pid);
    put(&at, "/stat");
    *at = '\0';
    long fd = x_open_read(path);
    if (fd < 0) return -1;
    /* pid, (comm: 16 bytes at most, may hold spaces and parentheses), then 50 numbers */
    static char stat[1024];
    long got = 0, n;
    while (got < (long)sizeof stat - 1 &&
           (n = x_read((int)fd, stat + got, sizeof stat - 1 - (size_t)got)) != 0) {
        if (n == -EINTR) continue;
        if (n < 0) break;
        got += n;
    }
    x_close((int)fd);
    const char *close_paren = NULL;
    for (long i = 0; i < got; i++)
        if (stat[i] == ')') close_paren = stat + i;
    if (!close_paren) return -1;
    stat[got] = '\0';
    const char *field = close_paren + 1; /* " S ppid ...": field 3 is the first after it */
    for (int number = 3; number < 22; number++) {
        while (*field == ' ') field++;
        while (*field && *field != ' ') field++;
    }
    while (*field == ' ') field++;
    return parse_number(&field, 0x7fffffffffffffffUL);
#else
    (void)pid;
    return -1;
#endif
}

static NORETURN void usage(const char *why) {
    static const char text[] = "usage: cronstable-exec REPORT_FD IDS NOFILE COMMAND [ARG...]: ";
    x_write(2, text, sizeof text - 1);
    x_write(2, why, length(why));
    x_write(2, "\n", 1);
    x_exit(126);
}

/* a decimal below LIMIT at *text; *text moves past it; -1 if there is none */
static long parse_number(const char **text, unsigned long limit) {
    const char *at = *text;
    unsigned long value = 0;
    if (*at < '0' || *at > '9') return -1;
    while (*at >= '0' && *at <= '9') {
        value = value * 10 + (unsigned long)(*at++ - '0');
        if (value >= limit) return -1;
    }
    *text = at;
    return (long)value;
}

/* close [first, last]: close_range, else /proc/self/fd's entries, else every number up to
   the open-files limit (the slow way, for kernels before 5.9 without /proc) */
static void close_span(unsigned int first, unsigned int last) {
    if (first > last) return;
#ifndef CRONSTABLE_EXEC_NO_CLOSE_RANGE /* the tests' build of the other ways */
    if (x_close_range(first, last) == 0) return;
#endif
#ifdef X_PROC_FDS
    long dir = x_open_dir("/proc/self/fd");
    if (dir >= 0) {
        /* struct linux_dirent64: ino (8), off (8), reclen (2), type (1), name */
        static char entries[4096] __attribute__((aligned(8)));
        long got;
        while ((got = x_entries((int)dir, entries, sizeof entries)) > 0) {
            for (long at = 0; at < got;) {
                unsigned short reclen;
                memcpy(&reclen, entries + at + 16, sizeof reclen);
                const char *name = entries + at + 19;
                long fd = parse_number(&name, 0x7fffffffUL);
                if (fd >= 0 && *name == '\0' && fd != dir && (unsigned long)fd >= first &&
                    (unsigned long)fd <= last)
                    x_close((int)fd);
                at += reclen;
            }
        }
        x_close((int)dir);
        return;
    }
#endif
    struct rlimit limit;
    unsigned long top = 65536;
    if (x_get_limit(RLIMIT_NOFILE, &limit) == 0 && (unsigned long)limit.rlim_cur < top)
        top = (unsigned long)limit.rlim_cur;
    for (unsigned long fd = first; fd <= last && fd < top; fd++) x_close((int)fd);
}

static void close_inherited(void) {
    if (report_fd > 3) close_span(3, (unsigned int)report_fd - 1);
    close_span((unsigned int)report_fd + 1, ~0U);
}

static void parse_identity(const char *text) {
    if (text[0] == '-' && text[1] == '\0') return;
    const unsigned long id_limit = 0xffffffffUL; /* (uid_t)-1 means "unchanged" */
    long value = parse_number(&text, id_limit);
    if (value < 0 || *text++ != ':') usage("bad uid in IDS");
    uid = (uid_t)value;
    value = parse_number(&text, id_limit);
    if (value < 0 || *text++ != ':') usage("bad gid in IDS");
    gid = (gid_t)value;
    while (*text) {
        value = parse_number(&text, id_limit);
        if (value < 0 || (*text != ',' && *text != '\0')) usage("bad group in IDS");
        if (n_groups == MAX_GROUPS) usage("too many groups in IDS");
        groups[n_groups++] = (gid_t)value;
        if (*text == ',') text++;
    }
    switch_ids = 1;
}

static void parse_nofile(const char *text) {
    if (text[0] == '-' && text[1] == '\0') return;
    long value = parse_number(&text, 0x7fffffffUL);
    if (value < 0 || *text != '\0') usage("bad NOFILE");
    nofile = (unsigned long)value;
    set_nofile = 1;
}

/* the soft open-files limit back to NOFILE (lowering a soft limit is always allowed) */
static long lower_nofile(void) {
    if (!set_nofile) return 0;
    struct rlimit limit;
    long failed = x_get_limit(RLIMIT_NOFILE, &limit);
    if (failed < 0) return failed;
    if ((unsigned long)limit.rlim_cur <= nofile) return 0;
    limit.rlim_cur = nofile < (unsigned long)limit.rlim_max ? nofile : limit.rlim_max;
    return x_set_limit(RLIMIT_NOFILE, &limit);
}

static const char *find_path(char **envp) {
    for (char **entry = envp; *entry; entry++) {
        const char *at = *entry;
        if (at[0] == 'P' && at[1] == 'A' && at[2] == 'T' && at[3] == 'H' && at[4] == '=')
            return at + 5;
    }
    return "/bin:/usr/bin"; /* os.defpath */
}

/* exec COMMAND as subprocess does: as given when it holds a '/', else each PATH entry
   joined to it (os.path.join: an empty entry is the current directory); the first
   error other than ENOENT/ENOTDIR is the answer, else the last */
static long exec_command(char **argv, char **envp) {
    const char *name = argv[0];
    size_t name_length = length(name);
    for (const char *c = name; *c; c++)
        if (*c == '/') return x_execve(name, argv, envp);
    long first = 0, last = -ENOENT;
    const char *dir = find_path(envp);
    for (;;) {
        const char *stop = dir;
        while (*stop && *stop != ':') stop++;
        size_t dir_length = (size_t)(stop - dir);
        int slash = dir_length > 0 && dir[dir_length - 1] != '/';
        if (dir_length + (size_t)slash + name_length > PATH_MAX) {
            last = -ENAMETOOLONG;
        } else {
            char *at = candidate;
            for (size_t i = 0; i < dir_length; i++) *at++ = dir[i];
            if (slash) *at++ = '/';
            put(&at, name);
            *at = '\0';
            last = x_execve(candidate, argv, envp);
        }
        if (last != -ENOENT && last != -ENOTDIR && first == 0) first = last;
        if (*stop == '\0') break;
        dir = stop + 1;
    }
    return first ? first : last;
}

/* G, between fork and exec */
static NORETURN void start_command(char **argv, char **envp, int error_pipe) {
    int error[2] = {0, 0}; /* errno, stage: 0 setup, 1 exec */
    long failed = x_setsid();
    if (failed >= 0) failed = lower_nofile();
    if (failed >= 0 && switch_ids) {
        failed = x_setgroups(n_groups, groups);
        if (failed >= 0) failed = x_setregid(gid);
        if (failed >= 0) failed = x_setreuid(uid);
    }
    if (failed >= 0) {
        for (size_t i = 0; i < N_CHANGED; i++) x_restore_action(changed[i], &original[i]);
        x_set_mask(&original_mask);
        error[1] = 1;
        failed = exec_command(argv, envp);
    }
    error[0] = (int)-failed;
    while (x_write(error_pipe, error, sizeof error) == -EINTR) {
    }
    x_exit(127);
}

static NORETURN void exit_as(int status) {
    if (WIFEXITED(status)) x_exit(WEXITSTATUS(status));
    if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        x_no_core();
        x_action ignored;
        x_set_action(sig, 0, &ignored); /* its default action */
        x_raise(sig);                   /* pending while blocked, delivered on the unblock */
        x_unblock(sig);
        x_exit(128 + sig); /* a signal that does not kill (cannot happen for a WTERMSIG) */
    }
    x_exit(127);
}

int main(int argc, char **argv, char **envp) {
    if (argc < 5) usage("too few arguments");
    const char *fd_text = argv[1];
    long fd = parse_number(&fd_text, (unsigned long)INT_MAX);
    if (fd < 3 || *fd_text != '\0') usage("bad REPORT_FD");
    report_fd = (int)fd;
    if (x_cloexec(report_fd) < 0) usage("REPORT_FD is not open");
    close_inherited();
    parse_identity(argv[2]);
    parse_nofile(argv[3]);
    char **command = argv + 4;

    x_block_all(&original_mask);
    for (size_t i = 0; i < N_CHANGED; i++)
        x_set_action(changed[i], changed[i] != SIGCHLD, &original[i]);

    int error_pipe[2];
    long pid = x_pipe_cloexec(error_pipe);
    if (pid >= 0) pid = x_fork();
    if (pid == 0) start_command(command, envp, error_pipe[1]);
    if (pid < 0) {
        report("failed", -pid, "setup");
        x_exit(127);
    }
    x_close(error_pipe[1]);
    int error[2];
    long got;
    while ((got = x_read(error_pipe[0], error, sizeof error)) == -EINTR) {
    }
    x_close(error_pipe[0]);
    int status;
    struct rusage usage;
    if (got == (long)sizeof error) {
        while (x_wait4(pid, &status, &usage) == -EINTR) {
        }
        report("failed", error[0], error[1] ? "exec" : "setup");
        x_exit(127);
    }
    report_line("started", pid, NULL, start_ticks(pid));
    /* the job's streams are G's alone: their end of file is G's (and its children's) */
    x_close(0);
    x_close(1);
    x_close(2);

    long waited;
    while ((waited = x_wait4(pid, &status, &usage)) == -EINTR) {
    }
    if (waited < 0) {
        report("ended", -1, NULL);
        x_exit(127);
    }
    report("ended", usage.ru_maxrss, NULL);
    exit_as(status);
}
