/*
 * cronstable-exec: the small process a job's command is started from.
 *
 *     cronstable-exec REPORT_FD IDS COMMAND [ARG...]
 *
 * Linux charges a process, when it execs, the peak resident size of the memory
 * it had before the exec.  A command spawned straight from the daemon (vfork)
 * would report the daemon's peak as its own maxRss, one spawned by fork the
 * daemon's current size: tens to hundreds of MB for `echo`.  So the daemon
 * execs this program, a few hundred KiB, and this program starts the command:
 * the command's rusage then counts nothing but the command and what it waited
 * for.
 *
 * What happens:
 *  1. Every signal is blocked; SIGHUP, SIGINT, SIGQUIT, SIGTERM and SIGPIPE are
 *     ignored (this process must outlive the command to report on it; it is
 *     not in the command's process group, so the daemon's group signals never
 *     reach it), SIGCHLD is set to its default (wait4 needs it).
 *  2. The command G is started (vfork, or fork when an identity switch is
 *     asked for) in a session of its own.  G takes IDS (setgroups, setregid,
 *     setreuid, in that order), gets back the signal mask and dispositions
 *     this process was started with, and execs COMMAND, searched in PATH as
 *     Python's subprocess does: each entry in turn, the first error other than
 *     ENOENT/ENOTDIR wins, and no /bin/sh retry on ENOEXEC.
 *  3. Lines written to REPORT_FD (a pipe to the daemon):
 *        "started PID"          G runs; PID is its pid, pgid and sid
 *        "failed ERRNO STAGE"   G could not start; STAGE is "exec" (COMMAND
 *                               itself) or "setup" (setsid, ids, fork); then
 *                               this process exits 127
 *        "ended MAXRSS"         G has exited; MAXRSS is its ru_maxrss from
 *                               wait4 (KiB on Linux, bytes on macOS), G and
 *                               the descendants it reaped
 *  4. This process exits as G did: the same exit code, or the same signal
 *     (raised with core dumps off: G dumped its own core if it was to).
 *
 * IDS is "-" (keep this process's ids) or "UID:GID:G1,G2,..." (the list may be
 * empty).  Usage errors exit 126 with a line on stderr.
 *
 * POSIX plus wait4 (Linux, macOS, the BSDs); built when cronstable is installed.
 */

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#define MAX_GROUPS 65536

#if defined(__GNUC__) || defined(__clang__)
#define NOINLINE __attribute__((noinline))
#else
#define NOINLINE
#endif

/* the dispositions this process changes, and gives back to G */
static const int changed[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGPIPE, SIGCHLD};
#define N_CHANGED (sizeof changed / sizeof changed[0])
static struct sigaction original[N_CHANGED];

static int report_fd = -1;

static void report(const char *format, ...) {
    char line[96];
    va_list args;
    va_start(args, format);
    int length = vsnprintf(line, sizeof line, format, args);
    va_end(args);
    if (length < 0 || (size_t)length >= sizeof line) return;
    const char *at = line;
    while (length > 0) {
        ssize_t n = write(report_fd, at, (size_t)length);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return; /* the daemon is gone (EPIPE): nobody to tell */
        at += n;
        length -= (int)n;
    }
}

static _Noreturn void usage(const char *why) {
    static const char text[] = "usage: cronstable-exec REPORT_FD IDS COMMAND [ARG...]: ";
    if (write(2, text, sizeof text - 1) < 0 || write(2, why, strlen(why)) < 0 ||
        write(2, "\n", 1) < 0) {
        /* nothing more to do */
    }
    _exit(126);
}

static int parse_id(const char *text, char **end, unsigned long *out) {
    if (*text < '0' || *text > '9') return -1;
    errno = 0;
    *out = strtoul(text, end, 10);
    return errno != 0 || *out > (unsigned long)UINT_MAX - 1 ? -1 : 0;
}

struct identity {
    int switch_ids;
    uid_t uid;
    gid_t gid;
    int n_groups;
    gid_t *groups;
};

static void parse_identity(const char *text, struct identity *ids) {
    memset(ids, 0, sizeof *ids);
    if (strcmp(text, "-") == 0) return;
    char *end;
    unsigned long value;
    if (parse_id(text, &end, &value) < 0 || *end != ':') usage("bad uid in IDS");
    ids->uid = (uid_t)value;
    if (parse_id(end + 1, &end, &value) < 0 || *end != ':') usage("bad gid in IDS");
    ids->gid = (gid_t)value;
    const char *list = end + 1;
    size_t count = *list ? 1 : 0;
    for (const char *c = list; *c; c++) count += *c == ',';
    if (count > MAX_GROUPS) usage("too many groups in IDS");
    ids->groups = calloc(count ? count : 1, sizeof(gid_t));
    if (ids->groups == NULL) usage("out of memory");
    while (*list) {
        if (parse_id(list, &end, &value) < 0 || (*end != ',' && *end != '\0'))
            usage("bad group in IDS");
        ids->groups[ids->n_groups++] = (gid_t)value;
        list = *end ? end + 1 : end;
    }
    ids->switch_ids = 1;
}

/* Where COMMAND may be, in the order subprocess tries them (built before the fork). */
static char **candidates(const char *command) {
    if (strchr(command, '/') != NULL) {
        char **one = calloc(2, sizeof(char *));
        if (one == NULL) return NULL;
        one[0] = (char *)command;
        return one;
    }
    const char *path = getenv("PATH");
    if (path == NULL) path = "/bin:/usr/bin"; /* os.defpath */
    size_t count = 1;
    for (const char *c = path; *c; c++) count += *c == ':';
    char **list = calloc(count + 1, sizeof(char *));
    if (list == NULL) return NULL;
    size_t n = 0, name = strlen(command);
    const char *start = path;
    for (;;) {
        const char *stop = strchr(start, ':');
        size_t dir = stop ? (size_t)(stop - start) : strlen(start);
        char *full = malloc(dir + name + 2);
        if (full == NULL) return NULL;
        memcpy(full, start, dir);
        size_t at = dir;
        if (dir > 0 && start[dir - 1] != '/') full[at++] = '/'; /* os.path.join */
        memcpy(full + at, command, name + 1);
        list[n++] = full;
        if (stop == NULL) break;
        start = stop + 1;
    }
    return list;
}

