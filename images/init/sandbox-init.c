/*
 * sandbox-init: the first process of a pre-started (pooled) sandbox. Security code: keep it this small.
 *
 * A pooled sandbox is created and started with every setting of its profile (user, capabilities,
 * seccomp, rlimits, mounts, no network: all set by the engine before this runs) and this program as its
 * command. It waits for ONE launch message on its stdin -- Docker: the engine's attach stream, opened by
 * the orchestrator before the container started; Kubernetes: a named pipe whose writer the orchestrator
 * exec'd in the pod's sidecar (nothing else runs in the pod before the launch) -- then applies it and execs
 * the command, which replaces it as PID 1 in a container no one has used -- or, with a status channel
 * (below), forks it and stays PID 1 to report its end. It reads no byte past the message (what follows on
 * stdin is the command's own input) and opens no file but /dev/null and, to report, its cgroup's counters.
 *
 * The message: the 4 bytes "SBX3", the payload's length (4 bytes, big-endian, at most MAX_PAYLOAD), then
 * the payload: NUL-terminated strings, nothing after the last one:
 *     report   "" or REPORT_LEN lowercase hex digits: a token fresh for this launch (see below)
 *     status   "" (exec the command: it replaces this process) or "3" (supervise it and report its end on
 *              descriptor 3: see "The status channel" below; needs a report token and PID 1)
 *     stdin    "stdin" (the command reads the rest of this stream) or "null" (it reads /dev/null)
 *     cwd      the working directory, absolute
 *     argc     decimal, 1..MAX_ITEMS, then that many arguments (the first names the program, found
 *              in the message's PATH like the engine's runtime would, never run through a shell)
 *     envc     decimal, 0..MAX_ITEMS, then that many "NAME=value", set over the environment the engine
 *              gave this process (the image's, HOSTNAME, HOME: the container was created with no
 *              variables of its own), so the command's is what a container created with them has
 *
 * Exit statuses when the command never ran: 125 a bad or missing message, or a working directory that
 * cannot be entered; 126 the program cannot be executed; 127 it was not found (as a shell says). The
 * reason goes to stderr as one line, "sandbox-init: <reason>", or, once a report token was read,
 * "sandbox-init[<token>:<status>]: <reason>": the orchestrator's proof that the command never ran (it can then
 * answer as a cold start that failed). The command can never forge it: the token exists only in the
 * message, which this process consumed, and in its memory, which the execve replaced.
 *
 * The status channel (status "3"). Then this process stays PID 1: it forks the command, forwards it the
 * signals it gets, reaps every process, and once the command ended kills what it left behind (kill -1:
 * every other process of the PID namespace, as the runtime would when PID 1 exits) and writes ONE line on
 * descriptor 3 -- a pipe whose other end the orchestrator reads -- then exits with the command's status
 * (128 + the signal's number for a command killed by one, as the runtime reports it):
 *     sandbox-status v1 <token> ran=<0|1> exit=<n> signal=<n> stopped=<n> oom_kills=<n> cpu_ns=<n>
 *         memory_peak=<n> pids_peak=<n> pids_hits=<n> started_ns=<n> finished_ns=<n>\n
 * (one line; -1: unknown). ran=0: the program could not be executed (exit 126/127, as above). stopped: the
 * first signal it forwarded that came from outside the PID namespace (the runtime stopping the sandbox: then
 * the runtime's account is the end), 0 for none. The figures are its own cgroup's (v1 or v2, as the runtime
 * mounted it at /sys/fs/cgroup; files opened before the command exists): OOM kills, CPU and refused process
 * creations since the launch, the memory and pids peaks of the container.
 * The command can never write that line: descriptor 3 is close-on-exec (never inherited), this process is
 * not dumpable (its /proc/1/fd and memory are root's: the command has no capability), the pipe's name is
 * removed by the orchestrator before the launch message is sent, and the line needs the token.
 * Kubernetes: descriptor 3 is opened by the pod's barrier. Docker: this program's one argument names the
 * pipe (the orchestrator holds its reading end before the container starts): it is opened as descriptor 3
 * before the message is read, without waiting (no reader: no descriptor 3, so a launch asking for the
 * channel is refused, exit 125).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/close_range.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAGIC "SBX3"
#define STATUS_FD 3
#define MAX_PAYLOAD (1024 * 1024)
#define MAX_ITEMS 4096
#define REPORT_LEN 32
#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

/* the launch's report token, once read: it marks the line die() writes as this init's (see the top) */
static const char *report = "";