/* G, between fork and exec.  Only async-signal-safe calls: under vfork it runs on
   this process's memory, and must neither return nor touch what the parent uses. */
static _Noreturn void start_command(char **argv, char **where, const struct identity *ids,
                          const sigset_t *mask, int error_pipe) {
    int error[2] = {0, 0}; /* errno, stage: 0 setup, 1 exec */
    if (setsid() < 0) goto failed;
    if (ids->switch_ids) {
        if (setgroups((size_t)ids->n_groups, ids->groups) < 0) goto failed;
        if (setregid(ids->gid, ids->gid) < 0) goto failed;
        if (setreuid(ids->uid, ids->uid) < 0) goto failed;
    }
    for (size_t i = 0; i < N_CHANGED; i++) sigaction(changed[i], &original[i], NULL);
    sigprocmask(SIG_SETMASK, mask, NULL);
    error[1] = 1;
    for (size_t i = 0; where[i] != NULL; i++) {
        execv(where[i], argv);
        if (errno != ENOENT && errno != ENOTDIR && error[0] == 0) error[0] = errno;
    }
    if (error[0] != 0) errno = error[0];
failed:
    error[0] = errno;
    while (write(error_pipe, error, sizeof error) < 0 && errno == EINTR) {
    }
    _exit(127);
}

/* G started: vfork (no copy of this process's pages, and it returns once G has
   exec'd), or fork when the ids change (the C library's credential calls may
   coordinate threads through memory that a vfork child shares with its parent).
   A function of its own, so that no variable of the caller lives across vfork. */
static NOINLINE pid_t spawn(char **argv, char **where, const struct identity *ids,
                            const sigset_t *mask, int error_pipe) {
    pid_t pid = ids->switch_ids ? fork() : vfork();
    if (pid == 0) start_command(argv, where, ids, mask, error_pipe);
    return pid;
}

static _Noreturn void exit_as(int status) {
    if (WIFEXITED(status)) _exit(WEXITSTATUS(status));
    if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        struct rlimit core;
        if (getrlimit(RLIMIT_CORE, &core) == 0) {
            core.rlim_cur = 0;
            setrlimit(RLIMIT_CORE, &core);
        }
#ifdef __linux__
        prctl(PR_SET_DUMPABLE, 0, 0, 0, 0); /* no core through a core_pattern pipe either */
#endif
        signal(sig, SIG_DFL);
        sigset_t only;
        sigemptyset(&only);
        sigaddset(&only, sig);
        raise(sig); /* pending while blocked, delivered on the unblock below */
        sigprocmask(SIG_UNBLOCK, &only, NULL);
        _exit(128 + sig); /* a signal that does not kill (cannot happen for a WTERMSIG) */
    }
    _exit(127);
}

int main(int argc, char **argv) {
    if (argc < 4) usage("too few arguments");
    char *end;
    long fd = strtol(argv[1], &end, 10);
    if (*argv[1] == '\0' || *end != '\0' || fd < 3 || fd > INT_MAX) usage("bad REPORT_FD");
    report_fd = (int)fd;
    if (fcntl(report_fd, F_SETFD, FD_CLOEXEC) < 0) usage("REPORT_FD is not open");
    struct identity ids;
    parse_identity(argv[2], &ids);
    char **command = argv + 3;

    sigset_t all, original_mask;
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, &original_mask);
    struct sigaction ignore, fallback;
    memset(&ignore, 0, sizeof ignore);
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    fallback = ignore;
    fallback.sa_handler = SIG_DFL;
    for (size_t i = 0; i < N_CHANGED; i++)
        sigaction(changed[i], changed[i] == SIGCHLD ? &fallback : &ignore, &original[i]);

    char **where = candidates(command[0]);
    int error_pipe[2];
    if (where == NULL) {
        report("failed %d setup\n", ENOMEM);
        _exit(127);
    }
    if (pipe(error_pipe) < 0 || fcntl(error_pipe[0], F_SETFD, FD_CLOEXEC) < 0 ||
        fcntl(error_pipe[1], F_SETFD, FD_CLOEXEC) < 0) {
        report("failed %d setup\n", errno);
        _exit(127);
    }
    pid_t pid = spawn(command, where, &ids, &original_mask, error_pipe[1]);
    if (pid < 0) {
        report("failed %d setup\n", errno);
        _exit(127);
    }
    close(error_pipe[1]);
    int error[2];
    ssize_t got;
    do {
        got = read(error_pipe[0], error, sizeof error);
    } while (got < 0 && errno == EINTR);
    close(error_pipe[0]);
    if (got == (ssize_t)sizeof error) {
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
        }
        report("failed %d %s\n", error[0], error[1] ? "exec" : "setup");
        _exit(127);
    }
    report("started %ld\n", (long)pid);
    /* the job's streams are G's alone: their end of file is G's (and its children's) */
    close(0);
    close(1);
    close(2);

    int status;
    struct rusage usage;
    while (wait4(pid, &status, 0, &usage) < 0) {
        if (errno != EINTR) {
            report("ended -1\n");
            _exit(127);
        }
    }
    report("ended %ld\n", (long)usage.ru_maxrss);
    exit_as(status);
    return 127;
}