static void die(int status, const char *what, const char *detail) {
    const char *sep = detail ? ": " : "";
    if (report[0])
        dprintf(2, "sandbox-init[%s:%d]: %s%s%s\n", report, status, what, sep, detail ? detail : "");
    else
        dprintf(2, "sandbox-init: %s%s%s\n", what, sep, detail ? detail : "");
    _exit(status);
}

/* exactly n bytes of fd 0, or die: the message is all or nothing */
static void read_exactly(unsigned char *buf, size_t n) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(0, buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            die(125, "the launch message ended early", r < 0 ? strerror(errno) : NULL);
        got += (size_t)r;
    }
}

struct cursor {
    char *at;
    char *end;
};

/* the next NUL-terminated string of the payload, or die */
static char *next_string(struct cursor *c) {
    char *s = c->at;
    if (s >= c->end)
        die(125, "malformed launch message", "a string missing");
    char *nul = memchr(s, '\0', (size_t)(c->end - s));
    if (nul == NULL)
        die(125, "malformed launch message", "a string without its end");
    c->at = nul + 1;
    return s;
}

static size_t next_count(struct cursor *c, size_t least) {
    char *text = next_string(c);
    char *rest = NULL;
    errno = 0;
    unsigned long n = strtoul(text, &rest, 10);
    if (errno != 0 || rest == text || *rest != '\0' || text[0] == '-' || text[0] == '+' || n < least ||
        n > MAX_ITEMS)
        die(125, "malformed launch message", "a bad count");
    return (size_t)n;
}

/* execve argv[0] as given when it holds a '/', else found in the message's PATH (the default one when it
 * has none), as the engine's runtime does: never through a shell (execvp would run a file that is not a
 * program with /bin/sh), and never in the working directory for an empty PATH entry (the workspace is the
 * workload's own). Returns the errno of the failure that says most (a file found but refused). */
static int exec_in_path(char **argv, char **env) {
    if (strchr(argv[0], '/') != NULL) {
        execve(argv[0], argv, env);
        return errno;
    }
    const char *path = DEFAULT_PATH;
    for (char **e = env; *e != NULL; e++)
        if (strncmp(*e, "PATH=", 5) == 0)
            path = *e + 5;
    size_t name = strlen(argv[0]);
    int failure = ENOENT;
    for (const char *dir = path;; dir++) {
        const char *end = strchrnul(dir, ':');
        size_t len = (size_t)(end - dir);
        char candidate[4096];
        /* dir, '/', name, NUL */
        if (len > 0 && len < sizeof candidate && name < sizeof candidate - len - 1) {
            memcpy(candidate, dir, len);
            candidate[len] = '/';
            memcpy(candidate + len + 1, argv[0], name + 1);
            execve(candidate, argv, env);
            if (errno != ENOENT && errno != ENOTDIR)
                failure = errno;
        }
        if (*end == '\0')
            return failure;
        dir = end;
    }
}

/* -- the status channel -------------------------------------------------------------------------------- */

/* One of the cgroup's counter files, opened before the command exists and read again in place at the end:
 * the command may lower this process's descriptor limit (prlimit on PID 1: same user), never blind it. */
struct counter {
    int fd; /* -1: none of its files exists here (gVisor keeps few) */
    const char *key; /* the line's name in a file of "key value" lines, or NULL: the file's only number */
    long long scale; /* to the reported unit */
};

struct source {
    const char *path;
    const char *key;
    long long scale;
};

/* the first of a table of files that opens (cgroup v2's name, then v1's) */
static struct counter open_counter(const struct source *sources, size_t n) {
    for (size_t i = 0; i < n; i++) {
        int fd = open(sources[i].path, O_RDONLY | O_CLOEXEC);
        if (fd >= 0)
            return (struct counter){fd, sources[i].key, sources[i].scale};
    }
    return (struct counter){-1, NULL, 1};
}

/* its value now, or -1 when it cannot be read */
static long long read_counter(struct counter c) {
    if (c.fd < 0)
        return -1;
    char text[4096];
    ssize_t n = pread(c.fd, text, sizeof text - 1, 0);
    if (n <= 0)
        return -1;
    text[n] = '\0';
    const char *at = text;
    if (c.key != NULL) {
        size_t len = strlen(c.key);
        for (at = text; at != NULL; at = strchr(at, '\n'), at = at ? at + 1 : NULL)
            if (strncmp(at, c.key, len) == 0 && at[len] == ' ')
                break;
        if (at == NULL)
            return -1;
        at += len + 1;
    }
    char *end = NULL;
    errno = 0;
    long long value = strtoll(at, &end, 10);
    if (errno != 0 || end == at || value < 0 || value > LLONG_MAX / c.scale)
        return -1;
    return value * c.scale;
}

static const struct source OOM_KILLS[] = {
    {"/sys/fs/cgroup/memory.events", "oom_kill", 1},
    {"/sys/fs/cgroup/memory/memory.oom_control", "oom_kill", 1},
};
static const struct source CPU_NS[] = {
    {"/sys/fs/cgroup/cpu.stat", "usage_usec", 1000},
    {"/sys/fs/cgroup/cpuacct/cpuacct.usage", NULL, 1},
    {"/sys/fs/cgroup/cpu,cpuacct/cpuacct.usage", NULL, 1},
};
static const struct source MEMORY_PEAK[] = {
    {"/sys/fs/cgroup/memory.peak", NULL, 1},
    {"/sys/fs/cgroup/memory/memory.max_usage_in_bytes", NULL, 1},
};
static const struct source PIDS_PEAK[] = {
    {"/sys/fs/cgroup/pids.peak", NULL, 1},
    {"/sys/fs/cgroup/pids/pids.peak", NULL, 1},
};
static const struct source PIDS_HITS[] = {
    {"/sys/fs/cgroup/pids.events", "max", 1},
    {"/sys/fs/cgroup/pids/pids.events", "max", 1},
};
#define COUNT(table) (sizeof table / sizeof table[0])

/* the growth of a counter since ``before``; -1 unless both readings are known */
static long long growth(long long before, long long after) {
    return before >= 0 && after >= before ? after - before : -1LL;
}

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* signals a supervisor cannot take for the command: faults of its own, and the unblockable ones */
static int forwarded(int sig) {
    switch (sig) {
    case SIGKILL: case SIGSTOP: case SIGSEGV: case SIGBUS: case SIGILL: case SIGFPE: case SIGABRT:
    case SIGTRAP: case SIGSYS: case SIGTTIN: case SIGTTOU: case SIGPIPE:
        return 0;
    default:
        return 1;
    }
}

/* Fork the command, forward signals, reap; then kill what it left, report its end once on STATUS_FD and
 * exit as it did. Never returns. */
static void supervise(char **argv) {
    sigset_t all, original;
    sigemptyset(&all);
    for (int sig = 1; sig < NSIG; sig++)
        if (forwarded(sig))
            sigaddset(&all, sig);
    if (sigprocmask(SIG_BLOCK, &all, &original) != 0)
        die(125, "cannot block signals", strerror(errno));
    int exec_failed[2];
    if (pipe2(exec_failed, O_CLOEXEC) != 0)
        die(125, "cannot make a pipe", strerror(errno));
    struct counter oom_kills = open_counter(OOM_KILLS, COUNT(OOM_KILLS));
    struct counter cpu_ns = open_counter(CPU_NS, COUNT(CPU_NS));
    struct counter memory_peak = open_counter(MEMORY_PEAK, COUNT(MEMORY_PEAK));
    struct counter pids_peak = open_counter(PIDS_PEAK, COUNT(PIDS_PEAK));
    struct counter pids_hits = open_counter(PIDS_HITS, COUNT(PIDS_HITS));
    int null = open("/dev/null", O_RDWR | O_CLOEXEC); /* before the command can lower our descriptor limit */
    long long oom_before = read_counter(oom_kills);
    long long cpu_before = read_counter(cpu_ns);
    long long hits_before = read_counter(pids_hits);
    long long started = now_ns();
    pid_t child = fork();
    if (child < 0)
        die(125, "cannot fork", strerror(errno));
    if (child == 0) {
        close(exec_failed[0]);
        if (sigprocmask(SIG_SETMASK, &original, NULL) != 0)
            die(125, "cannot unblock signals", strerror(errno));
        int failure = exec_in_path(argv, environ);
        ssize_t written = write(exec_failed[1], &failure, sizeof failure);
        (void)written;
        die(failure == ENOENT || failure == ENOTDIR ? 127 : 126, argv[0], strerror(failure));
    }
    close(exec_failed[1]);
    signal(SIGPIPE, SIG_IGN); /* a reader gone is a report lost, never this process killed */
    /* the command's streams are its own from now on: they end when its processes are gone, not when
     * this one exits */
    if (null >= 0) {
        dup2(null, 0);
        dup2(null, 1);
        dup2(null, 2);
        close(null);
    }
    int failure = 0;
    ssize_t got;
    do
        got = read(exec_failed[0], &failure, sizeof failure);
    while (got < 0 && errno == EINTR);
    close(exec_failed[0]);
    int ran = got == 0; /* end of file: the exec succeeded and closed its end */

    int status = 0;
    int stopped = 0; /* a signal from outside this PID namespace (the runtime stopping the sandbox) */
    for (int ended = 0; !ended;) {
        siginfo_t info;
        int sig = sigwaitinfo(&all, &info);
        if (sig < 0)
            continue;
        if (sig != SIGCHLD) {
            /* si_pid 0: sent from outside the namespace (the kubelet, an eviction): the command cannot
             * forge that, and its end is then the runtime's to say, not its own */
            if (info.si_code == SI_USER && info.si_pid == 0 && stopped == 0)
                stopped = sig;
            kill(child, sig);
            continue;
        }
        for (;;) {
            int st;
            pid_t pid = waitpid(-1, &st, WNOHANG);
            if (pid <= 0)
                break;
            /* a stop of a traced child is reported too: only an exit or a death is its end */
            if (pid == child && (WIFEXITED(st) || WIFSIGNALED(st))) {
                status = st;
                ended = 1;
            }
        }
    }
    long long finished = now_ns();
    kill(-1, SIGKILL); /* what the command left behind: every other process of this PID namespace */
    while (waitpid(-1, NULL, 0) > 0 || errno == EINTR)
        ;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    int signo = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    char line[512];
    int len = snprintf(line, sizeof line,
                       "sandbox-status v1 %s ran=%d exit=%d signal=%d stopped=%d oom_kills=%lld cpu_ns=%lld"
                       " memory_peak=%lld pids_peak=%lld pids_hits=%lld started_ns=%lld finished_ns=%lld\n",
                       report, ran, code, signo, stopped, growth(oom_before, read_counter(oom_kills)),
                       growth(cpu_before, read_counter(cpu_ns)), read_counter(memory_peak), read_counter(pids_peak),
                       growth(hits_before, read_counter(pids_hits)), started, finished);
    if (len > 0 && (size_t)len < sizeof line) {
        ssize_t written;
        do /* one write of less than PIPE_BUF bytes: the line arrives whole or not at all */
            written = write(STATUS_FD, line, (size_t)len);
        while (written < 0 && errno == EINTR);
    }
    close(STATUS_FD);
    _exit(code);
}

/* Docker's status pipe, as descriptor 3 (close-on-exec); left closed when it cannot be opened now. */
static void open_status(const char *path) {
    int fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return;
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0 ||
        (fd != STATUS_FD && dup3(fd, STATUS_FD, O_CLOEXEC) < 0)) {
        close(fd);
        return;
    }
    if (fd != STATUS_FD)
        close(fd);
}

int main(int args, char **arg) {
    /* its /proc entries (fd, mem, environ) root's, whatever user runs it: the command (same user, no
     * capability) can neither use its descriptors nor read its memory */
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0)
        die(125, "cannot make the init undumpable", strerror(errno));
    if (args > 2)
        die(125, "at most one argument: the status pipe", NULL);
    if (args == 2)
        open_status(arg[1]);
    /* the command inherits no descriptor but 0, 1 and 2 (a pod's status pipe is 3: see below) */
    if (close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) != 0)
        for (int fd = 3; fd < 1024; fd++)
            fcntl(fd, F_SETFD, FD_CLOEXEC);
    unsigned char header[8];
    read_exactly(header, sizeof header);
    if (memcmp(header, MAGIC, 4) != 0)
        die(125, "malformed launch message", "no magic");
    uint32_t length = ((uint32_t)header[4] << 24) | ((uint32_t)header[5] << 16) | ((uint32_t)header[6] << 8) |
                      (uint32_t)header[7];
    if (length == 0 || length > MAX_PAYLOAD)
        die(125, "malformed launch message", "a bad length");
    char *payload = malloc(length);
    if (payload == NULL)
        die(125, "out of memory", NULL);
    read_exactly((unsigned char *)payload, length);
    struct cursor c = {payload, payload + length};

    char *token = next_string(&c);
    size_t token_len = strlen(token);
    if (token_len != 0 && (token_len != REPORT_LEN || strspn(token, "0123456789abcdef") != REPORT_LEN))
        die(125, "malformed launch message", "a bad report token");
    report = token;
    char *status_mode = next_string(&c);
    int with_status = strcmp(status_mode, "3") == 0;
    if (!with_status && status_mode[0] != '\0')
        die(125, "malformed launch message", "a bad status descriptor");
    char *mode = next_string(&c);
    int with_stdin = strcmp(mode, "stdin") == 0;
    if (!with_stdin && strcmp(mode, "null") != 0)
        die(125, "malformed launch message", "a bad stdin mode");
    char *cwd = next_string(&c);
    if (cwd[0] != '/')
        die(125, "malformed launch message", "a relative working directory");

    size_t argc = next_count(&c, 1);
    char **argv = calloc(argc + 1, sizeof *argv);
    if (argv == NULL)
        die(125, "out of memory", NULL);
    for (size_t i = 0; i < argc; i++)
        argv[i] = next_string(&c);
    if (argv[0][0] == '\0')
        die(125, "malformed launch message", "an empty program name");

    size_t envc = next_count(&c, 0);
    char **env = calloc(envc + 1, sizeof *env);
    if (env == NULL)
        die(125, "out of memory", NULL);
    for (size_t i = 0; i < envc; i++) {
        env[i] = next_string(&c);
        char *eq = strchr(env[i], '=');
        if (eq == NULL || eq == env[i])
            die(125, "malformed launch message", "an environment entry without a name");
    }
    if (c.at != c.end)
        die(125, "malformed launch message", "bytes after the last string");
    if (with_status) {
        /* only under a token (the line's proof), as PID 1 (kill -1 must mean this container), on an open
         * descriptor that no command inherits */
        if (token_len == 0)
            die(125, "malformed launch message", "a status channel without a report token");
        if (getpid() != 1)
            die(125, "the status channel needs the init to be PID 1", NULL);
        int flags = fcntl(STATUS_FD, F_GETFD);
        if (flags < 0 || fcntl(STATUS_FD, F_SETFD, flags | FD_CLOEXEC) != 0)
            die(125, "the status descriptor is not open", strerror(errno));
    }

    if (!with_stdin) {
        int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (null < 0 || dup2(null, 0) < 0)
            die(125, "cannot open /dev/null", strerror(errno));
        close(null);
    }
    if (chdir(cwd) != 0)
        die(125, "cannot enter the working directory", strerror(errno));
    /* the message's variables over the engine's, as the engine merges a container's over its image's */
    for (size_t i = 0; i < envc; i++)
        if (putenv(env[i]) != 0)
            die(125, "cannot set the environment", strerror(errno));
    if (with_status)
        supervise(argv);
    int failure = exec_in_path(argv, environ);
    die(failure == ENOENT || failure == ENOTDIR ? 127 : 126, argv[0], strerror(failure));
    return 125;
}
